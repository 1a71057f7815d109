"""``publish(results, out)``: collect runs, add uncertainty, write Markdown, CSV, LaTeX, plots, an HTML page.

Files written under ``out``:
- ``leaderboard.md``: the headline (profile, generator) block first (``leaderboard.headline``: ``headline``, or the
  block of the newest run among those that made their own contexts), then the page's other sections in order
  (``leaderboard.sections``; ``OWN`` and ``leaderboard.views.VIEWS`` list each one's views), every other block under
  "Archive". The headline: the compact Table 2 (SubEM and CR per dataset; a variant identical to another shown once,
  its alias named), the SubEM-CR plot, latency side by side and break-even. Diagnostics: the Table 2 diagnostics table
  (echo, SubEM from echo, F1), Table 2 re-scored on the questions its rows share (``leaderboard.matched``; rows under
  ``min_n`` records are left out and named), the empty contexts (per row and dataset, the share of questions whose
  context came back empty and the CR over the non-empty ones), the 95% intervals and paired tests against ``full``,
  the methods' own diagnostics, "Answers that choose" (SubEM beside SubEM with hedged and echoed predictions scored 0,
  its paired test against ``full``, the hedge and echo shares). ``leaderboard.views.retrieval``'s views: "When
  retrieval fails" (000 Table 7: the rows on the questions whose passages hold no gold answer, and on the others, the
  paper's figures under them) and "More passages" (rows run with ``dataset.top_k``, kept out of every other table,
  beside the default k). Beside the papers: our rows beside the paper's (difference, setting-tagged), then the papers'
  numbers of every setting, each in its own table. ``NOTES.md`` beside the runs is linked, not pasted.
- ``runs.csv`` (every collected column; run folders relative to the published folder),
  ``table2_<profile>_<generator>.csv`` / ``.tex`` (every Table 2 column),
  ``table2_shared_<profile>_<generator>.csv``, ``empty_contexts_<profile>_<generator>.csv``, ``latency.csv``,
  ``comparison_<profile>_<generator>.csv``, ``answers_that_choose_<profile>_<generator>.csv``, ``reference.csv``
  (a copy of the papers' numbers), ``unreliable_<profile>_<generator>.csv``,
  ``more_passages_<profile>_<generator>.csv`` (where it has rows), ``readers_<profile>_<generator>.csv``
  (Across readers, ``leaderboard.views.readers``: where the profile has a block of another generator model),
  ``scale_<profile>_<generator>.csv`` (At the readers' scale, ``leaderboard.views.scale``: where ``results/scale`` holds
  the block's recounted tokens), ``answer_rank_<profile>_<generator>.csv`` (Where the answer sits,
  ``leaderboard.views.ranks``).
- ``subem_vs_cr_<profile>_<generator>.png`` and ``.svg`` (the page's, with a hover title per point),
  ``latency_<profile>_<generator>.png``.
- ``latency_pass.csv``: the latency passes found under ``results`` (``latency-pass-*.jsonl``, written by
  ``python -m tools.latency_pass``) with their figures against ``full`` (``leaderboard.passes``: within a pass and
  CPU only); each block's "Latency side by side" merges passes (per variant its newest pass, each row against the
  ``full`` of its own pass, naming it), older timings apart.
- ``index.html``: one self-contained page in the same sections, a contents bar linking them; the headline's
  "Two rows, question by question" compares any two of its rows (``leaderboard.views.compare_view``), "All runs" holds
  the grid of every run (folded behind its filters) and their provenance.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd

from leaderboard import html, passes, plots, reference, stats, tables, views
from leaderboard.collect import collect
from leaderboard.headline import aliases, mark_aliases, pick_headline
from leaderboard.matched import MIN_N, matched
from leaderboard.page import Block, Data, Page, View
from leaderboard.page import slug as block_slug
from leaderboard.sections import SECTIONS, by_id
from leaderboard.tables import fmt, label

NOTES = "NOTES.md"  # beside the runs (leaderboard/runs/NOTES.md): linked from leaderboard.md, never pasted


def _comparison_md(cmp: pd.DataFrame, ds: list[str]) -> tuple[list[str], list[list[str]]]:
    head = ["Paper method", "Ours"] + [
        f"{label(d)} {tables.METRIC_LABELS[m]} ours / paper (Δ)" for d in ds for m in reference.COMPARED
    ]
    rows = []
    for r in cmp.to_dict("records"):
        missing = "— (not run)" if reference.method_map().get(r["paper_method"]) else "— (no adapter)"
        cells = [r["paper_method"], missing if pd.isna(r["variant"]) else r["variant"]]
        for d in ds:
            for m in reference.COMPARED:
                o, p, dd = r.get(f"{d}_{m}_ours"), r.get(f"{d}_{m}_paper"), r.get(f"{d}_{m}_diff")
                cells.append(f"{fmt(o)} / {fmt(p)} ({fmt(dd, '{:+.2f}')})" if fmt(p) != "-" else f"{fmt(o)} / -")
        rows.append(cells)
    return head, rows


def _ci(r, m: str) -> str:
    lo, hi = fmt(getattr(r, f"{m}_lo"), "{:.1f}"), fmt(getattr(r, f"{m}_hi"), "{:.1f}")
    return f"{fmt(getattr(r, m))} [{lo}, {hi}]"


def _delta(r, m: str) -> str:
    v = getattr(r, f"d_{m}")
    if v is None or pd.isna(v):
        return "-"
    mark = "" if getattr(r, f"sig_{m}") else f" {tables.DAGGER}"
    lo, hi, p = getattr(r, f"d_{m}_lo"), getattr(r, f"d_{m}_hi"), getattr(r, f"p_{m}")
    return f"{v:+.2f} [{lo:+.1f}, {hi:+.1f}], p={p:.3f}{mark}"


def _uncertainty_md(u: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    head = [
        "Method",
        "Dataset",
        "n",
        "SubEM [95% CI]",
        "EM [95% CI]",
        "F1 [95% CI]",
        "ΔSubEM vs full [95% CI], p",
        "ΔF1 vs full [95% CI], p",
    ]
    rows = [
        [
            r.variant,
            label(r.dataset),
            fmt(r.n, "{:.0f}"),
            _ci(r, "subem"),
            _ci(r, "em"),
            _ci(r, "f1"),
            _delta(r, "subem"),
            _delta(r, "f1"),
        ]
        for r in u.itertuples()
    ]
    return head, rows


def _shared_md(
    shared: pd.DataFrame, short: pd.DataFrame, profile: str, gen: str, min_n: int, csv: Path, written: list[Path]
) -> tuple[str, pd.DataFrame | None]:
    """Table 2 re-scored on the questions the rows of each dataset share (``leaderboard.matched``): its
    Markdown section and the table for the HTML page."""
    pick = lambda df: df[(df.profile == profile) & (df.generator == gen)]  # noqa: E731
    s, left = pick(shared), pick(short)
    if s.empty:
        return "", None
    t = tables.table2(s, profile, gen)
    tables.table2_csv(t).to_csv(csv, index=False)
    written.append(csv)
    head, rows = tables.table2_rows(t, metrics=tables.HEADLINE_METRICS)
    ns = ", ".join(f"{label(d)} {int(s[s.dataset == d].n.iloc[0])}" for d in tables.datasets(s))
    out = (
        f"### Table 2 on shared questions ({ns})\n\nEvery row re-scored on the questions that all rows of its "
        f"dataset with at least {min_n} records share (runs take the first n questions of a split, so rows of "
        "different n above differ by their questions too). Marks as above, the paired tests redone on these "
        "questions.\n\n" + tables.markdown(head, rows) + "\n"
    )
    if not left.empty:
        names = ", ".join(f"{r.variant} ({label(r.dataset)}, n={int(r.n)})" for r in left.itertuples())
        out += f"\nLeft out (fewer than {min_n} records): {names}.\n"
    return out, pd.DataFrame(rows, columns=head)


def _empty_md(
    df: pd.DataFrame, profile: str, gen: str, csv: Path, written: list[Path], sections: list[tuple[str, str]]
) -> str:
    """The "Empty contexts" section of one (profile, generator): its Markdown, its CSV and its HTML table."""
    t = tables.empty_contexts(df, profile, gen)
    flat = t.copy()
    flat.columns = [f"{d}_{m}" for d, m in flat.columns]
    flat.rename_axis("variant").reset_index().to_csv(csv, index=False)
    written.append(csv)
    head, rows = tables.empty_contexts_rows(t)
    sections.append((f"Empty contexts — {profile} / {gen}", _table(head, rows)))
    return (
        "### Empty contexts\n\nTwo CRs. Table 2's CR is over all questions: an empty context counts its original "
        "tokens against none, so a method that empties many contexts shows a large CR without compressing "
        "anything the generator reads (those questions are answered closed-book). Here, per dataset: the share "
        "of questions whose context came back empty, and the CR over the questions whose context is non-empty "
        "(`-`: no record, or every context empty).\n\n" + tables.markdown(head, rows) + "\n"
    )


def _why_no_throughput(timed_at: object) -> str:
    if not isinstance(timed_at, str):
        return "unknown"
    return "mixed" if any(len(part.split()) > 1 for part in timed_at.split(" / ")) else "unknown"


def _latency_md(lat: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    head = [
        "Method",
        "Dataset",
        "batch-1 sample (n, threads)",
        "compression s",
        "online s",
        "total s",
        "generation saved s",
        "break-even",
        "pays off",
        "total vs full s",
        "batched s (batch)",
        "accuracy pass timed at",
        "cpu",
    ]
    rows = [
        [
            r.variant,
            label(r.dataset),
            f"{fmt(r.latency_n, '{:.0f}')}, t{r.latency_threads}" if r.protocol == "batch1" else "none",
            fmt(r.compress_s, "{:.4f}"),
            fmt(r.online_s, "{:.3f}"),
            fmt(r.total_s, "{:.3f}"),
            fmt(r.generation_saved_s, "{:+.3f}"),
            fmt(r.break_even, "{:.3f}"),
            "-" if r.pays_off is None or pd.isna(r.pays_off) else ("yes" if r.pays_off else "no"),
            fmt(r.total_vs_full_s, "{:+.3f}"),
            (
                f"{fmt(r.batched_s, '{:.3f}')} ({r.batched_at})"
                if pd.notna(r.batched_s)
                else _why_no_throughput(r.timed_at)
            ),
            r.timed_at if isinstance(r.timed_at, str) else "-",
            r.cpu if isinstance(r.cpu, str) else "?",
        ]
        for r in lat.itertuples()
    ]
    return head, rows


def _table(head: list[str], rows: list[list[str]], table_id: str = "", groups: dict[int, str] | None = None) -> str:
    """A table whose headers "<dataset> <metric>" print as two rows: each dataset over its metrics."""
    cols = [("", head[0])] + [tuple(h.split(" ", 1)) if " " in h else ("", h) for h in head[1:]]
    return html.frame_html(pd.DataFrame(rows, columns=pd.MultiIndex.from_tuples(cols)), table_id, groups)


def _others(t2: tables.Table2) -> dict[int, str]:
    """Where Table 2's rows after the paper's own (``methods.yaml``) begin: a line above the first of them."""
    paper = reference.table2_variants()
    at = next((i for i, v in enumerate(t2.values.index) if v not in paper), None)
    if not at:
        return {}
    return {at: "Other variants: ablations, sentence-level selections, other rerankers and our additions"}


def _n_note(g: pd.DataFrame) -> str:
    """Each row's n per dataset, rows with the same n named together (rows of a block may differ: Table 2's own
    rows on every test question, the other variants on a sample)."""
    ds = tables.datasets(g)
    n = g.pivot_table(index="variant", columns="dataset", values="n", aggfunc="max").reindex(columns=ds)
    groups: dict[str, list[str]] = {}
    for v in reference.variant_order(list(n.index)):
        key = " / ".join("-" if pd.isna(x) else str(int(x)) for x in n.loc[v])
        groups.setdefault(key, []).append(f"`{v}`")
    parts = "; ".join(f"{k}: {', '.join(vs)}" for k, vs in groups.items())
    return f"\nn per row ({' / '.join(map(tables.label, ds))}): {parts}.\n"


def _alias_note(g: pd.DataFrame) -> str:
    named = g.dropna(subset=["aliases"]).drop_duplicates("variant") if "aliases" in g else g.iloc[:0]
    if named.empty:
        return ""
    pairs = "; ".join(
        f"`{r.variant}` also stands for " + ", ".join(f"`{a}`" for a in r.aliases.split(", "))
        for r in named.itertuples()
    )
    return (
        f"\nShown once: {pairs} (the same prediction from the same context on every question both ran, on every "
        "dataset: the same pipeline on this profile).\n"
    )


def _elsewhere_note(t2: tables.Table2, gen: str) -> str:
    """The rows marked ‡: a trained part of the method learned from another generator than this block's (its
    figures measure a model fitted to that generator's replies, prompt included)."""
    if not t2.elsewhere:
        return ""
    named = "; ".join(f"`{v}` through {where}" for v, where in t2.elsewhere.items())
    return (
        f"\n{tables.ELSEWHERE} Trained through another generator than `{gen}`: {named} (the run's `method_info` "
        "names it, `trained_through`); retrained through this one, its figures may differ.\n"
    )


