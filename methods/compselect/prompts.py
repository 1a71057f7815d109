"""CompSelect's prompts (000, App. A; identical to FineFilter 003, Tables 9 and 10) and the text formats
around them.

- Extractor (Table 9), verbatim with the line breaks of 003 App. B; the question and the documents follow it
  as in the authors' code (``Question: {q}`` then ``Documents:`` with one ``document {j}: {text}`` line per
  passage).
- Truncator (Table 10), verbatim; the ranked list is ``Sentence {i}: {clue}`` lines (``i`` = rank, from 1).
  The paper does not fix the output format; CompSelect's target is the kept prefix as the same ``Sentence i:``
  lines (empty for the empty set), FineFilter's is the bare index ``K`` (``0`` for the empty set).
- Targets and generated clues use ``Sentence {i}: {text}`` lines (003 App. B; the code writes ``sentence
  {j}:``).
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.protocols import Messages

EXTRACTOR_PROMPT = (
    "You are a highly skilled assistant specializing in extracting relevant information from provided "
    "documents. Your task is to identify and extract sentences from the documents as much as possible that "
    "are most directly useful for answering the given question. Rank the sentences in order of relevance, "
    "with the most relevant sentence listed first. Preface each sentence with its sequence number as "
    "follows: Sentence 1:\n"
    "......\n"
    "Sentence n:\n"
    "Question: {question}\n"
    "Documents: {documents}"
)

TRUNCATOR_PROMPT = (
    "You are a highly skilled assistant specializing in optimizing language model efficiency by truncating "
    "context based on question complexity and document quality. Given a question and a ranked list of "
    "sentences, identify and retain the most relevant ones while truncating the irrelevant sentences.\n"
    "Question: {question}\n\n"
    "Ranked List:\n"
    "{ranked}"
)

OUTPUTS = ("text", "index")


def sentence_lines(texts: Sequence[str]) -> str:
    """``Sentence 1: ...`` lines, numbered from 1 in the given order."""
    return "\n".join(f"Sentence {i}: {t}" for i, t in enumerate(texts, start=1))


def render_documents(documents: Sequence[str]) -> str:
    """The documents block of the extractor prompt (authors' code: ``document {j}:{text}``, one per line)."""
    return "\n".join(f"document {j}: {d}" for j, d in enumerate(documents, start=1))


def extractor_messages(question: str, documents: Sequence[str]) -> Messages:
    return [
        {
            "role": "user",
            "content": EXTRACTOR_PROMPT.format(question=question, documents=render_documents(documents)),
        }
    ]


def truncator_messages(question: str, ranked: Sequence[str]) -> Messages:
    return [{"role": "user", "content": TRUNCATOR_PROMPT.format(question=question, ranked=sentence_lines(ranked))}]


def truncator_target(ranked: Sequence[str], k: int, output: str = "text") -> str:
    """The truncator's training target for keeping the first ``k`` ranked clues (``k = 0``: the empty set)."""
    if output not in OUTPUTS:
        raise ValueError(f"truncator output={output!r}; valid: {', '.join(OUTPUTS)}")
    if not 0 <= k <= len(ranked):
        raise ValueError(f"k={k} outside [0, {len(ranked)}]")
    return str(k) if output == "index" else sentence_lines(ranked[:k])
