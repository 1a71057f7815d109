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

A base model (Gemma-3-270M, no chat template) is asked with a ``CompletionPrompt`` instead: plain text that the
model continues (``completion_k0``, ``completion_k1``, ``completion_k3``: a one-line instruction, then ``k`` worked
examples in the same ``Documents:`` / ``Question:`` / ``Answer:`` format, then the question, ending on
``Answer:``). Its messages are one message of role ``completion`` (``COMPLETION_ROLE``), which the model layer
encodes as raw text (``harness.lm.model.LM.encode_chat``), and its ``stop`` (a newline) ends the reply at the
first line break. The examples are fixed train questions outside the validation cut (``SHOTS``).
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


COMPLETION_ROLE = "completion"
COMPLETION_INSTRUCTION = "Answer the question with a couple of words using the provided documents."


@dataclass(frozen=True)
class Shot:
    """A worked example of a completion prompt: a train question, one document (title and the gold sentence)."""

    question: str
    document: str
    answer: str


# Train questions at positions 100-103 of the seeded shuffle (seed 0): outside the validation cut (the first 100),
# each with the sentence of its top-5 passages that holds the answer. NQ, TriviaQA, NQ.
SHOTS = (
    Shot(
        "when does season 7 game of thrones dvd release",  # nq-open-test-1435
        "Game of Thrones (season 7)\nThe season was released on Blu-ray and DVD in region 1 on December 12, 2017.",
        "December 12, 2017",
    ),
    Shot(
        "The official beverage of Puerto Rico since 1978, what drink consists of rum, coconut cream, and pineapple "
        "juice?",  # tqa-dev-ib4-0721
        "Caribe Hilton Hotel\nThe hotel claims to be the birthplace of the Piña colada.",
        "Piña colada",
    ),
    Shot(
        "what happened to the west wing of the white house during a christmas party in 1929",  # nq-open-test-2055
        "West Wing\nOn December 24, 1929, the West Wing was significantly damaged by an electrical fire.",
        "an electrical fire",
    ),
)


@dataclass(frozen=True)
class CompletionPrompt:
    """A named completion template for a base model: the instruction, ``shots`` worked examples, the question
    over its documents and ``Answer:``; the reply ends at ``stop``."""

    name: str
    shots: int = 0
    stop: str = "\n"

    @staticmethod
    def block(question: str, documents: Sequence[str], answer: str = "") -> str:
        docs = f"Documents:\n{render_documents(documents)}".rstrip("\n")
        return f"{docs}\nQuestion: {question}\nAnswer:" + (f" {answer}" if answer else "")

    def text(self, question: str, documents: Sequence[str]) -> str:
        shots = [self.block(s.question, [s.document], s.answer) for s in SHOTS[: self.shots]]
        return "\n\n".join([COMPLETION_INSTRUCTION, *shots, self.block(question, documents)])

    def messages(self, question: str, documents: Sequence[str]) -> Messages:
        return [{"role": COMPLETION_ROLE, "content": self.text(question, documents)}]

    def describe(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "instruction": COMPLETION_INSTRUCTION,
            "examples": [asdict(s) for s in SHOTS[: self.shots]],
        }


def is_completion(messages: Messages) -> bool:
    """Whether ``messages`` are a completion prompt (one ``completion`` message: raw text, no chat template)."""
    return len(messages) == 1 and messages[0].get("role") == COMPLETION_ROLE


PROMPTS: dict[str, Prompt | CompletionPrompt] = {
    p.name: p
    for p in (
        Prompt("paper", example="system"),
        Prompt("no_example"),
        Prompt("example_turn", example="turn"),
        Prompt("answer_cue", answer_cue="Answer:"),
        Prompt("documents_first", documents_first=True),
        Prompt("documents_first_turn", documents_first=True, example="turn"),
        Prompt("documents_first_cue", documents_first=True, answer_cue="Answer:"),
        CompletionPrompt("completion_k0"),
        CompletionPrompt("completion_k1", shots=1),
        CompletionPrompt("completion_k3", shots=3),
    )
}


def get_prompt(name: str) -> Prompt | CompletionPrompt:
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
