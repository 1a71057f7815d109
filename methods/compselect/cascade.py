"""Cascading-error metrics of CompSelect Table 6 (003 Table 5), recorded per example in ``meta["diagnostics"]``.

On the examples whose passages contain a gold answer (``eligible``): ``recall1`` = the extracted clues contain
one (extractor), ``hit2_at1`` = the top reranked clue contains one (reranker), ``recall3`` = the kept clues
contain one (truncator). "Contains" is the SubEM rule: a SQuAD-normalised gold answer is a substring of the
normalised text. Each value is 1.0 / 0.0 on eligible examples and None otherwise; a run reports the mean over
eligible examples, x100. The gold answers are read here for this analysis only, never for selection.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.metrics import normalize


def has_gold(text: str, answers: Sequence[str]) -> bool:
    t = normalize(text)
    return any(normalize(a) and normalize(a) in t for a in answers)


def any_gold(texts: Sequence[str], answers: Sequence[str]) -> bool:
    return any(has_gold(t, answers) for t in texts)


def cascade(
    passages: Sequence[str],
    extracted: Sequence[str],
    ranked: Sequence[str],
    kept: Sequence[str],
    answers: Sequence[str],
) -> dict[str, float | bool | None]:
    """Recall-1, Hit-2@1 and Recall-3 of one example (passage texts, then clue texts at each stage)."""
    eligible = any_gold(passages, answers)
    if not eligible:
        return {"eligible": False, "recall1": None, "hit2_at1": None, "recall3": None}
    return {
        "eligible": True,
        "recall1": float(any_gold(extracted, answers)),
        "hit2_at1": float(bool(ranked) and has_gold(ranked[0], answers)),
        "recall3": float(any_gold(kept, answers)),
    }
