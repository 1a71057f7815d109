"""The vanilla rows of every paper's table: Naive Generation (no context), Full Content (all top-k) and the
retriever's first passages alone (CompSelect's Figure 1 and FineFilter's Table 1 report its Top-1)."""

from __future__ import annotations

from typing import Any

from harness.protocols import Compressor
from harness.types import Compressed, Example, Unit


class Naive(Compressor):
    """Closed-book generation: the generator sees the question and an empty document list."""

    name = "naive"

    def compress(self, example: Example) -> Compressed:
        return Compressed(documents=[], units=[])


class Full(Compressor):
    """Full Content: every top-k passage, title and text, in retrieval order (CR 1 by definition)."""

    name = "full"

    def compress(self, example: Example) -> Compressed:
        return Compressed(
            documents=[p.render() for p in example.passages],
            units=[Unit(i) for i in range(len(example.passages))],
        )

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


class TopPassages(Compressor):
    """The first ``k`` passages as the run reads them (after the dataset's ranking: BM25 on HotpotQA), title and text,
    nothing else: the retriever's own Top-k (``top1``: CompSelect's Figure 1, FineFilter's Table 1 "Top-1")."""

    name = "top1"

    def __init__(self, k: int = 1) -> None:
        super().__init__()
        if k < 1:
            raise ValueError(f"k={k}: keep at least one passage")
        self.k = int(k)

    def compress(self, example: Example) -> Compressed:
        kept = example.passages[: self.k]
        return Compressed(documents=[p.render() for p in kept], units=[Unit(i) for i in range(len(kept))])

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "k": self.k}
