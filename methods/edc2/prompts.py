"""EDC²-RAG prompts and the summary filter (paper 004).

``COMPRESS`` is the query-aware extraction prompt of section 4.3 (main text), verbatim; its few-shot
header (``##Example 1##: ...``) is written only when examples are configured (the paper prints placeholders;
zero-shot is the default here, papers.md 4.9 item 5). ``ESCAPE`` is the prompt's line that asks for "No content to
extract"; ``escape_line=False`` leaves it out (a departure, for a small LM that gives that line for every cluster:
research/backbone/README.md). Documents inside a cluster are numbered
``1.{doc}\\n2.{doc}`` as in the released code. ``DROP_MARKERS`` is the released code's rule for summaries
that carry nothing: any of these substrings drops the summary, and so does any ``?`` unless
``drop_question_marks`` is off; an empty output is dropped too (not in the code: an empty string cannot help).
"""

from __future__ import annotations

from collections.abc import Sequence

COMPRESS = (
    "##Instruction##:\n"
    "You have been provided with a question and a collection of related documents. Your task is to extract "
    "the relevant information from these documents that can help resolve this question. Focus on "
    "identifying key points, evidence, or details that are clearly connected to the question.\n"
    "The extracted content must be objective, verifiable, and directly traceable to the original documents. "
    "Avoid making inferences or drawing conclusions based on the extracted content and DO NOT answer this "
    "question directly.\n"
    "{escape}"
    "##Question##:\n"
    "{query}\n"
    "##Documents##:\n"
    " {docs}\n"
    "##Summarized Docs##:\n"
)

ESCAPE = 'If you find that the documents contain no relevant information, please output "No content to extract".\n'

DROP_MARKERS = (
    "No content to",
    "no content to",
    "I'm sorry",
    "I am sorry",
    "I can not provide",
    "I can't provide",
    "Could you clarify",
    "Sorry, I",
)


def number(texts: Sequence[str]) -> str:
    """``1.{t1}\\n2.{t2}...``: how the released code lists documents (and surviving summaries)."""
    return "\n".join(f"{i}.{t}" for i, t in enumerate(texts, start=1))


def compress_prompt(query: str, docs: Sequence[str], examples: Sequence[str] = (), escape_line: bool = True) -> str:
    shots = "".join(f"##Example {i}##:\n{ex}\n" for i, ex in enumerate(examples, start=1))
    return shots + COMPRESS.format(query=query, docs=number(docs), escape=ESCAPE if escape_line else "")


def keep_summary(summary: str, drop_question_marks: bool = True) -> bool:
    """False for a summary that says there is nothing to extract (or refuses, or asks back)."""
    s = summary.strip()
    if not s or any(m in s for m in DROP_MARKERS):
        return False
    return not (drop_question_marks and "?" in s)
