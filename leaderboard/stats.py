"""Uncertainty of every row: percentile bootstrap intervals and a paired bootstrap test against a baseline.

- ``bootstrap_ci``: resample the examples of a run with replacement (``resamples`` times, numpy's PCG64
  seeded with ``seed``) and take the 2.5th and 97.5th percentiles of the mean (a 95% interval).
- ``paired_bootstrap``: on the example ids two runs share, resample those ids and take the interval of the
  mean difference; the difference is significant when the interval excludes 0. The two-sided p-value is
  twice the smaller tail of the resampled differences around 0 (capped at 1).

Scores are per-example values in [0, 1]; means and intervals are returned in percent, like the tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from leaderboard.collect import METRICS, read_predictions

RESAMPLES, SEED, LEVEL = 1000, 0, 0.95


@dataclass(frozen=True)
class Interval:
    mean: float
    lo: float
    hi: float


@dataclass(frozen=True)
class Paired:
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


def bootstrap_ci(values, resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL) -> Interval:
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return Interval(float("nan"), float("nan"), float("nan"))
    means = x[_indices(x.size, resamples, seed)].mean(axis=1)
    a = (1 - level) / 2
    lo, hi = np.quantile(means, [a, 1 - a])
    return Interval(100 * x.mean(), 100 * float(lo), 100 * float(hi))


def paired_bootstrap(a, b, resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL) -> Paired:
    """Mean of ``a - b`` (aligned per example) with its bootstrap interval and two-sided p-value."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if d.size == 0:
        return Paired(float("nan"), float("nan"), float("nan"), float("nan"), 0)
    means = d[_indices(d.size, resamples, seed)].mean(axis=1)
    al = (1 - level) / 2
    lo, hi = np.quantile(means, [al, 1 - al])
    p = min(1.0, 2 * min(float((means <= 0).mean()), float((means >= 0).mean())))
    return Paired(100 * d.mean(), 100 * float(lo), 100 * float(hi), p, int(d.size))


def _records(r: pd.Series) -> pd.DataFrame:
    ids = r.get("ids")
    if isinstance(ids, frozenset):
        p = read_predictions(r.folder, None if pd.isna(r.n_run) else int(r.n_run))
        return p[p.id.isin(ids)] if "id" in p else p
    return read_predictions(r.folder, None if pd.isna(r.n) else int(r.n))


def add_uncertainty(
    table: pd.DataFrame, baseline: str = "full", resamples: int = RESAMPLES, seed: int = SEED
) -> pd.DataFrame:
    """Add ``<m>_lo``/``<m>_hi`` (95% interval) and, against the ``baseline`` variant of the same profile,
    generator and dataset, ``d_<m>``, ``d_<m>_lo``, ``d_<m>_hi``, ``p_<m>``, ``sig_<m>`` for SubEM, EM and F1;
    ``n_paired`` is the number of shared example ids. ``recomputed`` says whether the summary's SubEM/EM/F1
    equal the means of the records they were computed from. A row with ``ids`` (``leaderboard.matched``) is
    read up to its ``n_run`` records and cut to those ids."""
    out = table.copy()
    preds = {i: _records(r) for i, r in out.iterrows()}
    cols: dict[str, list] = {}

    def put(name: str, value) -> None:
        cols.setdefault(name, []).append(value)

    for i, r in out.iterrows():
        p = preds[i]
        ok = not p.empty and all(m in p for m in METRICS)
        put(
            "recomputed",
            ok
            and all(
                abs(100 * p[m].mean() - float(r[m])) < 1e-6 for m in METRICS if r[m] is not None and not pd.isna(r[m])
            ),
        )
        for m in METRICS:
            ci = bootstrap_ci(p[m] if ok else [], resamples, seed)
            put(f"{m}_lo", ci.lo)
            put(f"{m}_hi", ci.hi)
        base = out[
            (out.profile == r.profile)
            & (out.generator == r.generator)
            & (out.dataset == r.dataset)
            & (out.variant == baseline)
        ]
        bp = preds[base.index[0]] if len(base) and base.index[0] != i else pd.DataFrame()
        both = p.merge(bp, on="id", suffixes=("", "_b")) if ok and not bp.empty and "id" in bp else pd.DataFrame()
        put("n_paired", len(both) if len(both) else None)
        for m in METRICS:
            t = paired_bootstrap(both[m], both[f"{m}_b"], resamples, seed) if len(both) else None
            put(f"d_{m}", t.delta if t else None)
            put(f"d_{m}_lo", t.lo if t else None)
            put(f"d_{m}_hi", t.hi if t else None)
            put(f"p_{m}", t.p if t else None)
            put(f"sig_{m}", t.significant if t else None)
    for k, v in cols.items():
        out[k] = v
    return out
