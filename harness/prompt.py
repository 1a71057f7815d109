"""The shared generation prompt of CompSelect (000, section 4.3.2), used for every method.

System message verbatim from the paper; the user message is ``Question: {q}\\nDocuments:\\nDoc1: ...``.
With no documents (Naive Generation, or a method that kept nothing) the ``Documents:`` block is left empty,
so that the generator sees the same instruction in every setting.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.protocols import Messages

SYSTEM = (
    "You are a helpful, respectful, and honest assistant. Answer the question with couple of words using "
    "the provided documents. For example: Question: What is the capital of France? Output: Paris."
)


def render_documents(documents: Sequence[str]) -> str:
    """The documents block exactly as the generator sees it; CR counts the tokens of this text."""
    return "\n".join(f"Doc{j}: {d}" for j, d in enumerate(documents, start=1))


def build_messages(question: str, documents: Sequence[str], system: str = SYSTEM) -> Messages:
    user = f"Question: {question}\nDocuments:\n{render_documents(documents)}".rstrip("\n")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
