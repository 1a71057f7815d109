"""Shared text utilities for methods and the core: sentence splitting, lexical scoring, context assembly.

Sentence splitting uses pysbd (rule-based, no model download). FineFilter split with a regex and CompSelect
with ``nltk.sent_tokenize``; pysbd is used everywhere here so that every method sees the same sentences.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from harness.types import Passage, Unit

_WS = re.compile(r"\s+")


@lru_cache(maxsize=1)
def _segmenter():
    import pysbd

    return pysbd.Segmenter(language="en", clean=False)


@lru_cache(maxsize=65536)
def _split_cached(text: str) -> tuple[str, ...]:
    sents = (_WS.sub(" ", s).strip() for s in _segmenter().segment(text))
    return tuple(s for s in sents if s)


def split_sentences(text: str) -> list[str]:
    """Split text into sentences (pysbd); whitespace inside a sentence is collapsed, empty ones dropped."""
    if not text or not text.strip():
        return []
    return list(_split_cached(text))


def forget_splits() -> None:
    """Empty the sentence-split memo (a latency pass times each example as unseen)."""
    _split_cached.cache_clear()


def passage_sentences(passages: Sequence[Passage]) -> list[list[str]]:
    """The sentences of each passage's text (titles are not split into sentences)."""
    return [split_sentences(p.text) for p in passages]


def _bm25s():
    """The bm25s module, its logger back at WARNING (bm25s sets its own to DEBUG on import: a line per index)."""
    import logging

    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s


def bm25_tokenize(texts: Sequence[str]) -> list[list[str]]:
    """Lower-cased word tokens without English stop words: the tokenization of every BM25 score here."""
    bm25s = _bm25s()
    return bm25s.tokenize(list(texts), stopwords="en", return_ids=False, show_progress=False)


def bm25_scores(query: str, docs: Sequence[str], k1: float = 1.5, b: float = 0.75) -> np.ndarray:
    """Okapi BM25 (bm25s, Lucene variant) of ``query`` against ``docs``, with IDF over ``docs`` alone.

    Returns one score per doc; all zeros when nothing overlaps or the docs are empty.
    """
    bm25s = _bm25s()

    if not docs:
        return np.zeros(0, dtype=np.float32)
    corpus = bm25_tokenize(docs)
    query_tokens = bm25_tokenize([query])[0]
    if not any(corpus) or not query_tokens:
        return np.zeros(len(docs), dtype=np.float32)
    index = bm25s.BM25(k1=k1, b=b)
    index.index(corpus, show_progress=False)
    vocab = index.vocab_dict
    known = [t for t in query_tokens if t in vocab]
    if not known:
        return np.zeros(len(docs), dtype=np.float32)
    return np.asarray(index.get_scores(known), dtype=np.float32)


def rank_desc(scores: Sequence[float]) -> list[int]:
    """Indices by descending score; ties keep the original order (stable)."""
    return sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))


def sentence_units(passages: Sequence[Passage]) -> tuple[list[Unit], list[str]]:
    """Every sentence of every passage as a ``Unit`` with its text, in original order."""
    units: list[Unit] = []
    texts: list[str] = []
    for pi, sents in enumerate(passage_sentences(passages)):
        for si, s in enumerate(sents):
            units.append(Unit(pi, si))
            texts.append(s)
    return units, texts


def assemble(passages: Sequence[Passage], kept: Sequence[Unit], with_titles: bool = False) -> list[str]:
    """Documents for the generator from kept units, in original order.

    Whole passages render with their title. Sentences are grouped by passage into one document each,
    joined by spaces, with the passage title on top only when ``with_titles``.
    """
    by_passage: dict[int, list[Unit]] = {}
    for u in sorted(set(kept), key=lambda u: (u.passage, -1 if u.sentence is None else u.sentence)):
        by_passage.setdefault(u.passage, []).append(u)
    sents_cache: dict[int, list[str]] = {}
    docs: list[str] = []
    for pi, units in by_passage.items():
        p = passages[pi]
        if any(u.sentence is None for u in units):
            docs.append(p.render())
            continue
        sents = sents_cache.setdefault(pi, split_sentences(p.text))
        body = " ".join(sents[u.sentence] for u in units)
        docs.append(f"{p.title}\n{body}" if with_titles and p.title else body)
    return docs
