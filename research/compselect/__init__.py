"""Analyses of CompSelect's trained stages (``methods/compselect``): ``extractor_probe`` (Recall-1),
``truncator_probe`` (keep-or-not decisions, the empty threshold), ``reranker_cv`` (positive rules, cross-validated);
``data`` loads the train questions they read."""
