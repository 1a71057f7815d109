"""Across readers: the Table 2 rows of one profile read by more than one generator model, side by side.

A *reader* is a block of the headline's profile whose generator reads with another model (``generator_model``,
from the run's ``generator_info``, ``collect.model_ids``); the headline block is the first reader. Two blocks of the
same model (another prompt, another engine) are not two readers: ``reader_blocks`` keeps one block per model, the
headline's own first. ``compare`` takes any list of blocks, so the machinery also runs on two blocks of one model.

Per dataset, on the questions that every Table 2 row (``data/methods.yaml``) of every reader answered (``n``; rows
of different blocks are paired by example id, never by position):
- each row's SubEM, CR and echo under each reader, and its SubEM difference from that reader's ``full`` with the
  paired bootstrap test (``stats.add_uncertainty`` on the re-scored rows, ``matched.rescore``);
- Kendall's tau-b between the first reader's ranking of the non-oracle rows by SubEM and each other reader's, with
  a percentile bootstrap interval: the shared questions are resampled, every row's SubEM and tau recomputed;
- per row, whether its verdict against ``full`` holds for every reader: ``holds`` (same sign, significant under
  each), ``holds in sign only`` (same sign, not significant under at least one), ``signs differ`` (opposite
  signs, not significant under at least one), ``reverses`` (opposite signs, significant under each);
- CompSelect's Figure 1: ``full`` against ``oracle_sentences`` under each reader.
Nothing here loads a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from pathlib import Path

import numpy as np
import pandas as pd

from harness.stats import LEVEL, RESAMPLES, SEED
from leaderboard import html, stats
from leaderboard.collect import read_records
from leaderboard.matched import rescore
from leaderboard.page import Block, Data, Page, View
from leaderboard.reference import reader_notes, reader_sizes, table2_variants, variant_order
from leaderboard.tables import DAGGER, datasets, fmt, label, markdown

HOLDS, SIGN_ONLY, DIFFERS, REVERSES = "holds", "holds in sign only", "signs differ", "reverses"
ORACLE = "oracle_sentences"  # CompSelect's Figure 1 sets full against the oracle clues
TOP1 = "top1"  # ... and the retriever's Top-1 document
COVER = 0.5  # a reader joins a dataset's comparison once it has read this share of the rows the most-read one has


def reader_model(rows: pd.DataFrame) -> str | None:
    """The generator model a block reads with (its rows' most common ``generator_model``), None if unrecorded."""
    models = rows.generator_model.dropna()
    return str(models.mode().iloc[0]) if len(models) else None


def reader_blocks(full: pd.DataFrame, profile: str, gen: str) -> list[str]:
    """The readers of ``profile``: ``gen`` first, then per other generator model one block of that profile (the one
    with the most Table 2 rows, then the most questions, then the newest). Blocks of ``gen``'s own model are not
    other readers."""
    t2 = full[(full.profile == profile) & full.variant.isin(table2_variants())]
    own = reader_model(t2[t2.generator == gen])
    best: dict[str, tuple[int, float, str, str]] = {}
    for g, rows in t2.groupby("generator"):
        model = reader_model(rows)
        if g == gen or model is None or model == own:
            continue
        key = (len(rows), float(rows.n.sum()), str(rows.finished_at.max()), str(g))
        best[model] = max(best.get(model, key), key)
    return [gen, *(g for *_, g in sorted(best.values(), reverse=True))]


def tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of ``x`` and ``y`` along their last axis (any leading axes are batches): (concordant -
    discordant pairs) / sqrt(pairs untied in x * pairs untied in y); NaN where either has every value tied."""
    i, j = np.triu_indices(x.shape[-1], 1)
    sx, sy = np.sign(x[..., i] - x[..., j]), np.sign(y[..., i] - y[..., j])
    den = np.sqrt((sx != 0).sum(-1) * (sy != 0).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (sx * sy).sum(-1) / np.where(den > 0, den, 1), np.nan)


@dataclass(frozen=True)
class Tau:
    """Kendall's tau-b of two readers' SubEM rankings with its percentile bootstrap interval over questions."""

    tau: float
    lo: float
    hi: float
    rows: int  # the rows ranked


def tau_interval(a: np.ndarray, b: np.ndarray, resamples: int = RESAMPLES, seed: int = SEED) -> Tau:
    """``a``, ``b``: (rows, questions) 0/1 SubEM of the same rows on the same questions under two readers. The
    questions are resampled with replacement (``resamples`` times, numpy's PCG64 seeded with ``seed``), every row's
    SubEM recomputed under both readers and tau-b taken; resamples where a reader ties every row are dropped."""
    point = float(tau_b(a.mean(1), b.mean(1)))
    idx = np.random.default_rng(seed).integers(0, a.shape[1], size=(resamples, a.shape[1]))
    taus = tau_b(a[:, idx].mean(-1).T, b[:, idx].mean(-1).T)
    taus = taus[~np.isnan(taus)]
    al = (1 - LEVEL) / 2
    lo, hi = np.quantile(taus, [al, 1 - al]) if taus.size else (np.nan, np.nan)
    return Tau(point, float(lo), float(hi), a.shape[0])


def verdict(deltas: list[float], significant: list[bool]) -> str:
    """Whether a row's verdict against ``full`` holds for every reader (its differences and their tests)."""
    signs = {int(np.sign(d)) for d in deltas}
    if len(signs) > 1:
        return REVERSES if all(significant) and 0 not in signs else DIFFERS
    return HOLDS if all(significant) and signs != {0} else SIGN_ONLY


@dataclass
class Readers:
    """One dataset compared across readers (``compare``)."""

    dataset: str
    gens: list[str]
    n: int  # questions shared by every compared row
    rows: pd.DataFrame  # per (generator, variant): the re-scored row with its paired test against full
    left: list[str]  # Table 2 variants missing under some reader
    tau: dict[str, Tau]  # per reader after the first: against the first
    marks: dict[str, str]  # per variant other than full: verdict across readers
    scores: dict[str, np.ndarray] = field(default_factory=dict)  # per reader: (ranked rows, questions) 0/1 SubEM
    names: dict[str, str] = field(default_factory=dict)  # every compared reader (all datasets) -> "reader k"
    waiting: dict[str, str] = field(default_factory=dict)  # readers left out here, part-way: how far (``_far_enough``)

    def name(self, gen: str) -> str:
        return (self.names or _names(self.gens))[gen]

    @property
    def everyone(self) -> list[str]:
        """Every reader of the comparison, those that did not read this dataset included."""
        return list(self.names or _names(self.gens))

    def row(self, gen: str, variant: str) -> pd.Series:
        return self.rows[(self.rows.generator == gen) & (self.rows.variant == variant)].iloc[0]


def compare(
    full: pd.DataFrame,
    gens: list[str],
    profile: str,
    dataset: str,
    baseline: str = "full",
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Readers | None:
    """The Table 2 rows of ``dataset`` under the blocks ``gens`` of ``profile`` on the questions they all share;
    None when the baseline is missing under a reader or no question is shared."""
    shown = [*table2_variants(), TOP1]  # top1: Figure 1's control row only (not ranked, not side by side)
    t2 = full[(full.profile == profile) & (full.dataset == dataset) & full.variant.isin(shown)]
    per = {g: set(t2[t2.generator == g].variant) for g in gens}
    common = set.intersection(*per.values())
    if baseline not in common:
        return None
    rows = t2[t2.generator.isin(gens) & t2.variant.isin(common)]
    recs = {i: read_records(r.folder, None if pd.isna(r.n) else int(r.n)) for i, r in rows.iterrows()}
    ids = frozenset.intersection(*(frozenset(x["id"] for x in rs) for rs in recs.values()))
    if not ids:
        return None
    scored = pd.DataFrame([rescore(rows.loc[i], recs[i], ids) for i in rows.index]).reset_index(drop=True)
    scored = stats.add_uncertainty(scored, baseline, resamples, seed)
    order = variant_order(sorted(common))
    at = {(r.generator, r.variant): r for r in scored.itertuples()}
    marks = {
        v: verdict([float(at[g, v].d_subem) for g in gens], [bool(at[g, v].sig_subem) for g in gens])
        for v in order
        if v not in (baseline, TOP1)
    }
    ranked = [v for v in order if not bool(rows[rows.variant == v].oracle.any()) and v != TOP1]
    subem = {(r.generator, r.variant): {x["id"]: x["subem"] for x in recs[i]} for i, r in rows.iterrows()}
    key = sorted(ids)

    def matrix(g: str) -> np.ndarray:
        return np.array([[subem[g, v][q] for q in key] for v in ranked], dtype=float)

    scores = {g: matrix(g) for g in gens}
    tau = {g: tau_interval(scores[gens[0]], scores[g], resamples, seed) for g in gens[1:]}
    left = variant_order(sorted(set.union(*per.values()) - common))
    return Readers(dataset, list(gens), len(ids), scored, left, tau, marks, scores)


def compare_all(
    full: pd.DataFrame,
    gens: list[str],
    profile: str,
    baseline: str = "full",
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> list[Readers]:
    """``compare`` on every dataset the first reader has, in the tables' order, among the readers that read its
    ``baseline`` there (at least two; a reader that has not read a dataset yet leaves the others' comparison of it
    standing). Reader numbers are the same on every dataset."""
    rows = full[(full.profile == profile) & (full.variant == baseline)]
    out = []
    for d in datasets(full[(full.profile == profile) & (full.generator == gens[0])]):
        here = [g for g in gens if ((rows.generator == g) & (rows.dataset == d)).any()]
        here, waiting = _far_enough(full, here, profile, d)
        c = compare(full, here, profile, d, baseline, resamples, seed) if len(here) > 1 else None
        if c is not None:
            c.names = reader_names(full, profile, gens)
            c.waiting = waiting
            out.append(c)
    return out


def _far_enough(full: pd.DataFrame, gens: list[str], profile: str, dataset: str) -> tuple[list[str], dict[str, str]]:
    """The readers of ``dataset`` that have read at least ``COVER`` of the Table 2 rows the most-read one has (a
    reader part-way through its pass would cut every comparison down to the few rows it has read), and, for each
    left out, how far it is (``"2 of 14 rows"``)."""
    t2 = full[(full.profile == profile) & (full.dataset == dataset) & full.variant.isin(table2_variants())]
    count = {g: t2[t2.generator == g].variant.nunique() for g in gens}
    most = max(count.values(), default=0)
    kept = [g for g in gens if count[g] >= COVER * most]
    return kept, {g: f"{count[g]} of {most} rows" for g in gens if g not in kept}


def _waiting(c: Readers, name=None) -> str:
    """The note on the readers left out of ``c`` part-way through their pass."""
    if not c.waiting:
        return ""
    name = name or c.name
    return (
        " Not compared here yet (part-way through its pass): "
        + ", ".join(f"{name(g)} ({far})" for g, far in c.waiting.items())
        + "."
    )


def _names(gens: list[str]) -> dict[str, str]:
    return {g: f"reader {k + 1}" for k, g in enumerate(gens)}


def reader_names(full: pd.DataFrame, profile: str, gens: list[str]) -> dict[str, str]:
    """Each reader's name in the views: its model's label (``leaderboard/data/reader_sizes.yaml``: SmolLM2-135M-
    Instruct), else ``reader k`` (k: its place in ``gens``), as where two readers' labels would be the same."""
    known = reader_sizes()
    out = _names(gens)
    for g in gens:
        model = (reader_model(full[(full.profile == profile) & (full.generator == g)]) or "").split("@", 1)[0]
        out[g] = (known.get(model) or {}).get("label") or out[g]
    return out if len(set(out.values())) == len(out) else _names(gens)


def _delta(r) -> str:
    if r.d_subem is None or pd.isna(r.d_subem):
        return "-"
    mark = "" if r.sig_subem else f" {DAGGER}"
    return f"{r.d_subem:+.1f} [{r.d_subem_lo:+.1f}, {r.d_subem_hi:+.1f}]{mark}"


def side_by_side(c: Readers, baseline: str = "full") -> tuple[list[tuple[str, str]], list[list[str]]]:
    """One dataset's table: per row, each reader's SubEM, CR, echo and difference from its ``baseline``, then the
    verdict across readers. Columns are (reader, metric) pairs."""
    cols = [("", "Method")]
    cols += [(c.name(g), m) for g in c.gens for m in ("SubEM", "CR", "Echo %", f"Δ SubEM vs {baseline}")]
    cols.append(("", "verdict across readers"))
    rows = []
    for v in variant_order(sorted(set(c.rows.variant) - {TOP1})):
        cells = [v]
        for g in c.gens:
            r = c.row(g, v)
            cells += [fmt(r.subem, "{:.1f}"), fmt(r.cr, "{:.2f}"), fmt(r.echo, "{:.1f}"), _delta(r)]
        rows.append([*cells, c.marks.get(v, "-")])
    return cols, rows


def figure1(cs: list[Readers], baseline: str = "full") -> tuple[list[tuple[str, str]], list[list[str]]]:
    """CompSelect's Figure 1 per reader: the retriever's Top-1 document (``top1``, where it ran under every reader),
    ``baseline`` and ``oracle_sentences`` (SubEM; Δ: the oracle's paired difference from ``baseline``)."""
    cs = [c for c in cs if ORACLE in set(c.rows.variant)]
    top1 = bool(cs) and all(TOP1 in set(c.rows.variant) for c in cs)
    shown = [TOP1] * top1 + [baseline, ORACLE]
    cols = [("", "Reader")] + [(label(c.dataset), m) for c in cs for m in (*shown, f"Δ [{LEVEL:.0%} CI]")]
    if not cs:
        return cols, []
    rows = []
    for g in cs[0].everyone:
        cells = [cs[0].name(g)]
        for c in cs:
            there = g in c.gens
            cells += [fmt(c.row(g, v).subem, "{:.1f}") if there else "-" for v in shown]
            cells.append(_delta(c.row(g, ORACLE)) if there else "-")
        rows.append(cells)
    return cols, rows


def _tau_text(c: Readers) -> str:
    parts = [
        f"{c.name(g)} against {c.name(c.gens[0])}: {t.tau:.2f} [{t.lo:.2f}, {t.hi:.2f}]"
        for g, t in c.tau.items()
        if t.rows > 1
    ]
    rows = next(iter(c.tau.values())).rows if c.tau else 0
    return (
        f"Kendall's τ-b between the readers' rankings of the {rows} non-oracle rows by SubEM, {LEVEL:.0%} bootstrap "
        f"interval over the {c.n} shared questions: {'; '.join(parts) or '-'}."
    )


def _join(items: list[str], none: str = "no dataset") -> str:
    return none if not items else items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _verdicts_said(cs: list[Readers], baseline: str) -> str:
    """Which of reader 1's significant differences from ``baseline`` (non-oracle rows) hold under every reader."""
    first = cs[0].gens[0]
    who = "every other reader" if len(cs[0].everyone) > 2 else cs[0].name(cs[0].everyone[1])
    found = [(c, v) for c in cs for v in c.marks if v != ORACLE and bool(c.row(first, v).sig_subem)]
    if not found:
        return f"{cs[0].name(first)} finds no non-oracle row significantly different from `{baseline}`."
    named = {m: [] for m in (HOLDS, SIGN_ONLY, DIFFERS, REVERSES)}
    for c, v in found:
        side = "above" if c.row(first, v).d_subem > 0 else "below"
        named[c.marks[v]].append(f"`{v}` {side} on {label(c.dataset)}")
    return (
        f"Of the {len(found)} differences from `{baseline}` that {cs[0].name(first)} finds significant (non-oracle "
        "rows), "
        f"{len(named[HOLDS])} hold under {who}, same sign and significant ({_join(named[HOLDS], 'none')}); "
        f"{len(named[SIGN_ONLY])} keep their sign without being significant there, "
        f"{len(named[DIFFERS])} change sign without being significant there ({_join(named[DIFFERS], 'none')}), "
        f"and {len(named[REVERSES])} reverse, significant the other way ({_join(named[REVERSES], 'none')})."
    )


def _rankings_said(cs: list[Readers], baseline: str) -> str:
    """Per reader, where non-oracle rows beat ``baseline`` significantly; where the rankings agree beyond chance."""
    per = []
    for g in cs[0].everyone:
        counts = []
        for c in cs:
            up = sum(
                bool(r.sig_subem) and r.d_subem > 0
                for r in c.rows.itertuples()
                if r.generator == g and r.variant != ORACLE
            )
            counts += [f"{up} on {label(c.dataset)}"] if up else []
        per.append(f"{_join(counts, 'none')} under {cs[0].name(g)}")
    agree = [label(c.dataset) for c in cs if c.tau and all(t.lo > 0 for t in c.tau.values())]
    rest = [label(c.dataset) for c in cs if c.tau and label(c.dataset) not in agree]
    return (
        f"Non-oracle rows significantly above `{baseline}`: {'; '.join(per)}, and the readers rank the non-oracle rows "
        f"alike beyond chance (τ's interval above 0) on {_join(agree)}" + (f", not on {_join(rest)}." if rest else ".")
    )


def _figure1_said(cs: list[Readers], baseline: str) -> str:
    """Whether the oracle's difference from ``baseline`` (CompSelect's Figure 1) holds under every reader."""
    fig = [c for c in cs if ORACLE in c.marks]
    if not fig:
        return ""
    holds = [c for c in fig if c.marks[ORACLE] == HOLDS]
    ds = [float(c.row(g, ORACLE).d_subem) for c in holds for g in c.gens]
    span = f" ({min(ds):+.1f} to {max(ds):+.1f} points)" if ds else ""
    side = "above" if all(d > 0 for d in ds) else "below" if all(d < 0 for d in ds) else "apart from"
    other = [label(c.dataset) for c in fig if c not in holds]
    return (
        f" CompSelect's Figure 1: the oracle sentences read significantly {side} `{baseline}` under every reader on "
        f"{_join([label(c.dataset) for c in holds])}{span}" + (f", not on {_join(other)}." if other else ".")
    )


def conclusions(cs: list[Readers], baseline: str = "full") -> str:
    """Two sentences from the figures (which of reader 1's significant verdicts against ``baseline`` hold under every
    reader; where rows beat it and whether the rankings agree), then one on CompSelect's Figure 1."""
    if not cs:
        return ""
    return f"{_verdicts_said(cs, baseline)} {_rankings_said(cs, baseline)}{_figure1_said(cs, baseline)}"


def frame(cs: list[Readers], models: dict[str, str | None]) -> pd.DataFrame:
    """Every compared row, long: dataset, reader, its model, variant, n and figures, the verdict across readers and
    the reader's tau against reader 1 (the CSV)."""
    out = []
    for c in cs:
        for g in c.gens:
            t = c.tau.get(g)
            for r in c.rows[c.rows.generator == g].itertuples():
                out.append(
                    {
                        "dataset": c.dataset,
                        "reader": c.everyone.index(g) + 1,
                        "generator": g,
                        "generator_model": models.get(g),
                        "variant": r.variant,
                        "n": r.n,
                        **{m: getattr(r, m) for m in ("subem", "cr", "echo")},
                        **{
                            f"{p}subem{s}": getattr(r, f"{p}subem{s}")
                            for p, s in (("d_", ""), ("d_", "_lo"), ("d_", "_hi"), ("p_", ""), ("sig_", ""))
                        },
                        "verdict_across_readers": c.marks.get(r.variant),
                        "tau_vs_reader1": t.tau if t else None,
                        "tau_lo": t.lo if t else None,
                        "tau_hi": t.hi if t else None,
                    }
                )
    return pd.DataFrame(out)


def _both(
    title: str, text: str, cols: list[tuple[str, str]], rows: list[list[str]], after: str = ""
) -> tuple[str, str]:
    """A titled table as Markdown (flat headers) and HTML (reader or dataset over its metrics), a note above or
    below it."""
    md = f"### {title}\n\n" + (f"{text}\n\n" if text else "")
    md += f"{markdown([' '.join(x).strip() for x in cols], rows)}\n" + (f"\n{after}\n" if after else "")
    table = html.frame_html(pd.DataFrame(rows, columns=pd.MultiIndex.from_tuples(cols)))
    return md, html.section(title, html.note(text) + table + html.note(after), 3)


def section(
    full: pd.DataFrame, gens: list[str], profile: str, baseline: str, csv: Path, resamples: int = RESAMPLES
) -> tuple[str, str, Path | None]:
    """The "Across readers" view of the blocks ``gens`` (reader 1 first): its Markdown, its HTML and the CSV
    written (``("", "", None)`` when no dataset could be compared)."""
    cs = compare_all(full, gens, profile, baseline, resamples)
    if not cs:
        return "", "", None
    models = {g: reader_model(full[(full.profile == profile) & (full.generator == g)]) for g in gens}
    notes, names = reader_notes(), reader_names(full, profile, gens)
    legend = "; ".join(
        f"{names[g]}: `{g}` ({models[g] or 'model unrecorded'}" + (f"; {notes[g]})" if g in notes else ")")
        for g in gens
    )
    key = (
        f"{legend}. Per dataset, the Table 2 rows on the questions every row of every reader answered (paired by "
        f"example id). Δ: the row's SubEM minus its reader's `{baseline}`, paired bootstrap {LEVEL:.0%} interval; "
        f"{DAGGER}: not significant. Verdict across readers: `{HOLDS}` (same sign, significant under each), "
        f"`{SIGN_ONLY}` (same sign, not significant under at least one), `{DIFFERS}` (opposite signs, not "
        f"significant under at least one), `{REVERSES}` (opposite signs, significant under each)."
    )
    parts = [(f"{key}\n", html.note(key))]
    for c in cs:
        left = f" Left out (not run under every reader): {', '.join(c.left)}." if c.left else ""
        left += _waiting(c)
        parts.append(_both(f"{label(c.dataset)} (n = {c.n})", "", *side_by_side(c, baseline), _tau_text(c) + left))
    cols, rows = figure1(cs, baseline)
    if rows:
        text = f"CompSelect's Figure 1 per reader: `{baseline}` against `{ORACLE}` (SubEM, Δ = oracle - {baseline})."
        parts.append(_both(f"Figure 1: {baseline} against the oracle", text, cols, rows))
    said = conclusions(cs, baseline)
    parts.append(
        (
            f"**What holds across readers.** {said}\n",
            f"<p><strong>What holds across readers.</strong> {escape(said.replace('`', ''))}</p>",
        )
    )
    frame(cs, models).to_csv(csv, index=False)
    return "\n".join(m for m, _ in parts), "".join(h for _, h in parts), csv


def render(page: Page, d: Data, b: Block) -> None:
    """The headline's Table 2 rows beside the same rows read by another generator model of its profile, with
    ``readers_<profile>_<generator>.csv``; nothing while it has one reader, nor in an archived block."""
    if page.archive:
        return
    gens = reader_blocks(d.full, b.profile, b.gen)
    if len(gens) >= 2:
        page.view(*section(d.full, gens, b.profile, b.baseline, page.out / f"readers_{b.slug}.csv", d.resamples))


VIEW = View("readers", "readers", render)
