"""Readers by size (issue 93): CompSelect's Figure 1 at the small end. The Table 2 rows (and ``top1``) of the headline's
profile read by every reader whose parameter count is known (``data/reader_sizes.yaml``), smallest first.

Per dataset, on the questions every compared row of every reader answered (``readers.compare``: paired by example
id):
- each row's SubEM with its interval under each reader, and its difference from that reader's ``full`` with the
  paired bootstrap test;
- a plot: SubEM against reader parameters (log axis), one line per row, Figure 1's rows drawn bold;
- what becomes of each difference from ``full`` that the smallest reader finds significant, under each larger one:
  ``holds`` (same sign, significant, not closer to zero than the smallest reader's interval), ``shrinks`` (same
  sign, significant, closer to zero than that interval), ``vanishes`` (not significant), ``reverses`` (significant,
  the other sign); its overall fate is its fate under the largest reader;
- Kendall's tau-b between every pair of readers' rankings of the non-oracle rows, with its bootstrap interval.
Nothing here loads a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

from harness.stats import LEVEL, RESAMPLES, SEED
from leaderboard import html
from leaderboard.page import Block, Data, Page, View
from leaderboard.reference import reader_sizes, variant_order
from leaderboard.tables import DAGGER, fmt, label
from leaderboard.views.readers import (
    ORACLE,
    TOP1,
    Readers,
    Tau,
    _both,
    _join,
    _waiting,
    compare_all,
    reader_blocks,
    reader_model,
    tau_interval,
)

HOLDS, SHRINKS, VANISHES, REVERSES = "holds", "shrinks", "vanishes", "reverses"
FIGURE1 = (TOP1, "full", ORACLE, "recomp_extr", "refiner", "compselect")  # CompSelect's Figure 1 rows (+ its own)


def params_of(model: str | None) -> int | None:
    """A recorded ``generator_model`` (``ref@sha``)'s parameter count, None when the table does not know it."""
    entry = reader_sizes().get((model or "").split("@", 1)[0])
    return int(entry["params"]) if entry else None


def short(params: int) -> str:
    """A parameter count as the model's name says it (``reader_sizes.yaml``'s ``size``: 135M, 0.5B), else rounded."""
    named = {int(e["params"]): str(e["size"]) for e in reader_sizes().values() if "size" in e}
    return named.get(params) or (f"{params / 1e6:.0f}M" if params < 4e8 else f"{params / 1e9:.1f}B")


def sized_readers(full: pd.DataFrame, profile: str, gen: str) -> tuple[list[str], dict[str, int], list[str]]:
    """The readers of ``profile`` (``readers.reader_blocks``) whose size is known, smallest first; their sizes;
    the readers left out for want of one."""
    blocks = reader_blocks(full, profile, gen)
    model = {g: reader_model(full[(full.profile == profile) & (full.generator == g)]) for g in blocks}
    size = {g: params_of(model[g]) for g in blocks}
    known = sorted((g for g in blocks if size[g]), key=lambda g: size[g])
    return known, {g: int(size[g]) for g in known}, [g for g in blocks if not size[g]]


def fate(d0: float, lo0: float, hi0: float, d: float, significant: bool) -> str:
    """What becomes, under a larger reader, of a difference ``d0`` [``lo0``, ``hi0``] the smallest found
    significant: the larger reader's difference ``d`` and its test."""
    if not significant:
        return VANISHES
    if np.sign(d) != np.sign(d0):
        return REVERSES
    nearer_zero = lo0 if d0 > 0 else hi0
    return SHRINKS if abs(d) < abs(nearer_zero) else HOLDS


@dataclass
class Fates:
    """The smallest reader's significant differences from ``full`` on one dataset and their fate under each larger
    reader (``trail``: per larger reader, smallest first)."""

    dataset: str
    trail: dict[str, list[str]]  # variant -> fates

    @property
    def overall(self) -> dict[str, str]:
        return {v: t[-1] for v, t in self.trail.items()}


def fates(c: Readers) -> Fates:
    first, rest = c.gens[0], c.gens[1:]
    trail = {}
    for v in c.marks:
        r0 = c.row(first, v)
        if v == ORACLE or not bool(r0.sig_subem):
            continue
        trail[v] = [
            fate(r0.d_subem, r0.d_subem_lo, r0.d_subem_hi, c.row(g, v).d_subem, bool(c.row(g, v).sig_subem))
            for g in rest
        ]
    return Fates(c.dataset, trail)


def pair_taus(c: Readers, resamples: int = RESAMPLES, seed: int = SEED) -> dict[tuple[str, str], Tau]:
    """Kendall's tau-b between every pair of readers' rankings of the non-oracle rows on the shared questions."""
    return {(a, b): tau_interval(c.scores[a], c.scores[b], resamples, seed) for a, b in combinations(c.gens, 2)}


def _cell(r) -> str:
    return f"{fmt(r.subem, '{:.1f}')} [{fmt(r.subem_lo, '{:.1f}')}, {fmt(r.subem_hi, '{:.1f}')}]"


