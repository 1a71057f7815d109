"""Rows re-scored on the questions they share, so that a table compares methods on the same examples.

Runs of one dataset take the first ``limit`` questions of the same split, but not the same ``limit``: a row at
n=50 and a row at n=200 differ by their questions as well as by their method. ``matched`` keeps, per
(profile, generator, dataset), the rows with at least ``min_n`` records, intersects their example ids and
recomputes SubEM, EM, F1, echo, hedge and CR of every row on that intersection from ``predictions.jsonl``. Rows under
``min_n`` are left out (and listed), so that one short run does not shrink everyone's sample.
"""

from __future__ import annotations

import pandas as pd

from harness.metrics import corpus_cr
from harness.records import echo_share, hedge_share, subem_from_echo, subem_from_hedge, subem_strict
from leaderboard.collect import METRICS, read_records

MIN_N = 50


def matched(runs: pd.DataFrame, min_n: int = MIN_N) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the rows re-scored on their group's shared ids, the rows left out). The kept rows carry ``ids``
    (the shared ids) and ``n_run`` (the run's own n) so that ``stats.add_uncertainty`` resamples exactly those
    examples."""
    kept, left = [], []
    for _, g in runs.groupby(["profile", "generator", "dataset"], sort=False):
        recs = {i: read_records(r.folder, None if pd.isna(r.n) else int(r.n)) for i, r in g.iterrows()}
        preds = {i: pd.DataFrame(r) for i, r in recs.items()}
        big = [i for i in g.index if len(preds[i]) >= min_n and "id" in preds[i]]
        left += [i for i in g.index if i not in big]
        if not big:
            continue
        common = frozenset.intersection(*(frozenset(preds[i].id) for i in big))
        kept += [rescore(runs.loc[i], recs[i], common) for i in big]
    out = pd.DataFrame(kept).reset_index(drop=True) if kept else runs.iloc[0:0].assign(ids=None)
    return out, runs.loc[left].reset_index(drop=True)


def rescore(row: pd.Series, records: list[dict], ids: frozenset) -> pd.Series:
    """``row`` re-scored on its ``records`` whose id is in ``ids``: SubEM, EM, F1, CR, echo, hedge and strict SubEM
    recomputed, ``n`` the records kept, ``n_run`` the run's own n and ``ids`` the set (``stats.add_uncertainty``
    then resamples exactly those examples)."""
    shared = [r for r in records if r["id"] in ids]
    p = pd.DataFrame(shared)
    row = row.copy()
    row["n_run"], row["n"], row["ids"] = row["n"], len(p), ids
    for m in METRICS:
        row[m] = 100.0 * p[m].mean() if len(p) else None
    row["cr"], row["cr_mean"] = (
        corpus_cr(list(p.original_tokens), list(p.compressed_tokens)) if len(p) else (None, None)
    )
    row["echo"], row["subem_from_echo"] = echo_share(shared), subem_from_echo(shared)
    row["hedge"], row["subem_from_hedge"] = hedge_share(shared), subem_from_hedge(shared)
    row["subem_strict"] = subem_strict(shared)
    return row