def _power_note(g: pd.DataFrame, baseline: str) -> str:
    """Per dataset and n, the smallest SubEM difference from ``baseline`` that the paired test detects with power
    0.8 (``harness.stats.detectable_difference``), at the median share of questions where a row and the baseline
    disagree."""
    if "disagree_subem" not in g:
        return ""
    rows = g[(g.variant != baseline) & g.disagree_subem.notna()]
    parts = []
    for ds in tables.datasets(g):
        d = rows[rows.dataset == ds]
        medians = d.groupby("n_paired").disagree_subem.median().sort_index(ascending=False)
        at_n = [
            f"{stats.detectable_difference(float(share), int(n)):.1f} points at n = {int(n)} "
            f"(median disagreement {100 * share:.0f}%)"
            for n, share in medians.items()
        ]
        if at_n:
            parts.append(f"{label(ds)} {', '.join(at_n)}")
    if not parts:
        return ""
    return (
        f"\nSmallest SubEM difference from `{baseline}` detected with power 0.8 (paired, two-sided, 95%), at the "
        f"median share of questions where a row and `{baseline}` disagree: {'; '.join(parts)}.\n"
    )


def _table2_block(page: Page, full: pd.DataFrame, profile: str, gen: str, baseline: str) -> None:
    """Table 2 at every row's own n (Markdown, HTML, CSV and LaTeX), its aliases named."""
    out, slug = page.out, block_slug(profile, gen)
    g = full[(full.profile == profile) & (full.generator == gen)]
    t2 = tables.table2(full, profile, gen)
    head, rows = tables.table2_rows(t2, metrics=tables.HEADLINE_METRICS)
    ns = sorted(set(g.n.dropna().astype(int)))
    samples = ", ".join(sorted(set(g["sample"].fillna("first")))) if "sample" in g else "first"
    title = f"Table 2 layout (n = {', '.join(map(str, ns))}: each row's n below the table; sample: {samples})"
    notes = _n_note(g) + _alias_note(g) + _elsewhere_note(t2, gen) + _power_note(g, baseline)
    more = ", ".join(tables.METRIC_LABELS.get(m, m) for m in tables.diagnostic_metrics())
    notes += f"\nPer dataset: SubEM and CR; {more}: the Table 2 diagnostics, under Diagnostics.\n"
    page.md.append(
        f"{page.h(2, f'Profile `{profile}`, generator `{gen}`')}\n\n{page.h(3, title)}\n\n"
        f"{tables.markdown(head, rows)}\n{notes}"
    )
    if page.archive:  # the headline's section heading names its block
        page.html(f"Profile {profile}, generator {gen}", "", level=2)
    key = (
        f"SubEM (%) and CR per dataset. Bold: the best of its column, oracle rows (they read the gold answers) "
        f"left out. {tables.DAGGER}: not significantly different from {baseline} (paired bootstrap over the same "
        f"questions, 95%). {tables.EMPTY}: the row kept nothing on more than half the questions; its CR counts "
        f"those as compressed to nothing and is never bold. {tables.ELSEWHERE}: trained through another generator."
    )
    table = _table(head, rows, "table2" if not page.archive else "", _others(t2))
    side = html.note(key) + "".join(html.note(line) for line in notes.split("\n") if line.strip())
    page.html(title, html.beside(table, side))
    tables.table2_csv(t2).to_csv(out / f"table2_{slug}.csv", index=False)
    caption = (
        f"SubEM / F1 / CR, profile {profile}, generator {gen}; best in bold (oracles excluded); "
        f"† not significantly different from {baseline} (paired bootstrap, 95%)."
        + (
            f" ‡ trained through another generator: {'; '.join(f'{v} through {w}' for v, w in t2.elsewhere.items())}."
            if t2.elsewhere
            else ""
        )
    )
    (out / f"table2_{slug}.tex").write_text(tables.latex(t2, caption), encoding="utf-8")
    page.written += [out / f"table2_{slug}.csv", out / f"table2_{slug}.tex"]


