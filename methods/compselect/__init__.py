"""CompSelect: compact clue selection for RAG (000: Zhang et al., "Less is More: Compact Clue Selection for
Efficient Retrieval-Augmented Generation Reasoning", arXiv 2502.11811; FineFilter, 003, is its earlier
version).

Three stages (000 section 4; papers.md sections 3 and 5):

1. Clue extractor: an instruct LM with a LoRA adapter, prompted with Table 9 over the question and the
   sentences of the top-k passages, writes ``Sentence i: text`` lines; each is mapped back to the source
   sentence it copies (``parsing.py``: exact match, else token F1 >= 0.8; unmatched lines are dropped and
   recorded).
2. Clue reranker: a Sentence-BERT bi-encoder orders the clues by cosine(question, clue) (``reranker.py``, or
   any scorer from config).
3. Adaptive truncator: the instruct LM with a second LoRA adapter, prompted with Table 10 and the ranked list,
   writes the minimal sufficient prefix (CompSelect: its text; FineFilter: the index K). An empty output keeps
   nothing and the generator answers closed-book (000 section 5.5.2).

The generator sees the kept clues in ranked order, one per ``Doc`` line (``clue_context``: what is shown of
each). Per example, ``Compressed.meta`` records the extracted, ranked and kept clues with their (passage,
sentence) indices, the truncator's output and the cascading-error flags of Table 6 (``meta["diagnostics"]``);
``Compressed.timings`` has ``extract``, ``rerank`` and ``truncate`` seconds.

Layout: the pipeline is ``method.py`` (``CompSelect``, the ``conf/method`` target) with ``parsing.py``,
``prompts.py``, ``reranker.py``, ``truncator.py`` (the thresholded keep-or-not decision) and ``cascade.py``
(Table 6's diagnostics); training is ``train.py`` and its ``train_*.py`` helpers; ``artifacts/<profile>/`` holds
the trained adapters, labels and manifest; ``README.md`` the measurements.

Training (``python -m methods.compselect.train``, ``conf/train/compselect*.yaml``; ``train.py``) builds the
targets from the data and the generator's own answers: answer sentences (+ KNN within cosine distance epsilon)
for the extractor, SubEM-correct single clues for the reranker (MultipleNegativesRankingLoss), the smallest
correct prefix (the paper's argmin, not the authors' code's largest) for the truncator.

Defaults (paper profile): Llama-3.2-3B-Instruct + LoRA rank 64 / alpha 128, lr 1e-4, 12 epochs, max input 4096
(training) / 2048 (inference), greedy decoding with 256 new tokens (the authors use temperature 0.01); SBERT
from distilbert-base-uncased, bs 64, lr 2e-5, 4 epochs, 1000 warm-up steps; epsilon = 0 (main results).

Departures (each also noted where it happens):
- Sentences come from ``harness.text`` (pysbd), as for every method here; the authors use nltk.
- Generated clues are mapped back to source sentences (papers.md 3.10 item 8) rather than passed verbatim, so
  the method stays extractive and CR counts real input text.
- Embedded profile (CPU, 2 cores): SmolLM2-135M-Instruct + LoRA rank 8 on every attention and MLP projection,
  ~1,000 training examples, 2-3 epochs, shorter inputs; the reranker is all-MiniLM-L6-v2 fine-tuned
  with a LoRA adapter (so the committed artifact is small) instead of a full fine-tune of distilbert.
- Greedy decoding everywhere instead of temperature 0.01 sampling (equivalent up to ties).
- Embedded profile: the extractor reads 1,024 prompt tokens at inference, as in its training (paper: trained
  at 4,096, run at 2,048; ``models.compselect.max_input_tokens``), and the truncator keeps nothing only when its
  first-token probability of the empty set reaches ``models.compselect.empty_threshold``, chosen on validation
  labels (``truncator.py``); the paper profile keeps the greedy output (``null``).
- Embedded profile: the generator reads each kept clue with its neighbouring sentences under its passage title
  (``clue_context: window``, ``context.py``), chosen on validation; the paper profile shows the clue sentences.
- Embedded profile: the clue reranker reads each clue under its passage's title (``reranker_input: titled``),
  though it was trained on the clues alone; chosen on validation. The paper profile reads the clue (000).
- Embedded profile: extractor targets shorter than five sentences are padded with the shown sentences most
  similar to the question (``extractor.pad_to``, ``train_labels.pad_target``): MiniLM's KNN expansion adds nothing,
  and a 135M extractor trained on the one-sentence targets writes one clue (Recall-1 42% unpadded, 56% padded
  to three, 61.5% to five, on held-out labelling questions). The truncator labels fall back to the prefix
  under which the generator finds the gold answer most likely where no prefix makes it answer
  (``truncator.fallback``).
"""
