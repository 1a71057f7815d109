"""Plots (matplotlib, Agg): SubEM against CR per dataset with the Pareto front, and latency bars.

The Pareto front is the set of non-oracle runs that no other non-oracle run beats on both SubEM and CR
(higher is better on both). Runs without a CR (closed-book ``naive``) are drawn as a horizontal line. A run that
kept nothing on more than half its questions is drawn hollow and labelled ``∅k%`` (k% of its contexts empty):
its CR, over all questions, counts those as compressed to nothing.

Only the Table 2 rows (``leaderboard/data/methods.yaml``) and the front carry a label and an interval (every point
when a panel has at most ``LABEL_ALL`` of them); the labels are placed apart by ``adjustText`` (any pair still
touching is then pushed apart vertically) and tied to their point by a thin line when moved off it. The other
variants are smaller, lighter points, named by the page's hover: ``subem_vs_cr`` also writes an SVG beside the
PNG in which every point carries its name, SubEM, interval and CR as a ``<title>``.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape as xml_escape

import pandas as pd

from leaderboard import reference
from leaderboard.tables import EMPTY, MOSTLY_EMPTY, _num, datasets, label

LABEL_ALL = 12  # a panel with at most this many points labels every one
LABEL_PT = 8.5
PNG_COLORS = 64
LEADER_PX = 6  # a label moved farther than this from its point is tied to it by a line


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


@dataclass
class Drawn:
    """A SubEM-CR figure: its labels (every panel's, for the overlap check) and each point's hover text by SVG id."""

    fig: Any
    labels: list[Any] = field(default_factory=list)
    titles: dict[str, str] = field(default_factory=dict)


def _title(r: Any) -> str:
    """A point's hover text: name, SubEM with its interval, CR, and the share of empty contexts when most are."""
    lo, hi = _num(getattr(r, "subem_lo", None)), _num(getattr(r, "subem_hi", None))
    ci = f" [{lo:.1f}, {hi:.1f}]" if lo is not None and hi is not None else ""
    empty = f", {empty_label(r)[1:]} of contexts empty" if mostly_empty(r) else ""
    oracle = " (oracle: reads the gold answers)" if r.oracle else ""
    return f"{r.variant}{oracle}: SubEM {r.subem:.1f}{ci}, CR {r.cr:.2f}×{empty}"


def _point(ax: Any, r: Any, on_front: bool, named: bool) -> Any:
    """One run's marker (with its 95% interval when labelled); returns the artist that carries its hover."""
    hollow = mostly_empty(r)
    if not named:
        color = "0.65" if r.oracle else "#8fb3d9"
        (line,) = ax.plot([r.cr], [r.subem], "D" if r.oracle else "o", ms=4.5, color=color, zorder=2)
        line.set_markerfacecolor("none" if hollow else color)
        return line
    color = "tab:red" if on_front else ("tab:gray" if r.oracle else "tab:blue")
    lo, hi = _num(getattr(r, "subem_lo", None)), _num(getattr(r, "subem_hi", None))
    err = [[r.subem - lo], [hi - r.subem]] if lo is not None and hi is not None else None
    bars = ax.errorbar(
        r.cr,
        r.subem,
        yerr=err,
        fmt="D" if r.oracle else "o",
        ms=7 if on_front else 6,
        color=color,
        mfc="none" if hollow else color,
        capsize=2.5,
        elinewidth=1,
        alpha=0.9,
        zorder=3,
    )
    return bars.lines[0]


def _panel(ax: Any, x: pd.DataFrame, gid: str, drawn: Drawn) -> tuple[list[Any], list[tuple[float, float]]]:
    """One dataset's points, front and no-context lines; returns its labels and the points they name."""
    pts = x[x.cr.notna() & x.subem.notna()]
    normal = pts[~pts.oracle.astype(bool)]
    front = pareto_front([(r.variant, float(r.cr), float(r.subem)) for r in normal.itertuples()])
    named = set(pts.variant) if len(pts) <= LABEL_ALL else reference.table2_variants() | set(front)
    texts, targets = [], []
    for i, r in enumerate(pts.itertuples()):
        art = _point(ax, r, r.variant in front, r.variant in named)
        art.set_gid(f"{gid}-p{i}")
        drawn.titles[f"{gid}-p{i}"] = _title(r)
        if r.variant in named:
            text = r.variant + (f" {empty_label(r)}" if mostly_empty(r) else "")
            texts.append(ax.text(r.cr, r.subem, text, fontsize=LABEL_PT, color="0.15", zorder=4, in_layout=False))
            targets.append((float(r.cr), float(r.subem)))
    if front:
        f = normal.set_index("variant").loc[front]
        ax.step(f.cr, f.subem, where="pre", color="tab:red", lw=1.4, zorder=2)
    if len(pts):
        ax.set_xlim(float(pts.cr.min()) / 1.5, float(pts.cr.max()) * 1.8)
    empty = x[x.cr.isna() & x.subem.notna()]
    for subem, same in empty.groupby("subem", sort=True):  # rows that kept nothing: one line per SubEM
        ax.axhline(float(subem), ls=":", color="tab:green", lw=1.2, zorder=1)
        left = ax.get_xlim()[0] * 1.05
        texts.append(
            ax.text(
                left,
                float(subem),
                f"no context: {', '.join(same.variant)} {float(subem):.1f}",
                fontsize=LABEL_PT,
                color="tab:green",
                zorder=4,
                in_layout=False,
            )
        )
        targets.append((left, float(subem)))
    for k, t in enumerate(texts):
        t.set_gid(f"{gid}-l{k}")  # the page's test finds each label's box by this id
    return texts, targets


def _separate(ax: Any, texts: list[Any], renderer: Any, gap: float = 1.0) -> None:
    """Push apart, upwards, any labels whose boxes still touch after ``adjust_text`` (display coordinates)."""
    placed: list[Any] = []
    for t in sorted(texts, key=lambda t: t.get_window_extent(renderer).y0):
        box = t.get_window_extent(renderer)
        dy = 0.0
        while hit := [p for p in placed if box.translated(0, dy).overlaps(p.expanded(1, 1).padded(gap))]:
            dy = max(p.y1 for p in hit) + gap - box.y0 + 0.5
        if dy:
            px, py = ax.transData.transform(t.get_position())
            t.set_position(ax.transData.inverted().transform((px, py + dy)))
        placed.append(t.get_window_extent(renderer))


def _leaders(ax: Any, texts: list[Any], targets: list[tuple[float, float]], renderer: Any) -> None:
    """A thin line from each point to its label where the label was moved off it."""
    for t, (x, y) in zip(texts, targets, strict=True):
        box = t.get_window_extent(renderer)
        px, py = ax.transData.transform((x, y))
        nx, ny = min(max(px, box.x0), box.x1), min(max(py, box.y0), box.y1)
        if math.hypot(nx - px, ny - py) > LEADER_PX:
            end = ax.transData.inverted().transform((nx, ny))
            ax.plot([x, end[0]], [y, end[1]], color="0.55", lw=0.6, zorder=1.5, clip_on=False)


def label_boxes(drawn: Drawn) -> list[Any]:
    """The drawn extents (display coordinates) of every label of the figure."""
    renderer = drawn.fig.canvas.get_renderer()
    return [t.get_window_extent(renderer) for t in drawn.labels]


def draw_subem_vs_cr(df: pd.DataFrame, profile: str, generator: str) -> Drawn:
    """The figure: one panel per dataset, labels placed apart (``adjustText``), every point with a hover text."""
    from adjustText import adjust_text

    plt = _plt()
    g = df[(df.profile == profile) & (df.generator == generator)]
    ds = datasets(g)
    fig, axes = plt.subplots(1, len(ds), figsize=(5 * len(ds), 6.2), squeeze=False)
    drawn = Drawn(fig)
    placed = []
    for k, (ax, d) in enumerate(zip(axes[0], ds, strict=True)):
        x = g[g.dataset == d]
        texts, targets = _panel(ax, x, f"{_gid(profile, generator)}-{k}", drawn)
        ax.set_xscale("log")
        ax.set_xlabel("compression ratio (original / compressed tokens, log)")
        ax.set_ylabel("SubEM (%), 95% bootstrap interval")
        ns = sorted({int(v) for v in x.n.dropna()})
        span = "?" if not ns else str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]} per row"
        ax.set_title(f"{label(d)} (n={span})")
        ax.grid(alpha=0.3)
        placed.append((ax, texts, targets))
    fig.suptitle(f"SubEM vs CR — {profile} profile, generator {generator}")
    fig.legend(handles=_legend_handles(plt), loc="lower center", ncol=5, fontsize=8.5, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))  # the layout is final before the labels are placed
    renderer = fig.canvas.get_renderer()
    for ax, texts, targets in placed:
        if texts:
            xs = [p[0] for p in targets] + [float(v) for ln in ax.lines for v in ln.get_xdata()[:1]]
            ys = [p[1] for p in targets] + [float(v) for ln in ax.lines for v in ln.get_ydata()[:1]]
            adjust_text(
                texts,
                x=xs,
                y=ys,
                ax=ax,
                expand=(1.15, 1.4),
                force_static=(0.3, 0.5),
                iter_lim=150,
                ensure_inside_axes=True,
            )
            _separate(ax, texts, renderer)
            _leaders(ax, texts, targets, renderer)
        drawn.labels += texts
    return drawn