def _table2_diagnostics_block(page: Page, full: pd.DataFrame, profile: str, gen: str) -> None:
    """Table 2's other columns (``tables.diagnostic_metrics``: echo, SubEM from echo, F1, ...), rows as Table 2's."""
    metrics = tables.diagnostic_metrics()
    if not metrics:
        return
    t2 = tables.table2(full, profile, gen)
    head, rows = tables.table2_rows(t2, metrics=metrics, aliases=False)
    named = ", ".join(tables.METRIC_LABELS.get(m, m) for m in metrics)
    text = (
        f"Per row and dataset, beside Table 2's SubEM and CR: {named}; marks as in Table 2. Echo %: answers that "
        "repeat the prompt instead of answering (`harness.metrics.echo`); SubEM from echo: the SubEM points those "
        "echoes earned; F1: token F1."
    )
    page.md.append(f"{page.h(3, 'Table 2 diagnostics')}\n\n{text}\n\n{tables.markdown(head, rows)}\n")
    page.html("Table 2 diagnostics", html.note(text) + _table(head, rows, groups=_others(t2)))


def _shared_block(page: Page, full, shared, short, profile: str, gen: str, min_n: int) -> None:
    """Table 2 on the questions its rows share, then the empty contexts."""
    slug = block_slug(profile, gen)
    text, frame = _shared_md(shared, short, profile, gen, min_n, page.out / f"table2_shared_{slug}.csv", page.written)
    page.md.append(text.replace("### ", page.h(3, ""), 1))
    if frame is not None:
        page.html("Table 2 on shared questions", _table(list(frame.columns), frame.values.tolist()))
    sections: list[tuple[str, str]] = []
    text = _empty_md(full, profile, gen, page.out / f"empty_contexts_{slug}.csv", page.written, sections)
    page.md.append(text.replace("### ", page.h(3, ""), 1))
    for heading, body in sections:
        page.html(heading, body)


