"""Answer metrics and compression ratio, as defined in CompSelect (000) and FlashRAG.

- ``normalize``: SQuAD normalisation: lower-case, drop ``string.punctuation``, drop the articles a/an/the,
  collapse whitespace.
- ``em``: 1 if normalize(pred) == normalize(g) for some gold g.
- ``subem``: 1 if normalize(g) is a substring of normalize(pred) for some gold g (FlashRAG ``acc``).
- ``f1``: max over golds of token F1 between whitespace tokens of the normalised strings, common tokens counted
  as a multiset. If either normalised string is one of yes / no / noanswer and they differ, that gold scores 0.
- ``postprocess``: CompSelect's answer clean-up, ``strip()`` then ``rstrip(".")``; ``first_line`` keeps the
  first non-empty line before it; ``unlabelled`` drops a leading ``DocN:`` label first (``ANSWER_RULES``: the
  generator's ``answer`` setting).
- ``echo``: whether an output repeats the prompt instead of answering (definition at ``echo``).
- ``compression_ratio``: original tokens / compressed tokens of the context (the generator's tokenizer, the
  documents only). Per example it is ``None`` when the original is empty, and ``original / 1`` when the method
  kept nothing. Over a run, ``cr`` is the ratio of sums and ``cr_mean`` the mean of the per-example ratios;
  both are ``None`` for a run that kept nothing at all (``naive``): it has no compression ratio.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPECIAL = {"yes", "no", "noanswer"}


def normalize(text: str) -> str:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def postprocess(answer: str) -> str:
    return answer.strip().rstrip(".")


def first_line(answer: str) -> str:
    """The first non-empty line, post-processed: the lm-evaluation-harness NQ-open / TriviaQA rule (generation
    ends at a newline) for a chat model, whose reply may open with a blank line."""
    return postprocess(next((line for line in answer.splitlines() if line.strip()), ""))


_DOC_LABEL = re.compile(r"^\s*(?:Doc\s?\d+\s*:\s*)+")


def unlabelled(answer: str) -> str:
    """``first_line`` of the reply without the document label it may open with (``Doc5: Return of the Vampire``
    -> ``Return of the Vampire``): a model that cites the document it answers from. Only a leading ``DocN:`` is
    dropped; a label anywhere else stays, and still counts as an echo."""
    return first_line(_DOC_LABEL.sub("", answer, count=1))


# The generator's ``answer`` setting: how its raw output becomes the scored prediction.
ANSWER_RULES = {"paper": postprocess, "first_line": first_line, "unlabelled": unlabelled}


def answer_rule(name: str) -> Callable[[str], str]:
    """The answer rule called ``name``; a ``ConfigError`` naming the valid ones otherwise."""
    if name not in ANSWER_RULES:
        from harness.validate import ConfigError

        raise ConfigError(f"generator.answer={name!r}; valid: {', '.join(ANSWER_RULES)}")
    return ANSWER_RULES[name]


# The prompt's own scaffolding and the paper system prompt's worked example ("Question: What is the capital of
# France? Output: Paris."), as a model repeats them (``echo``).
_ECHO_OPENING = re.compile(r"^\W*question\b", re.IGNORECASE)
_ECHO_SCAFFOLD = re.compile(r"\b(?i:documents?|output)\s*:|\bDoc\s?\d+\b")
_ECHO_EXAMPLE = "capital of france"
_MIN_QUESTION_WORDS = 3


def echo(prediction: str, question: str = "", context: str = "") -> bool:
    """Whether ``prediction`` repeats the prompt instead of answering the question.

    An echo is any of: an output that opens with ``Question``; one that holds the prompt's labels
    (``Documents:`` or ``Document:``, ``DocN``, the example's ``Output:``); the system prompt's worked example
    (``capital of France``, unless the question or the context holds it too); or the whole question repeated
    word for word (SQuAD-normalised, for a question of at least three words; ``_repeats_question`` for
    cloze-style questions). A span copied from the documents is not an echo: that is how an extractive answer
    looks, and the documents' text is never matched here (only their ``DocN`` labels).
    """
    if _ECHO_OPENING.search(prediction) or _ECHO_SCAFFOLD.search(prediction):
        return True
    said = normalize(prediction)
    if _ECHO_EXAMPLE in said and _ECHO_EXAMPLE not in normalize(f"{question} {context}"):
        return True
    return _repeats_question(said, question)


_INTERROGATIVES = {
    *("who", "whom", "whose", "what", "when", "where", "which", "why", "how", "is", "are", "was", "were", "do"),
    *("does", "did", "can", "could", "will", "would", "should", "has", "have", "had"),
}


def _repeats_question(said: str, question: str) -> bool:
    """The normalised output holds the whole question, and either the question asks (opens with an interrogative
    word or ends with ``?``) or nothing follows it: a cloze-style question (``the capital of peru is``) restated
    with its answer after it is an answer, not an echo."""
    q = normalize(question)
    if len(q.split()) < _MIN_QUESTION_WORDS or q not in said:
        return False
    asks = q.split()[0] in _INTERROGATIVES or question.rstrip().endswith("?")
    return asks or not said.split(q, 1)[1].strip()


def em(prediction: str, golds: Iterable[str]) -> float:
    p = normalize(prediction)
    return float(any(p == normalize(g) for g in golds))


def subem(prediction: str, golds: Iterable[str]) -> float:
    p = normalize(prediction)
    return float(any(normalize(g) in p for g in golds))


def _f1_one(pred_norm: str, gold_norm: str) -> float:
    if (pred_norm in _SPECIAL or gold_norm in _SPECIAL) and pred_norm != gold_norm:
        return 0.0
    p, g = pred_norm.split(), gold_norm.split()
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def f1(prediction: str, golds: Iterable[str]) -> float:
    p = normalize(prediction)
    return max((_f1_one(p, normalize(g)) for g in golds), default=0.0)


def compression_ratio(original_tokens: int, compressed_tokens: int) -> float | None:
    if original_tokens <= 0:
        return None
    return original_tokens / max(compressed_tokens, 1)


def corpus_cr(original: Sequence[int], compressed: Sequence[int]) -> tuple[float | None, float | None]:
    """(ratio of sums, mean of per-example ratios) over a run."""
    total_c = sum(compressed)
    ratio_of_sums = sum(original) / total_c if total_c > 0 else None
    if ratio_of_sums is None:
        return None, None
    per = [r for r in (compression_ratio(o, c) for o, c in zip(original, compressed, strict=True)) if r]
    mean = sum(per) / len(per) if per else None
    return ratio_of_sums, mean


def score(prediction: str, golds: Sequence[str]) -> dict[str, float]:
    """SubEM, EM and F1 of one prediction, each in [0, 1]."""
    return {"subem": subem(prediction, golds), "em": em(prediction, golds), "f1": f1(prediction, golds)}
