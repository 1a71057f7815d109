"""The vanilla rows of every paper's table: Naive Generation (no context) and Full Content (all top-k)."""

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