def _diagnostics_block(page: Page, g: pd.DataFrame) -> None:
    """The 95% intervals and paired tests, and the methods' own diagnostics."""
    uh, ur = _uncertainty_md(tables.uncertainty(g))
    page.md.append(f"{page.h(3, 'Uncertainty')}\n\n{tables.markdown(uh, ur)}\n")
    diag = tables.diagnostics(g)
    if diag:
        page.md.append(
            f"{page.h(3, 'Method diagnostics')}\n\nWhat a method reports per example, averaged over the examples "
            "that report it (CompSelect: the cascading errors of its Table 6 on the examples whose passages hold "
            "a gold answer; EDC2: LLM calls and fallbacks per question).\n\n"
            + "\n\n".join(tables.markdown(h, r) for h, r in diag)  # a blank line ends a Markdown table
            + "\n"
        )
        for h, r in diag:
            page.html("Method diagnostics", html.frame_html(pd.DataFrame(r, columns=h)))


def _choose_block(page: Page, g: pd.DataFrame, profile: str, gen: str, baseline: str) -> None:
    """SubEM beside "SubEM (answers that choose)" (``tables.answers_that_choose``), its paired test against
    ``baseline``, the hedge and echo shares, and the rows whose verdict against ``baseline`` changes."""
    frame = tables.answers_that_choose(g, profile, gen, baseline)
    if frame.empty:
        return
    csv = page.out / f"answers_that_choose_{block_slug(profile, gen)}.csv"
    frame.to_csv(csv, index=False)
    page.written.append(csv)
    verdicts = frame.columns[5]
    changed = frame[frame[verdicts].str.contains("→")]
    moves = "; ".join(f"`{r.Method}` {r.Dataset}: {r[verdicts]}" for _, r in changed.iterrows()) or "none"
    text = (
        "SubEM credits a prediction that contains a gold answer, so one that names both options of a comparison "
        "question ('A or B', 'A is a band, while B is a band') scores whichever is gold. A hedge names more than "
        "one of the options a question offers ('A or B', 'A, B or C', yes/no) without picking the gold one "
        "('A is older than B' and 'A, not B' pick A; `harness.metrics.hedge`). SubEM (answers that choose) scores "
        f"hedged and echoed predictions 0; Δ is its paired difference from `{baseline}` ({tables.DAGGER} not "
        f"significant, 95%). The headline metric stays SubEM. Verdicts against `{baseline}` that change under "
        f"the strict column: {moves}.\n"
    )
    head = page.h(3, "Answers that choose")
    page.md.append(f"{head}\n\n{text}\n{tables.markdown(list(frame.columns), frame.values.tolist())}\n")
    page.html("Answers that choose", html.note(text) + html.frame_html(frame))


