"""Plots (matplotlib, Agg): SubEM against CR per dataset with the Pareto front, and latency bars.

The Pareto front is the set of non-oracle runs that no other non-oracle run beats on both SubEM and CR
(higher is better on both). Runs without a CR (closed-book ``naive``) are drawn as a horizontal line. A run that
kept nothing on more than half its questions is drawn hollow and labelled ``∅k%`` (k% of its contexts empty):
its CR, over all questions, counts those as compressed to nothing.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

import pandas as pd

from leaderboard.tables import EMPTY, MOSTLY_EMPTY, _num, datasets, label


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def pareto_front(points: list[tuple[str, float, float]]) -> list[str]:
    """Names of the points (name, cr, subem) on the front, by increasing CR."""
    pts = sorted(points, key=lambda p: (-p[1], -p[2]))
    front, best = [], -math.inf
    for name, _cr, s in pts:
        if s > best:
            front.append(name)
            best = s
    return front[::-1]


def mostly_empty(row: Any) -> bool:
    """Whether a run kept nothing (empty context) on more than half its questions."""
    k = _num(getattr(row, "kept_nothing", None))
    return k is not None and k > MOSTLY_EMPTY


def empty_label(row: Any) -> str:
    """``∅k%``: the share of a run's questions whose context came back empty."""
    return f"{EMPTY}{100 * (_num(getattr(row, 'kept_nothing', None)) or 0):.0f}%"


def subem_vs_cr(df: pd.DataFrame, profile: str, generator: str, path: Path) -> Path:
    plt = _plt()
    g = df[(df.profile == profile) & (df.generator == generator)]
    ds = datasets(g)
    fig, axes = plt.subplots(1, len(ds), figsize=(5.2 * len(ds), 5.6), squeeze=False)
    for ax, d in zip(axes[0], ds, strict=True):
        x = g[g.dataset == d]
        pts = x[x.cr.notna() & x.subem.notna()]
        normal = pts[~pts.oracle.astype(bool)]
        front = pareto_front([(r.variant, float(r.cr), float(r.subem)) for r in normal.itertuples()])
        for r in pts.itertuples():
            on = r.variant in front
            err = [[r.subem - r.subem_lo], [r.subem_hi - r.subem]] if "subem_lo" in pts else None
            color = "tab:red" if on else ("tab:gray" if r.oracle else "tab:blue")
            hollow = mostly_empty(r)
            ax.errorbar(
                r.cr,
                r.subem,
                yerr=err,
                fmt="D" if r.oracle else "o",
                ms=8 if on else 6,
                color=color,
                mfc="none" if hollow else color,
                capsize=3,
                alpha=0.9,
                zorder=3,
            )
            ax.annotate(
                r.variant + (" (oracle)" if r.oracle else "") + (f" {empty_label(r)}" if hollow else ""),
                (r.cr, r.subem),
                fontsize=8,
                xytext=(5, 4),
                textcoords="offset points",
            )
        if front:
            f = normal.set_index("variant").loc[front]
            ax.step(f.cr, f.subem, where="pre", color="tab:red", lw=1.5, label="Pareto front", zorder=2)
        empty = x[x.cr.isna() & x.subem.notna()]
        for subem, same in empty.groupby("subem", sort=True):  # rows that kept nothing: one line per SubEM
            text = f"no context: {', '.join(same.variant)} ({float(subem):.1f})"
            # wrapped: the legends of panels side by side must not run into each other
            ax.axhline(float(subem), ls=":", color="tab:green", label=textwrap.fill(text, 60))
        ax.set_xscale("log")
        if len(pts):
            ax.set_xlim(float(pts.cr.min()) / 1.3, float(pts.cr.max()) * 2.2)  # room for the labels
        ax.set_xlabel("compression ratio (original / compressed tokens, log)")
        ax.set_ylabel("SubEM (%) with 95% bootstrap interval")
        ns = sorted({int(v) for v in x.n.dropna()})
        span = "?" if not ns else str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]} per row"
        ax.set_title(f"{label(d)} (n={span})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16))  # below: the points stay visible
    fig.suptitle(f"SubEM vs CR — {profile} profile, generator {generator}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _seconds(x: float) -> str:
    """A duration for a bar label: seconds from 1 s up, milliseconds below."""
    return f"{x:.1f} s" if x >= 1 else f"{x * 1e3:.3g} ms"


def latency_bars(lat: pd.DataFrame, profile: str, generator: str, path: Path) -> Path | None:
    """Stacked horizontal bars per dataset: compression + generation (online) seconds, batch-1 latency only
    (rows without a batch-1 sample are left out: their batched seconds measure throughput, not latency)."""
    plt = _plt()
    g = lat[(lat.profile == profile) & (lat.generator == generator) & (lat.protocol == "batch1")]
    if g.empty:
        return None
    ds = datasets(g)
    fig, axes = plt.subplots(
        1, len(ds), figsize=(5.2 * len(ds), 0.45 * max(len(g.variant.unique()), 2) + 1.6), squeeze=False
    )
    for ax, d in zip(axes[0], ds, strict=True):
        x = g[g.dataset == d].sort_values("total_s", na_position="first")
        y = range(len(x))
        c, o = x.compress_s.fillna(0).values, x.online_s.fillna(0).values
        ax.barh(list(y), c, color="tab:orange", label="compression")
        ax.barh(list(y), o, left=c, color="tab:blue", label="generation (online)")
        for yi, ci, oi in zip(y, c, o, strict=True):  # compression is often too thin to see: print it
            ax.annotate(
                f"compress {_seconds(ci)}",
                (ci + oi, yi),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                fontsize=7,
            )
        ax.set_xlim(0, max(float((c + o).max()) * 1.35, 1e-6) if len(x) else 1)
        ax.set_yticks(list(y), list(x.variant))
        ax.set_xlabel("seconds per example")
        threads = ", ".join(sorted({f"t{t}" for t in x.latency_threads.dropna()}))
        ax.set_title(f"{label(d)} (batch 1, {threads or 'threads unknown'})")
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Latency — {profile} profile, generator {generator}: one example at a time after warm-up")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
