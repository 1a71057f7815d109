"""Uncertainty of every row: percentile bootstrap intervals and a paired bootstrap test against a baseline.

The statistics themselves (``bootstrap_ci``, ``paired_bootstrap``, ``Interval``, ``Paired``) live in
``harness.stats`` and are re-exported here; this module applies them to the leaderboard's rows
(``add_uncertainty``).
"""

from __future__ import annotations

import pandas as pd

from harness.records import strict_subem
from harness.stats import (
    LEVEL,
    RESAMPLES,
    SEED,
    Interval,
    Paired,
    bootstrap_ci,
    detectable_difference,
    paired_bootstrap,
)
from leaderboard.collect import METRICS, read_predictions

# The metrics given intervals and the paired test: SubEM, EM, F1 and SubEM with hedged and echoed answers scored 0
# (``harness.records.strict_subem``: "SubEM (answers that choose)").
STRICT = "subem_strict"
TESTED = (*METRICS, STRICT)

__all__ = [
    "LEVEL",
    "RESAMPLES",
    "SEED",
    "Interval",
    "Paired",
    "add_uncertainty",
    "bootstrap_ci",
    "detectable_difference",
    "paired_bootstrap",
]


def _records(r: pd.Series) -> pd.DataFrame:
    ids = r.get("ids")
    if isinstance(ids, frozenset):
        p = read_predictions(r.folder, None if pd.isna(r.n_run) else int(r.n_run))
        return _with_strict(p[p.id.isin(ids)] if "id" in p else p)
    return _with_strict(read_predictions(r.folder, None if pd.isna(r.n) else int(r.n)))


def _with_strict(p: pd.DataFrame) -> pd.DataFrame:
    """The records with their ``subem_strict`` (``harness.records.strict_subem``) as a column."""
    if p.empty or "subem" not in p:
        return p
    return p.assign(**{STRICT: [strict_subem(r) for r in p.to_dict("records")]})


def add_uncertainty(
    table: pd.DataFrame, baseline: str = "full", resamples: int = RESAMPLES, seed: int = SEED
) -> pd.DataFrame:
    """Add ``<m>_lo``/``<m>_hi`` (95% interval) and, against the ``baseline`` variant of the same profile, generator
    and dataset, ``d_<m>``, ``d_<m>_lo``, ``d_<m>_hi``, ``p_<m>``, ``sig_<m>`` for SubEM, EM, F1 and
    ``subem_strict`` (``TESTED``); ``n_paired`` is the number of shared example ids, ``disagree_subem`` the share of
    them where the two SubEMs differ. ``recomputed`` says whether the summary's SubEM/EM/F1 equal the means of the
    records they were computed from. A row with ``ids`` (``leaderboard.matched``) is read up to its ``n_run``
    records and cut to those ids."""
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
        for m in TESTED:
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
        put("disagree_subem", float((both.subem != both.subem_b).mean()) if len(both) else None)
        for m in TESTED:
            t = paired_bootstrap(both[m], both[f"{m}_b"], resamples, seed) if len(both) else None
            put(f"d_{m}", t.delta if t else None)
            put(f"d_{m}_lo", t.lo if t else None)
            put(f"d_{m}_hi", t.hi if t else None)
            put(f"p_{m}", t.p if t else None)
            put(f"sig_{m}", t.significant if t else None)
    for k, v in cols.items():
        out[k] = v
    return out