def _pass_rows(rows: pd.DataFrame, apart: bool) -> tuple[list[str], list[list[str]]]:
    """A latency table (``leaderboard.passes``): the side-by-side rows (each naming its pass, with the ``full``
    seconds of that pass beside its own), or the rows shown apart."""
    head = ["Method", "Dataset", "n × repeats", "compression s", "online s", "total s (spread)"]
    head += (
        ["pass", "cpu", "threads", "total vs full of its own pass"]
        if apart
        else [
            "online_vs_full_ratio",
            "total_vs_full_ratio",
            "break-even",
            "pays off",
            "cpu",
            "threads",
            "LM dtypes",
            "pass (date)",
            "full total s of its pass",
        ]
    )
    out = []
    for r in rows.itertuples():
        cells = [
            r.variant,
            label(r.dataset),
            f"{fmt(r.n, '{:.0f}')} × {fmt(r.repeats, '{:.0f}')}",
            fmt(r.compress_s, "{:.4f}"),
            fmt(r.online_s, "{:.3f}"),
            f"{fmt(r.total_s, '{:.3f}')} (±{fmt(r.total_s_spread, '{:.3f}')})",
        ]
        if apart:
            cells += [r.pass_id, r.cpu, fmt(r.threads, "{:.0f}"), fmt(r.total_vs_full_ratio, "{:.2f}×")]
        else:
            ratio = lambda v, sp: f"{fmt(v, '{:.2f}×')} (±{fmt(sp, '{:.2f}')})"  # noqa: E731
            cells += [
                ratio(r.online_vs_full_ratio, r.online_vs_full_ratio_spread),
                ratio(r.total_vs_full_ratio, r.total_vs_full_ratio_spread),
                fmt(r.break_even, "{:.3f}"),
                "-" if r.pays_off is None or pd.isna(r.pays_off) else ("yes" if r.pays_off else "no"),
                r.cpu,
                fmt(r.threads, "{:.0f}"),
                passes.dtypes(r.lms),
                f"{r.pass_id} ({str(r.finished_at)[:10]})",
                fmt(getattr(r, "full_total_s", None), "{:.3f}"),
            ]
        out.append(cells)
    return head, out


def _passes_named(head: pd.DataFrame) -> str:
    """Per dataset, each pass its side-by-side rows come from: id, date, CPU, threads, questions x repeats."""
    runs = head.groupby(["dataset", "pass_id"], sort=False).agg(
        finished_at=("finished_at", "max"),
        cpu=("cpu", "first"),
        threads=("threads", "first"),
        n=("n", "max"),
        repeats=("repeats", "first"),
        rows=("variant", "size"),
    )
    per: dict[str, list[str]] = {}
    for (ds, pid), r in runs.iterrows():
        per.setdefault(ds, []).append(
            f"pass `{pid}` ({r.finished_at}) on {r.cpu}, {r.threads} threads, {int(r.n)} questions x "
            f"{int(r.repeats)} repeats" + ("" if len(per.get(ds, [])) == 0 else f", {r.rows} row(s)")
        )
    return "; ".join(f"{label(ds)}: {', then '.join(p)}" for ds, p in per.items())


