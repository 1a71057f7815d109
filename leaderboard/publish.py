"""``publish(results, out)``: collect runs, add uncertainty, write Markdown, CSV, LaTeX, plots, an HTML page.

Files written under ``out``:
- ``leaderboard.md``: per (profile, generator): CompSelect's Table 2 layout, the 95% intervals and paired
  tests against ``full``, latency and break-even, our rows beside the paper's (difference, setting-tagged);
  then the papers' numbers of every other setting, each in its own table.
  Table 2 appears twice: with every row at its own n, and re-scored on the questions its rows share
  (``leaderboard.matched``; rows under ``min_n`` records are left out and named).
  Then the empty contexts: per row and dataset, the share of questions whose context came back empty and the
  CR over the non-empty ones.
- ``runs.csv`` (every collected column), ``table2_<profile>_<generator>.csv`` / ``.tex``,
  ``table2_shared_<profile>_<generator>.csv``, ``empty_contexts_<profile>_<generator>.csv``, ``latency.csv``,
  ``comparison_<profile>_<generator>.csv``, ``reference.csv`` (a copy of the papers' numbers).
- ``subem_vs_cr_<profile>_<generator>.png``, ``latency_<profile>_<generator>.png``.
- ``index.html``: one self-contained page.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from leaderboard import html, plots, reference, stats, tables
from leaderboard.collect import collect
from leaderboard.matched import MIN_N, matched
from leaderboard.tables import fmt, label

NOTES = "NOTES.md"  # beside the runs (leaderboard/runs/NOTES.md): appended to leaderboard.md


def _slug(*parts: str) -> str:
    return "_".join(re.sub(r"[^A-Za-z0-9.-]+", "-", p) for p in parts)


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
    head, rows = tables.table2_rows(t)
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
    sections.append((f"Empty contexts — {profile} / {gen}", html.frame_html(pd.DataFrame(rows, columns=head))))
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
        ]
        for r in lat.itertuples()
    ]
    return head, rows


@dataclass
class _Page:
    """What ``publish`` writes, gathered block by block: Markdown parts, HTML sections, plots, files written."""

    out: Path
    md: list[str] = field(default_factory=list)
    sections: list[tuple[str, str]] = field(default_factory=list)
    plot_files: list[tuple[str, str, Path]] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)


def _table2_block(page: _Page, full, shared, short, profile: str, gen: str, min_n: int, baseline: str) -> None:
    """Table 2 (every row at its own n, then on shared questions), the empty contexts, its CSV and LaTeX."""
    out, slug = page.out, _slug(profile, gen)
    g = full[(full.profile == profile) & (full.generator == gen)]
    t2 = tables.table2(full, profile, gen)
    head, rows = tables.table2_rows(t2)
    ns = sorted(set(g.n.dropna().astype(int)))
    samples = ", ".join(sorted(set(g["sample"].fillna("first")))) if "sample" in g else "first"
    page.md.append(
        f"## Profile `{profile}`, generator `{gen}`\n\n### Table 2 layout (n = {', '.join(map(str, ns))}"
        f" per dataset; sample: {samples})\n\n{tables.markdown(head, rows)}\n"
    )
    tables.table2_csv(t2).to_csv(out / f"table2_{slug}.csv", index=False)
    text, frame = _shared_md(shared, short, profile, gen, min_n, out / f"table2_shared_{slug}.csv", page.written)
    page.md.append(text)
    if frame is not None:
        page.sections.append((f"Table 2 on shared questions — {profile} / {gen}", html.frame_html(frame)))
    page.md.append(_empty_md(full, profile, gen, out / f"empty_contexts_{slug}.csv", page.written, page.sections))
    caption = (
        f"SubEM / F1 / CR, profile {profile}, generator {gen}; best in bold (oracles excluded); "
        f"† not significantly different from {baseline} (paired bootstrap, 95%)."
    )
    (out / f"table2_{slug}.tex").write_text(tables.latex(t2, caption), encoding="utf-8")
    page.written += [out / f"table2_{slug}.csv", out / f"table2_{slug}.tex"]


def _diagnostics_block(page: _Page, g: pd.DataFrame, profile: str, gen: str) -> None:
    """The 95% intervals and paired tests, and the methods' own diagnostics."""
    uh, ur = _uncertainty_md(tables.uncertainty(g))
    page.md.append(f"### Uncertainty\n\n{tables.markdown(uh, ur)}\n")
    diag = tables.diagnostics(g)
    if diag:
        page.md.append(
            "### Method diagnostics\n\nWhat a method reports per example, averaged over the examples that "
            "report it (CompSelect: the cascading errors of its Table 6 on the examples whose passages hold "
            "a gold answer; EDC2: LLM calls and fallbacks per question).\n\n"
            + "\n".join(tables.markdown(h, r) for h, r in diag)
            + "\n"
        )
        for h, r in diag:
            frame = html.frame_html(pd.DataFrame(r, columns=h))
            page.sections.append((f"Method diagnostics — {profile} / {gen}", frame))