def _delta(r) -> str:
    if r.d_subem is None or pd.isna(r.d_subem):
        return "-"
    return f"{r.d_subem:+.1f}" + ("" if r.sig_subem else f" {DAGGER}")


def table(c: Readers, size: dict[str, int], f: Fates) -> tuple[list[tuple[str, str]], list[list[str]]]:
    """One dataset: per row, each reader's SubEM [interval] and difference from its ``full``, then the fate of the
    smallest reader's significant difference. Columns are (reader, metric) pairs."""
    cols = [("", "Method")]
    cols += [(short(size[g]), m) for g in c.gens for m in ("SubEM", "Δ vs full")]
    cols.append(("", "smallest reader's verdict, larger readers"))
    rows = []
    for v in variant_order(sorted(set(c.rows.variant))):
        cells = [v]
        for g in c.gens:
            r = c.row(g, v)
            cells += [_cell(r), "" if v == "full" else _delta(r)]
        trail = f.trail.get(v)
        cells.append(" → ".join(trail) if trail else "-")
        rows.append(cells)
    return cols, rows


def tau_table(
    cs: list[Readers], size: dict[str, int], resamples: int = RESAMPLES
) -> tuple[list[tuple[str, str]], list[list[str]]]:
    """Kendall's tau-b [interval] per pair of readers (rows) and dataset (columns)."""
    taus = {c.dataset: pair_taus(c, resamples) for c in cs}
    cols = [("", "Readers")] + [(label(c.dataset), f"τ-b (n = {c.n})") for c in cs]
    rows = []
    for a, b in combinations(cs[0].everyone, 2):
        cells = [f"{short(size[a])} vs {short(size[b])}"]
        for c in cs:
            t = taus[c.dataset].get((a, b))
            cells.append(f"{t.tau:.2f} [{t.lo:.2f}, {t.hi:.2f}]" if t else "-")
        rows.append(cells)
    return cols, rows


def said(cs: list[Readers], fs: list[Fates], size: dict[str, int]) -> str:
    """Which of the smallest reader's significant differences from ``full`` hold under every larger reader, shrink,
    vanish or reverse (under the largest), named."""
    gens = cs[0].everyone
    small = short(size[gens[0]])
    largest = {short(size[c.gens[-1]]) for c in cs}
    large = f"the {next(iter(largest))} reader" if len(largest) == 1 else "each dataset's largest reader"
    named: dict[str, list[str]] = {m: [] for m in (HOLDS, SHRINKS, VANISHES, REVERSES)}
    every = []
    for c, f in zip(cs, fs, strict=True):
        for v, t in f.trail.items():
            side = "above" if c.row(gens[0], v).d_subem > 0 else "below"
            name = f"`{v}` {side} on {label(c.dataset)}"
            named[t[-1]].append(name)
            every += [name] if all(x == HOLDS for x in t) else []
    total = sum(len(x) for x in named.values())
    if not total:
        return f"The {small} reader finds no non-oracle row significantly different from `full`."
    return (
        f"Of the {total} differences from `full` that the {small} reader finds significant (non-oracle rows), under "
        f"{large} {len(named[HOLDS])} hold ({_join(named[HOLDS], 'none')}), "
        f"{len(named[SHRINKS])} shrink ({_join(named[SHRINKS], 'none')}), "
        f"{len(named[VANISHES])} vanish ({_join(named[VANISHES], 'none')}) and "
        f"{len(named[REVERSES])} reverse ({_join(named[REVERSES], 'none')})"
        + (f"; {len(every)} hold under every reader ({_join(every, 'none')})." if len(gens) > 2 else ".")
    )


def frame(cs: list[Readers], fs: list[Fates], size: dict[str, int], models: dict[str, str | None]) -> pd.DataFrame:
    """Every compared row, long (the CSV): dataset, reader, its model and size, variant, n, SubEM with interval,
    the paired difference from ``full``, and the fate of the smallest reader's significant difference."""
    out = []
    for c, f in zip(cs, fs, strict=True):
        for k, g in enumerate(c.gens):
            for r in c.rows[c.rows.generator == g].itertuples():
                trail = f.trail.get(r.variant)
                out.append(
                    {
                        "dataset": c.dataset,
                        "generator": g,
                        "generator_model": models.get(g),
                        "params": size[g],
                        "variant": r.variant,
                        "n": r.n,
                        **{m: getattr(r, m) for m in ("subem", "subem_lo", "subem_hi", "cr")},
                        **{m: getattr(r, m) for m in ("d_subem", "d_subem_lo", "d_subem_hi", "p_subem", "sig_subem")},
                        "fate": (trail[k - 1] if k else "smallest") if trail else None,
                        "fate_at_largest": trail[-1] if trail else None,
                    }
                )
    return pd.DataFrame(out)


