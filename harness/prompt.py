"""The shared generation prompt: one named template for every method of a run (the generator's ``prompt``).

``paper`` is CompSelect's (000, section 4.3.2), byte for byte: the system message below, and the user message
``Question: {q}\\nDocuments:\\nDoc1: ...``. The paper profile uses it. The other templates were the candidates of
the embedded profile's prompt selection (docs/models-and-prompts.md, "The embedded prompt"): SmolLM2-135M
repeats the paper's prompt instead of answering when the context is long. They differ from it in one or more of:

- ``documents_first``: the documents block before the question;
- ``example``: the paper's worked example (``What is the capital of France?`` -> ``Paris``) inside the system
  message (``system``), as an earlier user/assistant exchange in the same format (``turn``), or dropped (``none``);
- ``answer_cue``: a last line of the user message (``Answer:``) that the reply continues.

With no documents (Naive Generation, or a method that kept nothing) the documents block is left empty, so the
generator sees the same instruction in every setting.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from harness.protocols import Messages

INSTRUCTION = (
    "You are a helpful, respectful, and honest assistant. Answer the question with couple of words using "
    "the provided documents."
)
SYSTEM = f"{INSTRUCTION} For example: Question: What is the capital of France? Output: Paris."
# The worked example as a chat exchange: its question, one short document and its answer.
EXAMPLE_QUESTION = "What is the capital of France?"
EXAMPLE_DOCUMENTS = ("France\nParis is the capital and most populous city of France.",)
EXAMPLE_ANSWER = "Paris"


def render_documents(documents: Sequence[str]) -> str:
    """The documents block exactly as the generator sees it; CR counts the tokens of this text."""
    return "\n".join(f"Doc{j}: {d}" for j, d in enumerate(documents, start=1))


@dataclass(frozen=True)
class Prompt:
    """A named chat template over (question, documents); ``messages`` renders it."""

    name: str
    documents_first: bool = False
    example: Literal["system", "turn", "none"] = "none"
    answer_cue: str = ""

    @property
    def system(self) -> str:
        return SYSTEM if self.example == "system" else INSTRUCTION

    def user(self, question: str, documents: Sequence[str]) -> str:
        q, docs = f"Question: {question}", f"Documents:\n{render_documents(documents)}".rstrip("\n")
        text = f"{docs}\n{q}" if self.documents_first else f"{q}\n{docs}"
        return f"{text}\n{self.answer_cue}" if self.answer_cue else text

    def messages(self, question: str, documents: Sequence[str]) -> Messages:
        turns: Messages = [{"role": "system", "content": self.system}]
        if self.example == "turn":
            turns += [
                {"role": "user", "content": self.user(EXAMPLE_QUESTION, EXAMPLE_DOCUMENTS)},
                {"role": "assistant", "content": EXAMPLE_ANSWER},
            ]
        return [*turns, {"role": "user", "content": self.user(question, documents)}]

    def describe(self) -> dict[str, Any]:
        return {**asdict(self), "system": self.system}


PROMPTS = {
    p.name: p
    for p in (
        Prompt("paper", example="system"),
        Prompt("no_example"),
        Prompt("example_turn", example="turn"),
        Prompt("answer_cue", answer_cue="Answer:"),
        Prompt("documents_first", documents_first=True),
        Prompt("documents_first_turn", documents_first=True, example="turn"),
        Prompt("documents_first_cue", documents_first=True, answer_cue="Answer:"),
    )
}


def get_prompt(name: str) -> Prompt:
    """The template called ``name``; a ``ConfigError`` listing the valid names otherwise."""
    if name not in PROMPTS:
        from harness.validate import ConfigError

        raise ConfigError(f"generator.prompt={name!r}; valid: {', '.join(PROMPTS)}")
    return PROMPTS[name]


def build_messages(question: str, documents: Sequence[str], prompt: str = "paper") -> Messages:
    """The chat messages of ``question`` over ``documents`` under the template ``prompt``."""
    return get_prompt(prompt).messages(question, documents)


def messages_of(generator: Any) -> Callable[[str, Sequence[str]], Messages]:
    """How ``generator`` asks a question over documents: its own template (``generator.messages``), or the
    paper's for an object without one (a bare LM that scores answers)."""
    return getattr(generator, "messages", None) or PROMPTS["paper"].messages
