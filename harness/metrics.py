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
- ``hedge``: whether an output names more than one of the options a comparison question offers, without
  choosing the gold one (definition at ``hedge``); ``options`` finds the options.
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
from functools import lru_cache
from typing import NamedTuple

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPECIAL = {"yes", "no", "noanswer"}


@lru_cache(maxsize=1 << 18)
def normalize(text: str) -> str:
    """SQuAD's answer normalisation (lower case, no punctuation or articles, single spaces); memoised, since the
    leaderboard scores the same golds and predictions again in every view."""
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


# Comparison questions offer their candidates: "Who is older, A or B?", "Is A or B ...?", "A, B or C", and the
# yes/no questions whose gold is "yes" or "no" (``options``).
_OR = re.compile(r"\s+or\s+", re.IGNORECASE)
_AND = re.compile(r"\s+and\s+", re.IGNORECASE)
_SEPARATORS = re.compile(r",|:|;|--|\s[-–—]\s")
_AUX = {"is", "are", "was", "were", "do", "does", "did", "can", "could", "will", "would", "should", "has", "have"}
_CONNECTORS = {"of", "the", "and", "&", "a", "an", "de", "y", "da", "von", "van", "to", "in", "on", "for", "v."}
_BINARY = (("yes", "no"), ("true", "false"))
_ARTICLE_WORDS = {"a", "an", "the"}
# Words between the first two options named that make the first one the answer: "A is older than B",
# "A ..., compared to B", "A, not B" (``_picks_first``).
_PICK = {"than", "compared"}
_NOT = {"not"}


class Option(NamedTuple):
    """One option a question offers: its names (the option as the question words it, then the gold answers that
    are it) and whether it is the gold one."""

    names: tuple[str, ...]
    gold: bool


def _name_run(words: list[str], from_end: bool) -> str:
    """The run of capitalised words (a name, connectors inside it) at one end of ``words``; the last (or first)
    word alone when none is capitalised (``left-hand or right-hand``)."""
    seq = words[::-1] if from_end else words
    run: list[str] = []
    for w in seq:
        if w[:1].isupper() or w[:1].isdigit() or w[:1] in "\"'(" or (run and w.lower() in _CONNECTORS):
            run.append(w)
        else:
            break
    while run and run[-1].lower() in _CONNECTORS:
        run.pop()
    run = run or seq[:1]
    return " ".join(run[::-1] if from_end else run)


def _sides(question: str, at: re.Match, cut: bool = False) -> list[str]:
    """The options around one ``or`` of ``question``: the names before it after a comma, colon or dash (``Which
    is oldest, A, B or C``, ``invented: A, B or C``) or else the name run that ends there, and the text
    after it up to a comma or the end; in a question that opens with a verb (``Is A or B older?``) both sides
    are cut to their name runs, as they are with ``cut``."""
    before, after = question[: at.start()], question[at.end() :]
    words = before.split()
    aux = cut or (bool(words) and words[0].lower() in _AUX)
    stem, *listed = before.split(",")
    pieces = [p.strip() for p in (*_SEPARATORS.split(stem), *listed)]
    left = pieces[1:] if len(pieces) > 1 and not aux else [_name_run(words[1:], from_end=True)]
    right = re.split(r",|\?|;", after, maxsplit=1)[0].strip()
    if aux:
        right = _name_run([w for w in right.split() if w.lower() not in _ARTICLE_WORDS] or [""], from_end=False)
    return [*left, right]


def _matches(gold: str, option: str, loose: bool) -> bool:
    """A gold answer is this option when the words of one hold the other's (``Helen Hunt`` and ``Helen
    Elizabeth Hunt``, ``Farrell`` and ``J. G. Farrell``), or, ``loose``, when they share half the words of the
    longer (``Lev Yilmaz`` and ``Levni Yilmaz``)."""
    g, o = set(normalize(gold).split()), set(normalize(option).split())
    if not (g and o):
        return False
    return g <= o or o <= g or (loose and 2 * len(g & o) >= max(len(g), len(o)))


def _offered(found: list[str], golds: Sequence[str]) -> list[Option]:
    """``found`` as options, the gold one(s) marked: by word containment, or loosely where none contains."""
    loose = not any(_matches(g, o, False) for g in golds for o in found)
    gold = [[g for g in golds if _matches(g, o, loose)] for o in found]
    return [Option((o, *_tail(o), *g), bool(g)) for o, g in zip(found, gold, strict=True)]


