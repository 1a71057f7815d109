"""CSM-st data rebalancing (paper 002, section 4.2 and App. B), on label rows from ``train_labels.py``.

- Labels are scaled to [-1, 1] by ``y = tanh(phi / label_temperature)``: monotone, so the ranking is unchanged
  (the paper's Fig. 5 scaling; the released ``_piecewise_scale`` is not used).
- Rarity rate ``r = mean(y) + alpha * std(y)`` over a sample's units (alpha = 10). Samples with ``r < delta1``
  are trivial, ``r > delta2`` hard (delta1 = delta2 = 5 in the paper). ``hard_fraction`` instead sets
  delta1 = delta2 to the quantile that makes that fraction hard (papers.md 2.12 item 4: the paper's NQ has
  ~16% hard samples; the scale of its delta is unstated).
- Down-sampling keeps a random ``keep_trivial`` share of the trivial samples (0.3, the released code).
- Cross-instance intervention on hard samples: the positive units ``C_i^P = {c : y > gamma}`` (gamma = 0.1)
  are placed among ``n - |C_i^P|`` random units of another instance j whose question is semantically distinct
  (cosine < ``max_question_sim``), in random positions, under q_i (high-CI case, Eq. 5) and under q_j (low-CI
  case, App. B Eq. 10). Their labels are recomputed with the generator when ``relabel`` (papers.md 2.12
  item 5), else the cheap fallback: y kept for C_i^P and 0 for the others (high), y = 0 for the transplanted
  C_i^P and j's own values for the others (low).
- Sample weights ``1 / p(r)`` from a 100-bin histogram of r, normalised to mean 1 (re-weighted regression).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

Plan = tuple["Sample", "Sample", list[int], list[int], str]


@dataclass
class Sample:
    """One training list: the active units of a label row, their raw CI values and scaled targets."""

    question: str
    answers: list[str]
    texts: list[str]
    values: list[float]
    targets: list[float] = field(default_factory=list)
    rarity: float = 0.0
    weight: float = 1.0
    hard: bool = False
    origin: str = "label"  # label | high | low
    source: str = ""


def scale(values: Sequence[float], temperature: float = 1.0) -> list[float]:
    return [math.tanh(v / temperature) for v in values]


def from_row(row: dict[str, Any], temperature: float = 1.0, origin: str = "label") -> Sample:
    dropped = {int(k) for k in row.get("dropped", {})}
    idx = [i for i in range(len(row["units"])) if i not in dropped]
    vals = [float(row["values"][i]) for i in idx]
    return Sample(
        row["question"],
        list(row["answers"]),
        [row["units"][i] for i in idx],
        vals,
        scale(vals, temperature),
        origin=origin,
        source=row.get("id", ""),
    )


def rarity(targets: Sequence[float], alpha: float = 10.0) -> float:
    if not targets:
        return 0.0
    m = sum(targets) / len(targets)
    sd = math.sqrt(sum((t - m) ** 2 for t in targets) / len(targets))
    return m + alpha * sd


def mark_hard(
    samples: list[Sample], alpha: float, delta1: float, delta2: float, hard_fraction: float | None = None
) -> tuple[float, float]:
    """Set ``rarity`` and ``hard`` on every sample; returns the thresholds used."""
    for s in samples:
        s.rarity = rarity(s.targets, alpha)
    if hard_fraction is not None and samples:
        rs = sorted(s.rarity for s in samples)
        delta1 = delta2 = rs[min(len(rs) - 1, round((1 - hard_fraction) * len(rs)))]
        for s in samples:
            s.hard = s.rarity >= delta2
    else:
        for s in samples:
            s.hard = s.rarity > delta2
    return delta1, delta2


def downsample(samples: list[Sample], delta1: float, keep_trivial: float, rng: random.Random) -> list[Sample]:
    return [s for s in samples if s.hard or s.rarity >= delta1 or rng.random() < keep_trivial]


def interventions(
    samples: Sequence[Sample],
    question_sim,
    gamma: float,
    max_question_sim: float,
    rng: random.Random,
    per_hard: int = 1,
) -> list[Plan]:
    """Plans ``(i, j, positive unit idx of i, chosen unit idx of j, case)`` for every hard sample with
    positives; ``question_sim(a, b)`` is the cosine of two samples' questions."""
    plans = []
    for i, s in enumerate(samples):
        pos = [k for k, y in enumerate(s.targets) if y > gamma]
        if not s.hard or not pos:
            continue
        others = [
            j
            for j, o in enumerate(samples)
            if j != i and o.origin == "label" and question_sim(i, j) < max_question_sim and len(o.texts) > 0
        ]
        for _ in range(per_hard):
            if not others:
                break
            j = rng.choice(others)
            n_fill = max(len(s.texts) - len(pos), 0)
            fill = rng.sample(range(len(samples[j].texts)), min(n_fill, len(samples[j].texts)))
            for case in ("high", "low"):
                plans.append((s, samples[j], pos, fill, case))
    return plans


def build_intervened(plan, rng: random.Random) -> tuple[Sample, list[int]]:
    """The synthetic list of a plan with fallback labels, and which positions hold the transplanted C_i^P."""
    s, o, pos, fill, case = plan
    items = [(s.texts[k], s.values[k], s.targets[k], True) for k in pos] + [
        (o.texts[k], o.values[k], o.targets[k], False) for k in fill
    ]
    rng.shuffle(items)
    q, a = (s.question, s.answers) if case == "high" else (o.question, o.answers)
    if case == "high":
        vals = [v if mine else 0.0 for _, v, _, mine in items]
        tg = [t if mine else 0.0 for _, _, t, mine in items]
    else:
        vals = [0.0 if mine else v for _, v, _, mine in items]
        tg = [0.0 if mine else t for _, _, t, mine in items]
    sample = Sample(q, list(a), [t for t, *_ in items], vals, tg, origin=case, source=f"{s.source}|{o.source}")
    return sample, [k for k, it in enumerate(items) if it[3]]


def weights_from_rarity(samples: list[Sample], bins: int = 100) -> None:
    """``weight = 1 / p(r)`` with p the empirical frequency of r's histogram bin, normalised to mean 1."""
    if not samples:
        return
    lo, hi = min(s.rarity for s in samples), max(s.rarity for s in samples)
    width = (hi - lo) / bins or 1.0
    idx = [min(int((s.rarity - lo) / width), bins - 1) for s in samples]
    counts: dict[int, int] = {}
    for b in idx:
        counts[b] = counts.get(b, 0) + 1
    raw = [len(samples) / counts[b] for b in idx]
    mean = sum(raw) / len(raw)
    for s, w in zip(samples, raw, strict=True):
        s.weight = w / mean
