"""The two contracts of the harness: a ``Compressor`` (one per method) and a ``Generator`` (one per backend)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from harness.types import Compressed, Example, Generation

Messages = list[dict[str, str]]


@runtime_checkable
class Generator(Protocol):
    """A batched, greedy chat generator shared by every method of a run."""

    name: str

    def messages(self, question: str, documents: Sequence[str]) -> Messages:
        """The chat prompt of ``question`` over ``documents``: the run's one template (``harness.prompt``)."""
        ...

    def generate(self, prompts: Sequence[Messages]) -> list[Generation]:
        """Answer each chat prompt; the order of outputs follows the order of prompts."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under the generator's tokenizer, without special tokens."""
        ...

    def describe(self) -> dict[str, Any]:
        """Model id, file hash or revision, backend and decoding settings, for records."""
        ...


@runtime_checkable
class AnswerScorer(Protocol):
    """A generator that can also score a given answer under a prompt (teacher forcing, no decoding)."""

    def answer_nll(self, prompts: Sequence[Messages], answers: Sequence[str]) -> list[float]:
        """Mean negative log-likelihood per answer token of ``answers[i]`` after ``prompts[i]``."""
        ...


def answer_scorer(generator: Any, needed_by: str, hint: str = "") -> AnswerScorer:
    """``generator`` when it can score answers (``answer_nll``); otherwise a ``ConfigError`` (one line on the
    command line) naming what needs it and the generator that cannot (e.g. one behind a chat server)."""
    if isinstance(generator, AnswerScorer):
        return generator
    from harness.validate import ConfigError

    name = getattr(generator, "name", None) or type(generator).__name__
    raise ConfigError(
        f"{needed_by} needs answer log-likelihoods from the generator, but the generator {name} "
        f"({type(generator).__name__}) cannot score answers (no answer_nll: a chat server returns no prompt "
        f"log-probabilities){'; ' + hint if hint else ''}"
    )


@dataclass
class MethodEnv:
    """What the run hands a method before it compresses: the generator's token counter and the generator.

    Methods use ``count_tokens`` for token budgets (the same tokenizer that measures CR). ``generator``
    is there for methods whose training labels or values come from the generator (CI value, CompSelect).
    """

    count_tokens: Callable[[str], int]
    generator: Generator | None = None


class Compressor:
    """Base class of every method: subclasses implement ``compress``; batching, preparation and
    description have defaults.

    Subclasses that can batch (scoring many sentences in one forward pass) override ``compress_batch``.
    ``prepare`` is the optional query-independent step (e.g. indexing passages) that a method may run
    before the timed online compression.
    """

    name: str = "compressor"
    # whether the context depends on the run's generator (it calls it, or counts with its tokenizer): such a method
    # is computed under every generator, never read back from another reader's run (``harness.reuse``)
    reads_generator: bool = False

    def __init__(self) -> None:
        self.env: MethodEnv | None = None

    def bind(self, env: MethodEnv) -> None:
        """Receive the run's environment; called once before the first ``compress``."""
        self.env = env

    def prepare(self, examples: Sequence[Example]) -> None:
        """Query-independent work over the examples (default: nothing)."""

    def compress(self, example: Example) -> Compressed:
        raise NotImplementedError

    def compress_batch(self, examples: Sequence[Example]) -> list[Compressed]:
        return [self.compress(e) for e in examples]

    def describe(self) -> dict[str, Any]:
        """Models and parameters used, for records (override to add model ids and hashes)."""
        return {"name": self.name}

    def count_tokens(self, text: str) -> int:
        if self.env is None:
            raise RuntimeError(f"{type(self).__name__} was not bound to a run (call bind(MethodEnv(...)))")
        return self.env.count_tokens(text)
