"""EDC²-RAG: Efficient Dynamic Clustering-based document Compression (paper 004).

``method.py`` (``EDC2``, the ``conf/method/edc2.yaml`` target), ``cluster.py`` (dynamic clustering), ``llm.py`` (the
extraction LLM: the model layer or an OpenAI-compatible server), ``prompts.py``. No training.
"""
