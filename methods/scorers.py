"""Relevance scorers that selection methods compose with (``scorer:`` in a method config).

Every scorer maps (question, unit texts) to one score per unit, higher is more relevant.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from harness.text import bm25_scores


class Scorer(Protocol):
    def score(self, question: str, texts: Sequence[str]) -> list[float]: ...

    def describe(self) -> dict[str, Any]: ...


class BM25Scorer:
    """Okapi BM25 (bm25s, Lucene variant) with IDF over the example's own units."""

    def __init__(self, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b

    def load(self) -> None:
        """Nothing to load (scorers with models load here, before timing starts)."""

    def score(self, question: str, texts: Sequence[str]) -> list[float]:
        return [float(s) for s in bm25_scores(question, texts, self.k1, self.b)]

    def describe(self) -> dict[str, Any]:
        return {"scorer": "bm25", "library": "bm25s", "k1": self.k1, "b": self.b}
