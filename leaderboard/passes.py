"""Latency passes (the JSON lines ``python -m tools.latency_pass`` writes): read, and compared only within a pass.

A pass times every variant on one machine, on the same questions, interleaved, with ``full`` as reference, and
repeats itself (``repeats``). Here a row's figures against ``full`` (``online_vs_full_ratio``,
``total_vs_full_ratio``, generation saved, break-even) are recomputed from the per-repeat seconds, repeat by repeat,
and only against the ``full`` row of the **same pass** (``pass_id``) on the **same CPU** (``cpu``: model name and
native bf16 or AVX2 only) at the same thread count; a row without one keeps its seconds and gets no figure against
``full`` (``compared`` false). Files are found by name, ``latency-pass-*.jsonl``, anywhere under a results root
(``leaderboard/runs/latency/`` for the snapshot). A block's side-by-side table merges passes (``block_passes``):
each row from the newest pass that timed it, its ratios against the ``full`` of that pass, so a pass of one new
variant and ``full`` adds a row without re-timing the others; seconds are never compared across passes. Nothing
here loads a model.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from harness.records import read_jsonl

PATTERN = "latency-pass-*.jsonl"
SAME = ("profile", "generator", "dataset", "pass_id", "cpu", "threads")  # what a row and its full row share
ORDER = ("nq", "triviaqa", "hotpotqa")  # the papers' dataset order, for the side-by-side rows
COMPARED = (
    "online_vs_full_ratio",
    "total_vs_full_ratio",
    "generation_saved_s",
    "break_even",
    "pays_off",
    "full_total_s",
)


def read_passes(root: str | Path) -> pd.DataFrame:
    """Every row of every latency-pass file under ``root`` (empty when none), with the file it came from."""
    rows = [{**r, "file": str(f)} for f in sorted(Path(root).rglob(PATTERN)) for r in read_jsonl(f)]
    return pd.DataFrame(rows)


def _spread(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and spread (max - min) over the repeats."""
    return (statistics.fmean(values), max(values) - min(values)) if values else (None, None)


def figures_vs_baseline(row: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """The row's figures against its pass's ``full`` row, repeat by repeat (a repeat where either lacks a time
    is left out), and that row's total seconds (``full_total_s``)."""
    pairs = {
        k: [
            (x, y)
            for x, y in zip(row[f"{k}_s_repeats"], base[f"{k}_s_repeats"], strict=True)
            if x is not None and y is not None
        ]
        for k in ("online", "total")
    }
    out: dict[str, Any] = {}
    for k, ps in pairs.items():
        out[f"{k}_vs_full_ratio"], out[f"{k}_vs_full_ratio_spread"] = _spread([x / y for x, y in ps if y])
    saved = [y - x for x, y in pairs["online"]]
    out["generation_saved_s"] = statistics.fmean(saved) if saved else None
    c, g = row.get("compress_s"), out["generation_saved_s"]
    out["break_even"] = c / g if c is not None and g is not None and g > 0 else None
    is_base = row["variant"] == base["variant"]
    out["pays_off"] = None if is_base or c is None or g is None else bool(g > 0 and c < g)
    out["full_total_s"] = base.get("total_s")  # the seconds its ratios are against: of its own pass only
    return out


def compare(passes: pd.DataFrame, baseline: str = "full") -> pd.DataFrame:
    """``passes`` with ``compared`` and the figures against ``baseline`` (``COMPARED`` and the ratio spreads),
    each row only against the baseline row of its own pass, CPU and thread count (None otherwise)."""
    if passes.empty:
        return passes
    recs = passes.to_dict("records")
    base = {tuple(r[k] for k in SAME): r for r in recs if r["variant"] == baseline}
    out = []
    for r in recs:
        b = base.get(tuple(r[k] for k in SAME))
        found = figures_vs_baseline(r, b) if b is not None else dict.fromkeys(COMPARED)
        if b is None:
            found.update(online_vs_full_ratio_spread=None, total_vs_full_ratio_spread=None)
        out.append({**r, **found, "compared": b is not None})
    return pd.DataFrame(out)


def block_passes(
    passes: pd.DataFrame, profile: str, generator: str, baseline: str = "full"
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A block's side-by-side rows and every other row of the block, merged over passes. Per dataset and variant,
    the row is the one of the newest pass that timed it beside the baseline (``compared``); its figures stay
    against the baseline of its own pass. The dataset's headline pass (the one giving the most rows; ties: the
    newest) comes first, the baseline row included, then the rows of other passes (a pass of one new variant and
    ``full``, ``python -m tools.add_row``), whose baseline row stands behind their figures (``full_total_s``)
    rather than as a row. A whole-dataset pass, being the newest, re-times every row. Every other row (a variant
    timed again later, a pass without the baseline on its CPU) is returned apart, never compared."""
    if passes.empty:
        return passes, passes
    g = passes[(passes.profile == profile) & (passes.generator == generator)]
    shown = [i for _, d in g[g.compared].groupby("dataset", sort=False) for i in _merged(d, baseline)]
    head = g.loc[shown]
    used = set(zip(head.dataset, head.pass_id, strict=True))
    reference = [i for i, r in g.iterrows() if r.compared and r.variant == baseline and (r.dataset, r.pass_id) in used]
    return _in_dataset_order(head), g.drop([*shown, *reference])


def _merged(d: pd.DataFrame, baseline: str) -> list[Any]:
    """One dataset's compared rows: the index of each variant's newest row, the headline pass's first (in its
    pass's order, with its baseline row), then the other passes' (newest pass first)."""
    by_pass = d.groupby("pass_id", sort=False).agg(rows=("variant", "size"), last=("finished_at", "max"))
    ranked = by_pass.sort_values(["rows", "last"], ascending=False, kind="stable")
    top = ranked.index[0]
    newest = d.sort_values("finished_at", kind="stable").groupby("variant").tail(1).index
    keep = lambda r: r.name in newest and r.variant != baseline  # noqa: E731
    out = [i for i, r in d[d.pass_id == top].iterrows() if r.variant == baseline or keep(r)]
    for pid in ranked.index[1:]:
        out += [i for i, r in d[d.pass_id == pid].iterrows() if keep(r)]
    return out


def _in_dataset_order(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` by dataset (NQ, TriviaQA, HotpotQA, then any other by name), whatever their files are called;
    within a dataset, in their pass's order."""
    rank = {d: i for i, d in enumerate(ORDER)}
    key = rows.dataset.map(lambda d: (rank.get(d, len(ORDER)), "" if d in rank else d))
    return rows.iloc[sorted(range(len(rows)), key=lambda i: key.iloc[i])]


def dtypes(lms: Any) -> str:
    """``[role] ref dtype`` of every LM a row ran (``lms``), short names, once each."""
    if not isinstance(lms, list):
        return "-"
    role = lambda m: f"{m['role']} " if m.get("role") else ""  # noqa: E731
    names = {f"{role(m)}{str(m.get('ref', '?')).split(':')[-1].split('/')[-1]} {m.get('dtype')}" for m in lms}
    return ", ".join(sorted(names)) or "-"