def plot(cs: list[Readers], size: dict[str, int], path: Path) -> Path:
    """Per dataset, SubEM against reader parameters (log axis): one line per row, Figure 1's rows in colour and
    labelled, the others grey."""
    from leaderboard.plots import _plt, _save_png

    plt = _plt()
    fig, axes = plt.subplots(1, len(cs), figsize=(4.6 * len(cs), 4.4), squeeze=False)
    colours = dict(zip(FIGURE1, plt.get_cmap("tab10").colors, strict=False))
    for ax, c in zip(axes[0], cs, strict=True):
        xs = [size[g] for g in c.gens]  # the readers of this dataset
        shown = variant_order(sorted(set(c.rows.variant)))
        grey = [v for v in shown if v not in colours]
        for v in grey + [v for v in shown if v in colours]:
            ys = [float(c.row(g, v).subem) for g in c.gens]
            if v in colours:
                ax.plot(xs, ys, marker="o", lw=2, color=colours[v], label=v)
            else:
                ax.plot(xs, ys, lw=0.8, color="0.7", label="other Table 2 rows" if v == grey[0] else None)
        ax.set_xscale("log")
        ax.set_xticks(xs, [short(x) for x in xs])
        ax.minorticks_off()
        ax.set_xlabel("reader parameters (log)")
        ax.set_ylabel("SubEM")
        ax.set_title(f"{label(c.dataset)} (n = {c.n})")
        ax.grid(alpha=0.3)
    handles, names = axes[0][0].get_legend_handles_labels()
    grey = [(h, n) for h, n in zip(handles, names, strict=True) if n == "other Table 2 rows"]
    keep = [(h, n) for h, n in zip(handles, names, strict=True) if n in colours] + grey[:1]
    fig.legend([h for h, _ in keep], [n for _, n in keep], loc="lower center", ncol=min(len(keep), 7), fontsize=8)
    fig.suptitle("Readers by size: SubEM of each row under each reader (bold: CompSelect's Figure 1 rows)")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    _save_png(fig, path)
    plt.close(fig)
    return path


def section(
    full: pd.DataFrame, profile: str, gen: str, out: Path, stem: str, resamples: int = RESAMPLES
) -> tuple[str, str, list[Path]]:
    """The view's Markdown, HTML and the files written (``size_<stem>.csv``, ``size_<stem>.png``); nothing while
    fewer than two readers of known size read the rows."""
    gens, size, unsized = sized_readers(full, profile, gen)
    if len(gens) < 2:
        return "", "", []
    cs = compare_all(full, gens, profile, resamples=resamples)
    if not cs:
        return "", "", []
    fs = [fates(c) for c in cs]
    models = {g: reader_model(full[(full.profile == profile) & (full.generator == g)]) for g in gens}
    legend = "; ".join(f"{short(size[g])}: `{g}` ({reader_sizes()[models[g].split('@')[0]]['label']})" for g in gens)
    key = (
        f"Readers, smallest first: {legend}. Per dataset, the Table 2 rows and `top1` on the questions every row of "
        f"every reader answered (paired by example id). SubEM with its {LEVEL:.0%} bootstrap interval; Δ: the row "
        f"minus its reader's `full`, paired bootstrap, {DAGGER}: not significant. Last column: for a difference the "
        f"smallest reader finds significant, its fate under each larger reader: `{HOLDS}` (same sign, significant), "
        f"`{SHRINKS}` (same sign, significant, closer to zero than the smallest reader's interval), `{VANISHES}` "
        f"(not significant), `{REVERSES}` (significant, the other sign)."
        + (f" Left out (no size in leaderboard/data/reader_sizes.yaml): {', '.join(unsized)}." if unsized else "")
    )
    parts = [(f"### Readers by size\n\n{key}\n", html.section("Readers by size", html.note(key), 3))]
    png = out / f"size_{stem}.png"
    plot(cs, size, png)
    parts.append((f"![readers by size]({png.name})\n", html.figure(profile, gen, png)))
    for c, f in zip(cs, fs, strict=True):
        left = f"Left out (not run under every reader): {', '.join(c.left)}." if c.left else ""
        left += _waiting(c, lambda g: short(size[g]))
        parts.append(_both(f"By size: {label(c.dataset)} (n = {c.n})", "", *table(c, size, f), left))
    cols, rows = tau_table(cs, size, resamples)
    text = "Kendall's τ-b between two readers' rankings of the non-oracle rows by SubEM; bootstrap over questions."
    parts.append(_both("By size: do the readers rank the rows alike?", text, cols, rows))
    text = said(cs, fs, size)
    strong = f"<p><strong>What holds as the reader grows.</strong> {escape(text.replace('`', ''))}</p>"
    parts.append((f"**What holds as the reader grows.** {text}\n", strong))
    csv = out / f"size_{stem}.csv"
    frame(cs, fs, size, models).to_csv(csv, index=False)
    return "\n".join(m for m, _ in parts), "".join(h for _, h in parts), [csv, png]


def render(page: Page, d: Data, b: Block) -> None:
    """The headline profile's readers by size, with ``size_<profile>_<generator>.csv`` and its plot; nothing in
    an archived block."""
    if page.archive:
        return
    md, body, files = section(d.full, b.profile, b.gen, page.out, b.slug, d.resamples)
    if files:
        page.md.append(md)
        page.add(body)
        page.written += files


VIEW = View("size", "readers", render)