def _latency_block(page: _Page, lat: pd.DataFrame, profile: str, gen: str, baseline: str) -> None:
    """Latency and break-even (batch-1), throughput (batched), and the block's cost."""
    block = lat[(lat.profile == profile) & (lat.generator == gen)]
    lh, lr = _latency_md(block)
    cost, summed, missing = tables.throughput_sum(block)
    page.md.append(
        "### Latency and break-even\n\nTwo protocols, never mixed. Latency (compression, online = "
        "generation, total) as the papers time it: seconds per example, one example at a time after "
        "warm-up, on the first n questions of the dataset, each as if unseen (call cache bypassed, prefix "
        "caches emptied); `none` where the run has no such sample. Break-even = compression time / "
        f"generation time saved against `{baseline}` timed the same way (below 1 the compression pays for "
        "itself). *Batched s*: compression + generation seconds per example in the accuracy pass at the "
        "batch size shown (throughput), `mixed` where its records were timed at more than one batch size or "
        "thread count (*timed at*: records per batch size b and thread count t; `?` = made before these "
        "were kept).\n\n"
        f"{tables.markdown(lh, lr)}\n\n"
        f"Cost of the block: the sum over its {summed} variants with a batched figure of their batched s per "
        f"question (mean over datasets) is **{cost:.2f} s**"
        + (f"; without one: {', '.join(f'`{v}`' for v in missing)}" if missing else "")
        + ".\n"
    )


def _comparison_block(page: _Page, full, ref, g: pd.DataFrame, profile: str, gen: str) -> None:
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
    page.md.append(
        f"### Beside the paper: {src}, {paper_gen} (setting `compselect`; {tag})\n\n{tables.markdown(ch, cr_)}\n"
    )
    path = page.out / f"comparison_{_slug(profile, gen)}.csv"
    cmp.to_csv(path, index=False)
    page.written.append(path)
    page.sections.append(
        (
            f"Beside the paper — {profile} / {gen}: {src}, {paper_gen} ({tag})",
            html.frame_html(pd.DataFrame(cr_, columns=ch)),
        )
    )


def _plots_block(page: _Page, full, lat, profile: str, gen: str) -> None:
    """SubEM vs CR and the latency bars, as PNG files linked from the Markdown."""
    for kind, fn in (("subem_vs_cr", plots.subem_vs_cr), ("latency", plots.latency_bars)):
        path = page.out / f"{kind}_{_slug(profile, gen)}.png"
        if fn(full if kind == "subem_vs_cr" else lat, profile, gen, path) is None:
            path.unlink(missing_ok=True)  # a stale plot from an earlier publish
            continue
        page.plot_files.append((profile, gen, path))
        page.md.append(f"![{kind} {profile} {gen}]({path.name})\n")
        page.written.append(path)


def _reference_block(page: _Page, ref: pd.DataFrame) -> None:
    """The papers' numbers, one table per setting."""
    page.md.append(
        "## The papers' numbers in their own settings\n\nEach table keeps one paper's setting "
        "(papers.md section 0); none shares a column with our numbers or another setting's. "
        "Source: `leaderboard/data/reference.csv`.\n"
    )
    for title, wide in reference.setting_tables(ref):
        page.md.append(f"### {title}\n\n{tables.markdown(list(wide.columns), wide.values.tolist())}\n")
        page.sections.append((title, html.frame_html(wide)))


def publish(
    results: str | Path,
    out: str | Path,
    resamples: int = stats.RESAMPLES,
    seed: int = stats.SEED,
    baseline: str = "full",
    min_n: int = MIN_N,
) -> list[Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs = collect(results)
    if runs.empty:
        raise SystemExit(f"no run folders (summary.json) under {results}")
    runs = tables.ordered(stats.add_uncertainty(runs, baseline, resamples, seed))
    shared, short = matched(runs, min_n)
    shared = stats.add_uncertainty(shared, baseline, resamples, seed) if not shared.empty else shared
    lat = tables.latency(runs, baseline)
    full = runs.merge(
        lat.drop(columns=["protocol", "latency_n", "latency_threads", "timed_at", "compress_s", "batched_at"]),
        on=["profile", "generator", "dataset", "variant"],
    )
    ref = reference.load_reference()
    page = _Page(out, written=[out / "runs.csv", out / "latency.csv", out / "reference.csv"])
    full.to_csv(page.written[0], index=False)
    lat.to_csv(page.written[1], index=False)
    ref.drop(columns=["value_text"]).to_csv(page.written[2], index=False)

    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    page.md.append(
        f"# Leaderboard\n\nGenerated {when} by `python -m leaderboard publish {results} {out}` from "
        f"{len(runs)} runs (newest run of each method, dataset, generator and profile). SubEM, EM and F1 "
        "in %, CR = original / compressed context tokens (ratio of sums, the generator's tokenizer). Best "
        f"of each column in bold (oracle rows excluded; CR never for a row that kept nothing on more than half the "
        f"questions, marked {tables.EMPTY}); {tables.DAGGER} = not significantly different from "
        f"`{baseline}` (paired bootstrap over the same examples, {resamples} resamples, 95%). "
        "See `index.html` for the sortable page and every row's provenance.\n"
    )
    for profile, gen in tables.groups(runs):
        g = full[(full.profile == profile) & (full.generator == gen)]
        _table2_block(page, full, shared, short, profile, gen, min_n, baseline)
        _diagnostics_block(page, g, profile, gen)
        _latency_block(page, lat, profile, gen, baseline)
        _comparison_block(page, full, ref, g, profile, gen)
        _plots_block(page, full, lat, profile, gen)
    _reference_block(page, ref)
    notes = Path(results) / NOTES
    if notes.is_file():  # how the runs were made: the archive's own notes, kept with them
        page.md.append(notes.read_text(encoding="utf-8").strip() + "\n")
    (out / "leaderboard.md").write_text("\n".join(page.md), encoding="utf-8")
    note = (
        f"Generated {when} from {len(runs)} runs under {results}. SubEM/EM/F1 in %; CR = original / "
        "compressed context tokens; latency in seconds per example."
    )
    (out / "index.html").write_text(
        html.page(full, page.plot_files, page.sections, "RAG context compression — leaderboard", note),
        encoding="utf-8",
    )
    return [out / "leaderboard.md", out / "index.html", *page.written]