def _tail(option: str) -> list[str]:
    """The name a long option ends with, when it has two words or more (``Rob Zombie's band White Zombie``:
    ``White Zombie``), as a second name of the option."""
    words = option.split()
    tail = _name_run(words, from_end=True)
    return [tail] if len(tail.split()) > 1 and len(tail.split()) < len(words) else []


def options(question: str, golds: Sequence[str], kind: str | None = None) -> list[Option]:
    """The options a comparison question offers (``_options``, memoised: every run of a dataset asks them of the
    same questions)."""
    return list(_options(question, tuple(golds), kind))


@lru_cache(maxsize=1 << 16)
def _options(question: str, golds: tuple[str, ...], kind: str | None = None) -> tuple[Option, ...]:
    """The options a comparison question offers; ``[]`` when it offers none that a gold answer is. ``kind`` is
    HotpotQA's ``type`` where the data keeps it: a ``bridge`` question offers none; otherwise the question is
    parsed around each ``or``, the last first (and, for a ``comparison``, around each ``and``: ``Between A and B,
    which ...``). Yes/no questions (a gold of ``yes`` or ``no``) offer both, as true/false ones do; ``()`` for
    none."""
    if kind == "bridge":
        return ()
    for pair in _BINARY:
        if any(normalize(g) in pair for g in golds):
            return tuple(Option((w,), any(normalize(g) == w for g in golds)) for w in pair)
    joins = [(at, False) for at in reversed(list(_OR.finditer(question)))]
    if kind == "comparison":
        joins += [(at, True) for at in _AND.finditer(question)]
    for at, cut in joins:
        named = _offered([o for o in _sides(question, at, cut) if normalize(o)], golds)
        if len(named) > 1 and any(o.gold for o in named):
            return tuple(named)
    return ()


_INITIALS = re.compile(r"\b(\w) (?=\w\b)")


def _squash(text: str) -> str:
    """Normalised text with runs of initials joined (``P. J. O'Rourke`` and ``P.J. O'Rourke``: ``pj orourke``)."""
    return _INITIALS.sub(r"\1", normalize(text))


def _first_mention(said: str, names: tuple[str, ...]) -> tuple[int, int] | None:
    """Where in the padded, squashed output the option is first named (a whole-word match of any of its names):
    its start and end."""
    found = [(said.find(f" {n} "), len(n)) for n in map(_squash, names) if n and f" {n} " in said]
    return min((at, at + size + 1) for at, size in found) if found else None


def _picks_first(between: list[str]) -> bool:
    """The words between the first two options named make the first one the answer: a comparative (``_PICK``)
    without a negation, or a negation just before the second (``A, and not B``); ``A is not older than B``
    picks neither."""
    compares, negates = bool(_PICK & set(between)), bool(_NOT & set(between))
    return (compares and not negates) or (not compares and bool(_NOT & set(between[-3:])))


def hedge(prediction: str, question: str, golds: Sequence[str], kind: str | None = None) -> bool:
    """Memoised ``_hedge`` (the leaderboard asks it of every archived record in several views)."""
    return _hedge(prediction, question, tuple(golds), kind)


@lru_cache(maxsize=1 << 18)
def _hedge(prediction: str, question: str, golds: tuple[str, ...], kind: str | None = None) -> bool:
    """Whether ``prediction`` names more than one of the question's ``options`` (SQuAD-normalised, whole words)
    without picking the gold one, so that SubEM credits it whichever option were gold. Naming two options
    answers only where the first one named is the gold one and the words up to the second make it the answer:
    ``A is older than B``, ``A ..., compared to B``, ``A, not B`` (``_picks_first``); ``A or B``,
    ``A ..., while B ...`` and ``yes ... no`` pick nothing. A question that offers no options never hedges."""
    offered = _options(question, golds, kind)
    said = f" {_squash(prediction)} "
    named = sorted((m, o) for o in offered if (m := _first_mention(said, o.names)) is not None)
    if len(named) < 2:
        return False
    ((_, end), first), ((start, _), _second) = named[:2]
    return not (len(named) == 2 and first.gold and _picks_first(said[end:start].split()))


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
