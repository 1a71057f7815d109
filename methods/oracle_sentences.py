"""CompSelect's "Sentences w/ answer" (Table 1): the sentences of the top-k passages that contain a gold answer.

An oracle: it reads the gold answers, so it is an upper-bound row, marked ``oracle`` in its records. The match
rule follows the authors' code, a raw case-sensitive substring test of every gold alias (``match: raw``);
``match: normalized`` tests SQuAD-normalised strings instead. Kept sentences stay in original order, grouped by
passage without titles.
"""

from __future__ import annotations

from typing import Any

from harness.metrics import normalize
from harness.protocols import Compressor
from harness.text import assemble, sentence_units
from harness.types import Compressed, Example

MATCHES = ("raw", "normalized")


def contains_answer(sentence: str, answers: tuple[str, ...] | list[str], match: str = "raw") -> bool:
    if match == "raw":
        return any(a in sentence for a in answers)
    s = f" {normalize(sentence)} "
    return any(f" {normalize(a)} " in s for a in answers if normalize(a))


class OracleSentences(Compressor):
    name = "oracle_sentences"

    def __init__(self, match: str = "raw") -> None:
        super().__init__()
        if match not in MATCHES:
            raise ValueError(f"match={match!r}; valid: {', '.join(MATCHES)}")
        self.match = match

    def compress(self, example: Example) -> Compressed:
        units, texts = sentence_units(example.passages)
        kept = [u for u, t in zip(units, texts, strict=True) if contains_answer(t, example.answers, self.match)]
        return Compressed(documents=assemble(example.passages, kept), units=kept, meta={"oracle": True})

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "oracle": True, "match": self.match}
