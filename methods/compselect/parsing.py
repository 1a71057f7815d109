"""Reading the extractor's and the truncator's outputs back into sentences of the input.

The extractor *generates* its clues (``Sentence i: text`` lines). Each line is mapped back to the source
sentence it copies, so that the method stays extractive and CR is honest (papers.md 3.10, item 8):

1. a line's prefix (``Sentence 3:``, ``3.``, ``-``, ``document 2:``) is stripped;
2. an exact match (whitespace-collapsed) wins; otherwise the source with the highest token F1 (lower-cased
   ``\\w+`` tokens, multiset overlap) is taken if that F1 is at least ``threshold`` (default 0.8: one word in
   five may differ); ties go to the earlier sentence;
3. a line that matches nothing is split into sentences and each piece is matched the same way (the model may
   merge two sentences on one line);
4. what maps to nothing is dropped and reported; a source already taken is not taken twice.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from harness.text import split_sentences

DEFAULT_THRESHOLD = 0.8
_PREFIX = re.compile(r"^\s*(?:(?:sentence|document|doc)\s*\d+\s*[:.)\-]?|\d+\s*[:.)]|[-*\u2022])\s*", re.IGNORECASE)
_NUMBERED = re.compile(r"^\s*sentence\s*(\d+)\s*[:.)\-]?\s*", re.IGNORECASE)
_TOKEN = re.compile(r"\w+")
_WS = re.compile(r"\s+")


@dataclass(frozen=True)
class Clue:
    """One extracted clue: the source sentence it maps to and the line the extractor wrote."""

    source: int  # index into the example's sentence list (harness.text.sentence_units order)
    text: str  # the source sentence, which is what the generator sees
    generated: str  # the extractor's text for it
    score: float  # token F1 between the two (1.0 for an exact copy)


def tokens(text: str) -> Counter:
    return Counter(_TOKEN.findall(text.lower()))


def token_f1(a: Counter, b: Counter) -> float:
    common = sum((a & b).values())
    if common == 0:
        return 0.0
    p, r = common / sum(a.values()), common / sum(b.values())
    return 2 * p * r / (p + r)


def strip_prefix(line: str) -> str:
    return _PREFIX.sub("", line, count=1).strip()


def parse_lines(output: str) -> list[tuple[int | None, str]]:
    """Non-empty lines of a generation as (number written after ``Sentence``, text without its prefix)."""
    out = []
    for line in output.splitlines():
        m = _NUMBERED.match(line)
        text = strip_prefix(line)
        if text:
            out.append((int(m.group(1)) if m else None, text))
    return out


class SourceMatcher:
    """Maps free text to the best-matching sentence of a fixed list (exact first, then token F1)."""

    def __init__(self, sources: Sequence[str], threshold: float = DEFAULT_THRESHOLD) -> None:
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.sources, self.threshold = list(sources), threshold
        self._exact = {}
        for i, s in enumerate(self.sources):
            self._exact.setdefault(_WS.sub(" ", s).strip(), i)
        self._tokens = [tokens(s) for s in self.sources]

    def best(self, text: str) -> tuple[int | None, float]:
        """(index, score) of the best source for ``text``; index is None below the threshold."""
        key = _WS.sub(" ", text).strip()
        if key in self._exact:
            return self._exact[key], 1.0
        t = tokens(key)
        best_i, best_s = None, 0.0
        for i, st in enumerate(self._tokens):
            s = token_f1(t, st)
            if s > best_s:
                best_i, best_s = i, s
        return (best_i, best_s) if best_s >= self.threshold else (None, best_s)

    def score(self, text: str, index: int) -> float:
        key = _WS.sub(" ", text).strip()
        if key == _WS.sub(" ", self.sources[index]).strip():
            return 1.0
        return token_f1(tokens(key), self._tokens[index])


def map_clues(
    output: str, sources: Sequence[str], threshold: float = DEFAULT_THRESHOLD
) -> tuple[list[Clue], list[str]]:
    """The clues of an extractor output, in the order written, and the lines (or pieces) that mapped to
    nothing."""
    matcher = SourceMatcher(sources, threshold)
    clues: list[Clue] = []
    dropped: list[str] = []
    taken: set[int] = set()
    for _, text in parse_lines(output):
        i, s = matcher.best(text)
        pieces = [(text, i, s)]
        if i is None:
            parts = split_sentences(text)
            if len(parts) > 1:
                pieces = [(p, *matcher.best(p)) for p in parts]
        for piece, i, s in pieces:
            if i is None:
                dropped.append(piece)
            elif i not in taken:
                taken.add(i)
                clues.append(Clue(i, matcher.sources[i], piece, round(s, 4)))
    return clues, dropped


def parse_truncation(
    output: str, ranked: Sequence[str], mode: str = "text", threshold: float = DEFAULT_THRESHOLD
) -> int:
    """The number K of ranked clues to keep, read from a truncator output, clamped to [0, len(ranked)].

    ``index`` (FineFilter): the first integer in the output; none means 0. ``text`` (CompSelect): the output
    is the kept prefix as ``Sentence i:`` lines; K is the highest rank that some line reproduces (its number
    when the text agrees with that clue, else the best text match), 0 when no line matches (the empty set).
    """
    n = len(ranked)
    if mode == "index":
        m = re.search(r"-?\d+", output)
        return 0 if m is None else max(0, min(n, int(m.group())))
    if mode != "text":
        raise ValueError(f"truncator output mode {mode!r}; valid: text, index")
    if n == 0:
        return 0
    matcher = SourceMatcher(ranked, threshold)
    k = 0
    for number, text in parse_lines(output):
        if number is not None and 1 <= number <= n and matcher.score(text, number - 1) >= threshold:
            k = max(k, number)
            continue
        i, _ = matcher.best(text)
        if i is not None:
            k = max(k, i + 1)
    return k
