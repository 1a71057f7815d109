"""Bootstrap statistics over per-example scores: percentile intervals and a paired test.

- ``bootstrap_ci``: resample the examples of a run with replacement (``resamples`` times, numpy's PCG64
  seeded with ``seed``) and take the 2.5th and 97.5th percentiles of the mean (a 95% interval).
- ``paired_bootstrap``: on the examples two runs share (aligned), resample them and take the interval of the
  mean difference; the difference is significant when the interval excludes 0. The two-sided p-value is
  twice the smaller tail of the resampled differences around 0 (capped at 1).

Scores are per-example values in [0, 1]; means and intervals are returned in percent, like the tables.
Used by the regression check (``tools.regress``) and the leaderboard (``leaderboard.stats``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES, SEED, LEVEL = 1000, 0, 0.95


@dataclass(frozen=True)
class Interval:
    """A mean with its bootstrap interval, in percent."""

    mean: float
    lo: float
    hi: float


@dataclass(frozen=True)
class Paired:
    """A mean difference with its bootstrap interval (percent), two-sided p-value and number of pairs."""

    delta: float
    lo: float
    hi: float
    p: float
    n: int

    @property
    def significant(self) -> bool:
        return self.lo > 0 or self.hi < 0


def _indices(n: int, resamples: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def bootstrap_ci(
    values: Sequence[float] | np.ndarray, resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL
) -> Interval:
    """Mean of ``values`` with its percentile bootstrap interval (NaNs when ``values`` is empty)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return Interval(float("nan"), float("nan"), float("nan"))
    means = x[_indices(x.size, resamples, seed)].mean(axis=1)
    a = (1 - level) / 2
    lo, hi = np.quantile(means, [a, 1 - a])
    return Interval(100 * x.mean(), 100 * float(lo), 100 * float(hi))


def paired_bootstrap(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = LEVEL,
) -> Paired:
    """Mean of ``a - b`` (aligned per example) with its bootstrap interval and two-sided p-value."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if d.size == 0:
        return Paired(float("nan"), float("nan"), float("nan"), float("nan"), 0)
    means = d[_indices(d.size, resamples, seed)].mean(axis=1)
    al = (1 - level) / 2
    lo, hi = np.quantile(means, [al, 1 - al])
    p = min(1.0, 2 * min(float((means <= 0).mean()), float((means >= 0).mean())))
    return Paired(100 * d.mean(), 100 * float(lo), 100 * float(hi), p, int(d.size))


POWER = 0.8


def detectable_difference(disagree: float, n: int, level: float = LEVEL, power: float = POWER) -> float:
    """The smallest true difference in a mean of 0/1 scores (percent points) that a paired two-sided test at
    ``level`` finds with probability ``power`` on ``n`` pairs, when the two runs disagree on a share ``disagree`` of
    them: ``(z_(1+level)/2 + z_power) * sqrt(disagree / n)`` (the normal approximation of McNemar's test near no
    difference, where the per-pair difference has variance ``disagree``). The paired bootstrap's interval
    half-width is the first term alone: a smaller difference can come out significant, but not reliably."""
    from statistics import NormalDist

    if n <= 0:
        raise ValueError(f"detectable_difference needs n > 0 pairs, got {n}")
    z = NormalDist().inv_cdf
    return 100 * (z((1 + level) / 2) + z(power)) * float(np.sqrt(disagree / n))
