"""Kept and read (issue 93): does a row lose the answer, or does the reader read what is left better?

Per dataset and Table 2 row (and ``top1``), on the questions every compared row of every reader answered:
- ``kept``: the share of questions whose compressed context still holds a gold answer, by SubEM's own match rule
  (``harness.metrics.subem`` on the context as the generator was given it; the same context under every reader);
- per reader, SubEM on the questions where the answer was kept and where it was lost;
- the row's SubEM difference from ``full`` under that reader, split exactly into three parts. With ``k`` the kept
  share, ``a`` SubEM where kept and ``b`` where lost (``f`` for ``full``'s):
  ``Δ = (k - k_f) a_f`` (losing the answer, read at ``full``'s rate) ``+ k (a - a_f)`` (reading a kept answer
  better or worse) ``+ ((1 - k) b - (1 - k_f) b_f)`` (answering without the answer in the context).
  Each part has a percentile bootstrap interval over the questions (in the CSV; the table marks a part whose
  interval holds 0 with a dagger).
The contexts are the records' own or, for an archive, its store (``leaderboard.context_store``); a row whose texts
neither holds is named and left out. Nothing here loads a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from pathlib import Path

import numpy as np
import pandas as pd

from harness.metrics import subem
from harness.stats import LEVEL, RESAMPLES, SEED
from leaderboard import context_store, html
from leaderboard.collect import read_records
from leaderboard.page import Block, Data, Page, View
from leaderboard.reference import table2_variants, variant_order
from leaderboard.tables import DAGGER, datasets, label
from leaderboard.views.readers import TOP1, _both, _join, reader_blocks, reader_names

PARTS = ("lost", "read", "without")  # the three parts of a difference from full


@dataclass
class Kept:
    """One dataset: per (reader, variant) the kept share, SubEM where kept and lost, and the parts of the
    difference from ``full`` (``rows``); the variants left out for want of context texts (``textless``)."""

    dataset: str
    gens: list[str]
    n: int
    rows: pd.DataFrame
    textless: list[str]
    ids: list[str]


def holds(records: list[dict]) -> dict[str, bool] | None:
    """Per example id, whether its context holds a gold answer (SubEM's rule); None when a record has no text."""
    if not all("context" in r for r in records):
        return None
    return {r["id"]: bool(subem(r["context"], r["answers"])) for r in records}


def split(s: np.ndarray, k: np.ndarray, sf: np.ndarray, kf: np.ndarray) -> np.ndarray:
    """The parts (lost, read, without) of mean(s) - mean(sf) along the last axis, in points: ``s``/``sf`` the row's
    and ``full``'s 0/1 SubEM, ``k``/``kf`` whether their contexts held an answer."""

    def rates(s: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        kept = k.mean(-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            a = np.where(kept > 0, (s * k).sum(-1) / np.maximum(k.sum(-1), 1), 0.0)
            b = np.where(kept < 1, (s * (1 - k)).sum(-1) / np.maximum((1 - k).sum(-1), 1), 0.0)
        return kept, a, b

    k1, a1, b1 = rates(s, k)
    k0, a0, b0 = rates(sf, kf)
    return 100 * np.stack([(k1 - k0) * a0, k1 * (a1 - a0), (1 - k1) * b1 - (1 - k0) * b0], axis=-1)


def intervals(
    s: np.ndarray, k: np.ndarray, sf: np.ndarray, kf: np.ndarray, resamples: int = RESAMPLES, seed: int = SEED
) -> np.ndarray:
    """(3, 2): each part's percentile bootstrap interval, the questions resampled with replacement."""
    idx = np.random.default_rng(seed).integers(0, s.shape[-1], size=(resamples, s.shape[-1]))
    parts = split(s[idx], k[idx], sf[idx], kf[idx])
    al = (1 - LEVEL) / 2
    return np.quantile(parts, [al, 1 - al], axis=0).T


def _scores(rows: pd.DataFrame, archive: Path, dataset: str) -> tuple[dict, dict]:
    """Per (generator, variant): id -> SubEM; per variant: id -> kept (from the first reader holding its texts)."""
    score, kept = {}, {}
    for r in rows.itertuples():
        recs = read_records(r.folder, None if pd.isna(r.n) else int(r.n))
        score[r.generator, r.variant] = {x["id"]: float(x["subem"]) for x in recs}
        if kept.get(r.variant) is None:
            kept[r.variant] = holds(context_store.fill(recs, archive, dataset))
    return score, kept


def compare(
    full: pd.DataFrame, gens: list[str], profile: str, dataset: str, archive: Path, resamples: int = RESAMPLES
) -> Kept | None:
    """``dataset``'s rows under the readers ``gens`` on their shared questions; None without ``full``'s texts."""
    t2 = full[(full.profile == profile) & (full.dataset == dataset) & full.variant.isin(table2_variants() | {TOP1})]
    t2 = t2[t2.generator.isin(gens)]
    if not gens:
        return None
    common = set.intersection(*(set(t2[t2.generator == g].variant) for g in gens))
    rows = t2[t2.variant.isin(common)]
    score, kept = _scores(rows, archive, dataset)
    if kept.get("full") is None:
        return None
    textless = variant_order(sorted(v for v in common if kept.get(v) is None))
    shown = variant_order(sorted(v for v in common if kept.get(v) is not None))
    ids = sorted(frozenset.intersection(*(frozenset(score[g, v]) for g in gens for v in shown)))
    if not ids:
        return None
    k = {v: np.array([kept[v][q] for q in ids], dtype=float) for v in shown}
    out = []
    for g in gens:
        sf = np.array([score[g, "full"][q] for q in ids])
        for v in shown:
            s = np.array([score[g, v][q] for q in ids])
            parts, ci = split(s, k[v], sf, k["full"]), intervals(s, k[v], sf, k["full"], resamples)
            kv = k[v].astype(bool)
            out.append(
                {
                    "dataset": dataset,
                    "generator": g,
                    "variant": v,
                    "n": len(ids),
                    "kept": 100 * k[v].mean(),
                    "subem": 100 * s.mean(),
                    "subem_kept": 100 * s[kv].mean() if kv.any() else np.nan,
                    "subem_lost": 100 * s[~kv].mean() if (~kv).any() else np.nan,
                    "d_subem": 100 * (s.mean() - sf.mean()),
                    **{f"d_{p}": float(parts[i]) for i, p in enumerate(PARTS)},
                    **{f"d_{p}_{e}": float(ci[i, j]) for i, p in enumerate(PARTS) for j, e in enumerate(("lo", "hi"))},
                }
            )
    return Kept(dataset, list(gens), len(ids), pd.DataFrame(out), textless, ids)


def _pct(x: float) -> str:
    return "-" if pd.isna(x) else f"{x:.0f}"


def _parts(r) -> str:
    """``Δ = lost + read + without``, each part signed once, a dagger where its interval holds 0."""
    text = f"{r.d_subem:+.1f} ="
    for k, p in enumerate(PARTS):
        x, lo, hi = getattr(r, f"d_{p}") + 0.0, getattr(r, f"d_{p}_lo"), getattr(r, f"d_{p}_hi")
        sign = (" -" if x < 0 else " ") if k == 0 else (" - " if x < 0 else " + ")
        text += f"{sign}{abs(x):.1f}" + ("" if lo > 0 or hi < 0 else DAGGER)
    return text


def table(c: Kept, names: dict[str, str]) -> tuple[list[tuple[str, str]], list[list[str]]]:
    """One dataset: per row its kept share, then per reader SubEM where kept / lost and Δ split into its parts."""
    cols = [("", "Method"), ("", "answer kept %")]
    cols += [(names[g], m) for g in c.gens for m in ("SubEM kept / lost", "Δ = lost + read + without")]
    rows = []
    for v in variant_order(sorted(set(c.rows.variant))):
        at = c.rows[c.rows.variant == v]
        cells = [v, f"{at.kept.iloc[0]:.1f}"]
        for g in c.gens:
            r = next(at[at.generator == g].itertuples())
            cells.append(f"{_pct(r.subem_kept)} / {_pct(r.subem_lost)}")
            cells.append("" if v == "full" else _parts(r))
        rows.append(cells)
    return cols, rows


def said(cs: list[Kept], names: dict[str, str]) -> str:
    """Per reader, how many rows' differences from ``full`` come mostly from reading and how many mostly from losing
    the answer (the larger of the two parts), per dataset."""
    out = []
    for g in names:
        per = []
        for c in (c for c in cs if g in c.gens):
            r = c.rows[(c.rows.generator == g) & ~c.rows.variant.isin(["full", "naive"])]
            reading = int((r.d_read.abs() > r.d_lost.abs()).sum())
            per.append(f"{reading} of {len(r)} on {label(c.dataset)}")
        out.append(f"{names[g]}: {_join(per)}")
    return (
        "Rows (other than `full` and `naive`) whose difference from `full` comes more from reading what was kept "
        f"than from losing the answer — {'; '.join(out)}."
    )


def frame(cs: list[Kept], names: dict[str, str]) -> pd.DataFrame:
    return pd.concat([c.rows.assign(reader=c.rows.generator.map(names)) for c in cs], ignore_index=True)


def section(d: Data, b: Block, out: Path, resamples: int = RESAMPLES) -> tuple[str, str, Path | None]:
    """The view's Markdown, HTML and CSV (``kept_<block>.csv``); nothing while ``full``'s contexts are unknown."""
    gens = reader_blocks(d.full, b.profile, b.gen)
    first = d.full[(d.full.profile == b.profile) & (d.full.generator == b.gen)]
    fulls = d.full[(d.full.profile == b.profile) & (d.full.variant == "full")]
    cs = []
    for ds in datasets(first):  # per dataset, the readers that read its full (every reader numbered as everywhere)
        here = [g for g in gens if ((fulls.generator == g) & (fulls.dataset == ds)).any()]
        cs.append(compare(d.full, here, b.profile, ds, d.results, resamples))
    cs = [c for c in cs if c is not None]
    if not cs:
        return "", "", None
    names = reader_names(d.full, b.profile, gens)
    legend = "; ".join(f"{names[g]}: `{g}`" for g in gens)
    key = (
        f"{legend}. Answer kept: the share of questions whose compressed context holds a gold answer (SubEM's match "
        "rule on the context). SubEM kept / lost: the reader's SubEM on the questions where it was kept, and where "
        "it was lost. Δ (the row minus `full`, same reader, same questions) = lost (the answers the row drops, "
        "read at `full`'s rate) + read (reading the kept answers better or worse) + without (answering with no "
        f"answer in the context). {DAGGER}: the part's {LEVEL:.0%} bootstrap interval holds 0."
    )
    parts = [(f"### Kept and read\n\n{key}\n", html.section("Kept and read", html.note(key), 3))]
    for c in cs:
        left = f"Left out (no context texts in the records or the archive): {', '.join(c.textless)}."
        parts.append(
            _both(f"Kept and read: {label(c.dataset)} (n = {c.n})", "", *table(c, names), left * bool(c.textless))
        )
    text = said(cs, names)
    parts.append(
        (
            f"**Losing or reading.** {text}\n",
            f"<p><strong>Losing or reading.</strong> {escape(text.replace('`', ''))}</p>",
        )
    )
    csv = out / f"kept_{b.slug}.csv"
    frame(cs, names).to_csv(csv, index=False)
    return "\n".join(m for m, _ in parts), "".join(h for _, h in parts), csv


def render(page: Page, d: Data, b: Block) -> None:
    """The headline block's kept-and-read tables under every reader, with ``kept_<profile>_<generator>.csv``;
    nothing in an archived block."""
    if not page.archive:
        page.view(*section(d, b, page.out, d.resamples))


VIEW = View("kept", "kept", render)
