"""Answer metrics and compression ratio, as defined in CompSelect (000) and FlashRAG.

- ``normalize``: SQuAD normalisation: lower-case, drop ``string.punctuation``, drop the articles a/an/the,
  collapse whitespace.
- ``em``: 1 if normalize(pred) == normalize(g) for some gold g.
- ``subem``: 1 if normalize(g) is a substring of normalize(pred) for some gold g (FlashRAG ``acc``).
- ``f1``: max over golds of token F1 between whitespace tokens of the normalised strings, common tokens counted
  as a multiset. If either normalised string is one of yes / no / noanswer and they differ, that gold scores 0.
- ``postprocess``: CompSelect's answer clean-up, ``strip()`` then ``rstrip(".")``.
- ``compression_ratio``: original tokens / compressed tokens of the context (the generator's tokenizer, the
  documents only). Per example it is ``None`` when the original is empty, and ``original / 1`` when the method
  kept nothing. Over a run, ``cr`` is the ratio of sums and ``cr_mean`` the mean of the per-example ratios;
  both are ``None`` for a run that kept nothing at all (``naive``): it has no compression ratio.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence

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