def _legend_handles(plt: Any) -> list[Any]:
    from matplotlib.lines import Line2D

    dot = dict(ls="none", marker="o")
    return [
        Line2D([], [], color="tab:red", lw=1.4, marker="o", label="Pareto front"),
        Line2D([], [], color="tab:blue", **dot, label="Table 2 row (95% interval)"),
        Line2D([], [], color="#8fb3d9", ms=4.5, **dot, label="other variant (name on hover)"),
        Line2D([], [], color="tab:gray", ls="none", marker="D", label="oracle (reads the gold answers)"),
        Line2D([], [], color="tab:blue", mfc="none", **dot, label=f"hollow {EMPTY}k%: k% of contexts empty"),
    ]


def _gid(*parts: str) -> str:
    return "sc-" + re.sub(r"[^A-Za-z0-9-]+", "-", "-".join(parts))


def _svg(drawn: Drawn, path: Path, salt: str) -> None:
    """The figure as SVG, each point's group given its hover text as a ``<title>`` (ids salted per figure, so
    that several figures inline in one page keep distinct ids)."""
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": salt}):
        buf = io.StringIO()
        drawn.fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    for gid, title in drawn.titles.items():
        svg = svg.replace(f'<g id="{gid}">', f'<g id="{gid}"><title>{xml_escape(title)}</title>', 1)
    path.write_text(svg, encoding="utf-8")


def subem_vs_cr(df: pd.DataFrame, profile: str, generator: str, path: Path) -> Path:
    """The SubEM-CR figure as a PNG at ``path`` and, beside it, an SVG whose points name themselves on hover."""
    plt = _plt()
    drawn = draw_subem_vs_cr(df, profile, generator)
    _save_png(drawn.fig, path)
    _svg(drawn, path.with_suffix(".svg"), _gid(profile, generator))
    plt.close(drawn.fig)
    return path


def _save_png(fig: Any, path: Path) -> None:
    """``fig`` as a PNG of at most ``PNG_COLORS`` colours (a plot has few; a third of the bytes of a full-colour
    one, which the page embeds as base64)."""
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    img = Image.open(buf).convert("RGB").quantize(PNG_COLORS, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    img.save(path, format="PNG", optimize=True)


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
    _save_png(fig, path)
    plt.close(fig)
    return path
