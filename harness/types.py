"""The data that flows through one run: passages, examples, compressed contexts and generations."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Passage:
    """One retrieved passage, in retrieval order inside its example."""

    text: str
    title: str = ""
    score: float | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def render(self) -> str:
        """The passage as the generator sees it: the title on its own line, then the text."""
        return f"{self.title}\n{self.text}" if self.title else self.text


@dataclass(frozen=True)
class Example:
    """A question with its gold answers and its top-k retrieved passages."""

    id: str
    question: str
    answers: tuple[str, ...]
    passages: tuple[Passage, ...]
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Unit:
    """A kept unit of the original passages: a whole passage (``sentence is None``) or one sentence."""

    passage: int
    sentence: int | None = None


@dataclass
class Compressed:
    """What a compressor hands to the generator.

    ``documents`` are shown to the generator as ``Doc1: ...``, ``Doc2: ...`` in this order; an empty list
    means closed-book generation. ``units`` name the kept passages or sentences when the method keeps
    units of the input (``None`` for abstractive methods). ``timings`` holds per-stage seconds for
    multi-stage methods; ``meta`` is free (requested rate, thresholds, intermediate outputs).
    """

    documents: list[str]
    units: list[Unit] | None = None
    timings: dict[str, float] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Generation:
    """One generator output: the raw text and the answer after the papers' post-processing; ``truncated``: the
    tokens its prompt lost per part to fit the model (``harness.lm.fit``; empty when none)."""

    text: str
    answer: str
    prompt_tokens: int
    completion_tokens: int
    truncated: dict[str, int] = field(default_factory=dict)