def _pass_compact(head: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The headline pass at a glance: per variant and dataset, total time against ``full``'s and the break-even."""
    ds = list(dict.fromkeys(head.dataset))
    cols = ["Method"] + [f"{label(d)} {m}" for d in ds for m in ("total vs full", "break-even")]
    rows = []
    for v, g in head.groupby("variant", sort=False):
        by = g.set_index("dataset")
        cells = [v]
        for d in ds:
            r = by.loc[d] if d in by.index else None
            cells += ["-", "-"] if r is None else [fmt(r.total_vs_full_ratio, "{:.2f}×"), fmt(r.break_even, "{:.2f}")]
        rows.append(cells)
    return cols, rows


def _pass_block(page: Page, all_passes: pd.DataFrame, profile: str, gen: str, baseline: str) -> None:
    """Latency side by side, merged over passes: per dataset and variant, its newest latency pass (every row
    against the ``full`` of its own pass, on its CPU; the dataset's headline pass first), then any row timed again
    later or without a ``full`` in its pass, apart."""
    head, apart = passes.block_passes(all_passes, profile, gen, baseline)
    if head.empty and apart.empty:
        return
    title = f"Latency side by side (ratios to `{baseline}` within each pass)"
    text = page.h(3, title) + "\n\n"
    if not head.empty:
        r0 = head.iloc[0]
        h, rows = _pass_rows(head, apart=False)
        text += (
            f"`python -m tools.latency_pass`, per dataset the newest pass that timed each variant "
            f"({_passes_named(head)}): every variant on the same questions ({r0.get('sample', '?')}), one at a "
            "time after warm-up, each as if unseen, the variants of a pass interleaved question by question, "
            f"`{baseline}` in every pass. Seconds are means over the repeats (± spread: max - min); the ratios to "
            f"`{baseline}` and the break-even (compression s / generation s saved against `{baseline}`) are computed "
            f"within each repeat against the `{baseline}` of the row's own pass (*pass*), then averaged. Rows of "
            "different passes compare by their ratios only: seconds are comparable within one pass, and each row "
            f"shows the `{baseline}` seconds of its own pass beside its own.\n\n"
            f"{tables.markdown(h, rows)}\n"
        )
        ch, cr_ = _pass_compact(head)
        every = html.folded(f"Every row's seconds, CPU and threads ({len(rows)} rows)", pd.DataFrame(rows, columns=h))
        key = html.note(
            f"Per dataset: total seconds (compression + generation) as a multiple of {baseline}'s in the same pass, "
            f"and the break-even (compression s / generation s saved against {baseline}; below 1 it pays for "
            f"itself). {_passes_named(head)}."
        )
        page.html("Latency side by side (one pass, one machine)", html.beside(_table(ch, cr_), key) + every)
    if not apart.empty:
        h, rows = _pass_rows(apart, apart=True)
        text += (
            "\nTimed again in a newer pass, or in a pass without a `full` on their CPU: shown apart, never compared "
            "with the rows above (the last column compares a row only with the `full` of its own pass and CPU).\n\n"
            f"{tables.markdown(h, rows)}\n"
        )
        frame = pd.DataFrame(rows, columns=h)
        page.html("Latency timed elsewhere (not compared)", html.folded(f"{len(rows)} rows", frame))
    page.md.append(text)


def _machines_note(block: pd.DataFrame) -> str:
    """Where a block's rows were timed on more than one CPU: which, since its seconds then mix machines."""
    cpus = sorted({c if isinstance(c, str) else "?" for c in block.cpu})
    if len(cpus) < 2:
        return ""
    return f" (its rows were timed on {len(cpus)} CPUs, {'; '.join(cpus)}: a sum over machines, not one machine's cost)"


def _latency_block(page: Page, lat: pd.DataFrame, profile: str, gen: str, baseline: str) -> None:
    """Latency and break-even (batch-1), throughput (batched), and the block's cost."""
    block = lat[(lat.profile == profile) & (lat.generator == gen)]
    lh, lr = _latency_md(block)
    cost, summed, missing = tables.throughput_sum(block)
    page.md.append(
        f"{page.h(3, 'Latency and break-even')}\n\nPer run: each row timed by its own run, on the machine "
        "that made it (a latency pass above, where there is one, times them side by side). Two protocols, never "
        "mixed. Latency (compression, online = generation, total) as the papers time it: seconds per example, "
        "one example at a time after warm-up, on the first n questions of the dataset, each as if unseen (call "
        "cache bypassed, prefix caches emptied); `none` where the run has no such sample. Break-even = "
        f"compression time / generation time saved against `{baseline}` timed the same way on the same CPU "
        "(model and bf16 kind) at the same thread count (below 1 the compression pays for itself; `-` without "
        "such a run). "
        "*Batched s*: compression + generation seconds per example in the accuracy pass at the batch size shown "
        "(throughput), `mixed` where its records were timed at more than one batch size or thread count (*timed "
        "at*: records per batch size b and thread count t; `?` = made before these were kept). *cpu*: the machine "
        "that made the run (what it runs natively, where the run recorded it); seconds of rows on different "
        "CPUs are not compared.\n\n"
        f"{tables.markdown(lh, lr)}\n\n"
        f"Cost of the block: the sum over its {summed} variants with a batched figure of their batched s per "
        f"question (mean over datasets) is **{cost:.2f} s**"
        + (f"; without one: {', '.join(f'`{v}`' for v in missing)}" if missing else "")
        + _machines_note(block)
        + ".\n"
    )
    frame = pd.DataFrame(lr, columns=lh)
    page.html("Latency and break-even", html.folded(f"Every run's own timing ({len(lr)} rows)", frame))


def _comparison_block(page: Page, full, ref, g: pd.DataFrame, profile: str, gen: str) -> None:
    """Our rows beside the paper's in its setting (when the paper has that setting)."""
    cmp = reference.comparison(full, ref, profile, gen)
    if cmp.empty:
        return
    paper_gen, same = reference.paper_generator(gen)
    tag = (
        "same generator"
        if same
        else f"DIFFERENT generator ({gen} vs {paper_gen}): the difference "
        "measures the generator and data, not a reproduction gap"
    )
    ch, cr_ = _comparison_md(cmp, tables.datasets(g))
    src = cmp.source.iloc[0]
    title = f"Beside the paper: {src}, {paper_gen} (setting `compselect`; {tag})"
    page.md.append(f"{page.h(3, title)}\n\n{tables.markdown(ch, cr_)}\n")
    path = page.out / f"comparison_{block_slug(profile, gen)}.csv"
    cmp.to_csv(path, index=False)
    page.written.append(path)
    page.html(title.replace("`", ""), _table(ch, cr_))


def _plot(page: Page, kind: str, frame: pd.DataFrame, profile: str, gen: str) -> None:
    """One plot (``subem_vs_cr`` or ``latency``) as a PNG, linked from the Markdown and embedded in the page."""
    fn = plots.subem_vs_cr if kind == "subem_vs_cr" else plots.latency_bars
    path = page.out / f"{kind}_{block_slug(profile, gen)}.png"
    if fn(frame, profile, gen, path) is None:
        path.unlink(missing_ok=True)  # a stale plot from an earlier publish
        return
    page.md.append(f"![{kind} {profile} {gen}]({path.name})\n")
    svg = path.with_suffix(".svg")  # the SubEM-CR plot's points name themselves on hover there
    caption = "labelled: the paper's Table 2 rows and the Pareto front; hover any point for its name and figures"
    caption = caption if svg.is_file() else ""
    page.add(html.figure(profile, gen, svg if svg.is_file() else path, caption))
    page.written += [path, svg] if svg.is_file() else [path]


def _reference_block(page: Page, ref: pd.DataFrame) -> None:
    """The papers' numbers, one table per setting."""
    text = (
        "Each table keeps one paper's setting (papers.md section 0); none shares a column with our numbers or "
        "another setting's. Source: `leaderboard/data/reference.csv`."
    )
    page.md.append(f"### The papers' numbers in their own settings\n\n{text}\n")
    page.html("The papers' numbers in their own settings", html.note(text))
    for title, wide in reference.setting_tables(ref):
        page.md.append(f"#### {title}\n\n{tables.markdown(list(wide.columns), wide.values.tolist())}\n")
        page.html(title, html.frame_html(wide), level=4)


# The headline block's own tables, as views (``leaderboard.page.View``); every other view is a module of
# ``leaderboard.views``. ``_block`` runs each section's views in this order; a section that no view fills shows its
# honest "empty" line. An archived block runs every view in this order, all under "Archive".
OWN: list[View] = [
    View("table2", "headline", lambda p, d, b: _table2_block(p, d.full, b.profile, b.gen, b.baseline)),
    View("subem_vs_cr", "headline", lambda p, d, b: _plot(p, "subem_vs_cr", d.full, b.profile, b.gen)),
    View("passes", "headline", lambda p, d, b: _pass_block(p, d.passes, b.profile, b.gen, b.baseline)),
    View("latency", "headline", lambda p, d, b: _latency_block(p, d.lat, b.profile, b.gen, b.baseline)),
    View("latency_plot", "headline", lambda p, d, b: _plot(p, "latency", d.lat, b.profile, b.gen)),
    View("table2_diagnostics", "diagnostics", lambda p, d, b: _table2_diagnostics_block(p, d.full, b.profile, b.gen)),
    View(
        "shared",
        "diagnostics",
        lambda p, d, b: _shared_block(p, d.full, d.shared, d.short, b.profile, b.gen, b.min_n),
    ),
    View("method_diagnostics", "diagnostics", lambda p, d, b: _diagnostics_block(p, b.rows(d.full))),
    View("choose", "diagnostics", lambda p, d, b: _choose_block(p, b.rows(d.full), b.profile, b.gen, b.baseline)),
    View(
        "papers",
        "papers",
        lambda p, d, b: _comparison_block(p, d.full, d.ref, b.rows(d.full), b.profile, b.gen),
    ),
]
ALL: list[View] = [*OWN, *views.VIEWS]


def _owned(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """(the rows every table reads, per view the rows only it reads: ``View.owns``)."""
    owned = {}
    for v in ALL:
        if v.owns is not None and not runs.empty:
            mask = v.owns(runs)
            owned[v.name], runs = runs[mask].reset_index(drop=True), runs[~mask].reset_index(drop=True)
    return runs, owned


def _block(page: Page, d: Data, profile: str, gen: str, baseline: str, min_n: int) -> None:
    """One (profile, generator) block: each section's views in order. The headline block's sections get their
    heading and question in ``leaderboard.md`` (and, when no view wrote to one, its empty line)."""
    b = Block(profile, gen, baseline, min_n)
    for s in SECTIONS:
        page.section = s.id
        md_at, html_at = len(page.md), len(page.head)
        for view in (v for v in ALL if v.section == s.id):
            view.render(page, d, b)
        if page.archive or s.id == "headline" or not any(v.section == s.id for v in ALL):
            continue
        wrote = len(page.head) > html_at
        empty = "" if wrote else "\n" + s.empty.format(generator=gen, profile=profile) + "\n"
        page.md.insert(md_at, f"## {s.title}\n\n*{s.question}*\n{empty}")


def _intro(results, out: Path, n_runs: int, when: str, headline: tuple[str, str], resamples: int, baseline: str):
    notes = Path(results) / NOTES
    link = (
        f" How the runs were made: [{NOTES}]({Path(os.path.relpath(notes, out)).as_posix()})."
        if notes.is_file()
        else ""
    )
    return (
        f"# Leaderboard\n\nGenerated {when} by `python -m leaderboard publish {results} {out}` from "
        f"{n_runs} runs (newest run of each method, dataset, generator and profile). It opens on the headline "
        f"block, profile `{headline[0]}`, generator `{headline[1]}` (the block of the newest run that made its own "
        "contexts unless `--headline` names one); every other block is under *Archive* below it. SubEM, EM and F1 "
        "in %, CR = original / compressed context tokens (ratio of sums, the generator's tokenizer). Best "
        f"of each column in bold (oracle rows excluded; CR never for a row that kept nothing on more than half the "
        f"questions, marked {tables.EMPTY}); {tables.DAGGER} = not significantly different from "
        f"`{baseline}` (paired bootstrap over the same examples, {resamples} resamples, 95%). A variant that "
        "repeats another row for row is shown once, its alias named. "
        f"See `index.html` for the sortable page and every row's provenance.{link}\n"
    )


def _portable(frame: pd.DataFrame, out: Path) -> pd.DataFrame:
    """``frame`` with each run's ``folder`` relative to the published folder ``out``, so that the published files
    name no machine's paths and do not change when another checkout publishes the same runs."""
    rel = [Path(os.path.relpath(f, out)).as_posix() for f in frame["folder"]]
    return frame.assign(folder=rel)


def publish(
    results: str | Path,
    out: str | Path,
    resamples: int = stats.RESAMPLES,
    seed: int = stats.SEED,
    baseline: str = "full",
    min_n: int = MIN_N,
    headline: str | None = None,
) -> list[Path]:
    """Write every output of the runs under ``results`` into ``out`` (see the module docstring); ``headline``
    names the block to open on (``generator`` or ``profile/generator``; default: the block of the newest run
    among those that made their own contexts, ``leaderboard.headline``)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs = collect(results)
    if runs.empty:
        raise SystemExit(f"no run folders (summary.json) under {results}")
    runs, owned = _owned(runs)  # e.g. dataset.top_k runs (only "More passages" reads them), budget variants
    runs = mark_aliases(runs, aliases(runs))
    runs = tables.ordered(stats.add_uncertainty(runs, baseline, resamples, seed))
    shown = runs[runs.alias_of.isna()].reset_index(drop=True)
    shared, short = matched(shown, min_n)
    shared = stats.add_uncertainty(shared, baseline, resamples, seed) if not shared.empty else shared
    lat = tables.latency(shown, baseline)
    drop = ["protocol", "latency_n", "latency_threads", "timed_at", "compress_s", "batched_at"]
    full = shown.merge(lat.drop(columns=drop), on=["profile", "generator", "dataset", "variant"])
    d = Data(
        full,
        shared,
        short,
        lat,
        reference.load_reference(),
        passes.compare(passes.read_passes(results)),
        owned,
        Path(results),
        resamples,
        seed,
    )
    page = Page(out, written=[out / "runs.csv", out / "latency.csv", out / "reference.csv"])
    if not d.passes.empty:
        d.passes.to_csv(out / "latency_pass.csv", index=False)
        page.written.append(out / "latency_pass.csv")
    aside = [x for x in owned.values() if len(x)]
    runs_out = pd.concat([runs, *aside], ignore_index=True) if aside else runs
    runs_out = runs_out.merge(lat.drop(columns=drop), how="left", on=["profile", "generator", "dataset", "variant"])
    _portable(runs_out, out).to_csv(page.written[0], index=False)
    lat.to_csv(page.written[1], index=False)
    d.ref.drop(columns=["value_text"]).to_csv(page.written[2], index=False)

    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    top = pick_headline(shown, headline)
    page.md.append(_intro(results, out, len(runs), when, top, resamples, baseline))
    _block(page, d, *top, baseline, min_n)
    page.section = "papers"
    _reference_block(page, d.ref)
    page.md.append(
        f"## All runs\n\n*{by_id('grid').question}*\n\nEvery run's columns: `runs.csv`; with each run's "
        "provenance: `index.html`.\n"
    )
    page.parts["grid"] = [html.runs_html(_portable(full, out))]
    rest = [b for b in tables.groups(shown) if b != top]
    page.md.append(f"## Archive\n\n*{by_id('archive').question}*\n" + ("" if rest else f"\n{by_id('archive').empty}\n"))
    page.archive, page.depth = True, 1
    for profile, gen in rest:
        _block(page, d, profile, gen, baseline, min_n)
    page.archive, page.depth = False, 0
    (out / "leaderboard.md").write_text("\n".join(page.md), encoding="utf-8")
    note = (
        f"Generated {when} from {len(runs)} runs under {results}; headline: {top[0]} / {top[1]}. SubEM/EM/F1 in "
        "%; CR = original / compressed context tokens; latency in seconds per example."
    )
    (out / "index.html").write_text(
        html.page(_sections_html(page, top), "RAG context compression — leaderboard", note), encoding="utf-8"
    )
    return [out / "leaderboard.md", out / "index.html", *page.written]


def _sections_html(page: Page, top: tuple[str, str]) -> list[tuple[str, str, bool, str]]:
    """Every section of the page in order: (id, contents-bar label, whether it is empty, its HTML); the headline's
    heading names its block, an empty section says so in one line."""
    out = []
    for s in SECTIONS:
        parts = page.parts.get(s.id, [])
        title = f"Profile {top[0]}, generator {top[1]}" if s.id == "headline" else s.title
        body = "".join(parts) or html.empty(s.empty.format(profile=top[0], generator=top[1]))
        out.append((s.id, s.title, not parts, html.page_section(s.id, title, s.question, body)))
    return out
