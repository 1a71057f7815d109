"""Tables over the collected rows: CompSelect's Table 2 layout, uncertainty, latency and break-even; rendered
as Markdown, LaTeX and CSV.

Table 2 layout: methods by datasets, SubEM / Echo % / SubEM from echo / F1 / CR for each dataset (echo: the
generator repeated its prompt instead of answering, ``harness.metrics.echo``); the page and ``leaderboard.md`` show
``HEADLINE_METRICS`` (SubEM, CR) in Table 2 and the rest in a diagnostics table (``table2_rows(metrics=...)``). The
best value of each column is bold (oracle rows, which read the gold answers, are left out of "best"); a dagger marks
a SubEM or F1 that is not significantly different from ``full`` (paired bootstrap, 95%). A row that kept nothing
(empty context) on more than half of a dataset's questions is never bold for CR there and its CR carries ``∅``:
emptied contexts inflate a ratio of sums without compressing anything the generator reads.
The empty-contexts table puts beside each row the share of questions it emptied and its CR over the
non-empty contexts only (what the generator was given compressed).
Break-even: compression pays for itself when its time is below the generation time it saves against ``full``
(``break_even = compress_s / (generate_s(full) - generate_s)``; below 1 it pays off).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from leaderboard.reference import variant_order

LABELS = {"nq": "NQ", "triviaqa": "TQA", "hotpotqa": "HQA"}
T2_METRICS = ("subem", "echo", "subem_from_echo", "f1", "cr")
METRIC_LABELS = {
    "subem": "SubEM",
    "echo": "Echo %",
    "subem_from_echo": "SubEM from echo",
    "f1": "F1",
    "cr": "CR",
    "em": "EM",
}
# The headline Table 2 (``leaderboard.md`` and the page): SubEM and CR per dataset; every other metric of
# ``T2_METRICS`` goes to the Table 2 diagnostics table (``diagnostic_metrics``). The CSV and LaTeX keep them all.
HEADLINE_METRICS = ("subem", "cr")
# Shown beside SubEM, never bold: the share of answers that echo the prompt and the SubEM those echoes earned
# (harness.metrics.echo) say how far a row's SubEM is the generator answering.
UNRANKED = ("echo", "subem_from_echo")
DAGGER = "†"
ELSEWHERE = "‡"  # marks a variant with a part trained through another generator than its block's
EMPTY = "∅"  # marks a CR whose row kept nothing on more than half its questions
MOSTLY_EMPTY = 0.5


def datasets(df: pd.DataFrame) -> list[str]:
    known = [d for d in LABELS if d in set(df.dataset)]
    return known + sorted(set(df.dataset) - set(known))


def label(ds: str) -> str:
    return LABELS.get(ds, ds)


def groups(df: pd.DataFrame) -> list[tuple[str, str]]:
    """(profile, generator) pairs, embedded first."""
    pairs = df[["profile", "generator"]].drop_duplicates().itertuples(index=False, name=None)
    return sorted(pairs, key=lambda p: (p[0] != "embedded", p[0], p[1]))


def _num(x) -> float | None:
    if x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


@dataclass
class Table2:
    """Values, bold and dagger marks of one (profile, generator) block, indexed by variant."""

    values: pd.DataFrame  # columns: (dataset, metric)
    best: pd.DataFrame
    nonsig: pd.DataFrame
    oracle: pd.Series
    empty: pd.DataFrame  # per dataset: share of questions with an empty context
    aliases: dict[str, str] | None = None  # variant -> the variants it also stands for (identical rows)
    elsewhere: dict[str, str] | None = None  # variant -> the other generators a part of it was trained through


def table2(df: pd.DataFrame, profile: str, generator: str) -> Table2:
    g = df[(df.profile == profile) & (df.generator == generator)]
    variants = variant_order(list(g.variant.unique()))
    cols = pd.MultiIndex.from_product([datasets(g), T2_METRICS], names=["dataset", "metric"])
    values = pd.DataFrame(index=variants, columns=cols, dtype=float)
    nonsig = pd.DataFrame(False, index=variants, columns=cols)
    empty = pd.DataFrame(index=variants, columns=datasets(g), dtype=float)
    for r in g.itertuples():
        empty.loc[r.variant, r.dataset] = _num(getattr(r, "kept_nothing", None))
        for m in T2_METRICS:
            values.loc[r.variant, (r.dataset, m)] = _num(getattr(r, m))
            if m in ("subem", "f1") and getattr(r, f"sig_{m}", None) is False:
                nonsig.loc[r.variant, (r.dataset, m)] = True
    oracle = g.groupby("variant").oracle.any().reindex(variants).fillna(False).astype(bool)
    best = pd.DataFrame(False, index=variants, columns=cols)
    for c in cols:
        if c[1] in UNRANKED:
            continue
        eligible = ~oracle.values
        if c[1] == "cr":
            eligible &= ~(empty[c[0]] > MOSTLY_EMPTY).values
        col = values.loc[eligible, c].dropna()
        if len(col) > 1:
            best.loc[col.index[col == col.max()], c] = True
    named = g.dropna(subset=["aliases"]) if "aliases" in g else None
    aliases = {} if named is None else dict(zip(named.variant, named.aliases, strict=True))
    return Table2(values, best, nonsig, oracle, empty, aliases, elsewhere_of(g))


def elsewhere_of(g: pd.DataFrame) -> dict[str, str]:
    """Per variant with a part trained through another generator than its block's: those generators, each with the
    datasets whose rows say so (``gen-old (NQ, TQA)``)."""
    if "trained_elsewhere" not in g:
        return {}
    out = {}
    for variant, rows in g.dropna(subset=["trained_elsewhere"]).groupby("variant", sort=False):
        by_generator: dict[str, list[str]] = {}
        for r in rows.itertuples():
            for gen in r.trained_elsewhere.split(", "):
                by_generator.setdefault(gen, []).append(label(r.dataset))
        out[str(variant)] = "; ".join(f"{gen} ({', '.join(ds)})" for gen, ds in by_generator.items())
    return out


def _cell(
    v: float | None, metric: str, bold: bool, dagger: bool, latex: bool = False, mostly_empty: bool = False
) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    s = f"{v:.2f}" + (("$\\times$" if latex else "×") if metric == "cr" else "")
    if bold:
        s = f"\\textbf{{{s}}}" if latex else f"**{s}**"
    if dagger:
        s += "$^\\dagger$" if latex else DAGGER
    if mostly_empty:
        s += "$^\\emptyset$" if latex else EMPTY
    return s


def _name(variant: str, oracle: bool, alias: str | None = None, elsewhere: bool = False) -> str:
    name = variant + (ELSEWHERE if elsewhere else "")
    name = f"{name} (= {alias})" if alias else name
    return f"{name} (oracle)" if oracle else name


def diagnostic_metrics() -> tuple[str, ...]:
    """The metrics of ``T2_METRICS`` shown apart from the headline Table 2, in the diagnostics table."""
    return tuple(m for m in T2_METRICS if m not in HEADLINE_METRICS)


def table2_rows(
    t: Table2, latex: bool = False, metrics: Sequence[str] | None = None, aliases: bool = True
) -> tuple[list[str], list[list[str]]]:
    """Head and rows of Table 2: every metric, or only ``metrics`` (``HEADLINE_METRICS``, ``diagnostic_metrics()``);
    ``aliases``: name the variants each row also stands for (Table 2 does; the diagnostics table need not)."""
    columns = [c for c in t.values.columns if metrics is None or c[1] in metrics]
    head = ["Method"] + [f"{label(d)} {METRIC_LABELS[m]}" for d, m in columns]
    rows = []
    for v in t.values.index:
        cells = [
            _cell(
                t.values.loc[v, c],
                c[1],
                bool(t.best.loc[v, c]),
                bool(t.nonsig.loc[v, c]),
                latex,
                c[1] == "cr" and bool(t.empty.loc[v, c[0]] > MOSTLY_EMPTY),
            )
            for c in columns
        ]
        alias = (t.aliases or {}).get(v) if aliases else None
        rows.append([_name(v, bool(t.oracle[v]), alias, v in (t.elsewhere or {})), *cells])
    return head, rows


def table2_csv(t: Table2) -> pd.DataFrame:
    flat = t.values.copy()
    flat.columns = [f"{d}_{m}" for d, m in flat.columns]
    for d, m in t.nonsig.columns:
        if m in ("subem", "f1"):
            flat[f"{d}_{m}_not_significant_vs_full"] = t.nonsig[(d, m)].values
    for d in t.empty.columns:
        flat[f"{d}_kept_nothing"] = t.empty[d].values
    flat.insert(0, "oracle", t.oracle.values)
    flat.insert(1, "trained_through_other_generator", [(t.elsewhere or {}).get(v) for v in flat.index])
    return flat.rename_axis("variant").reset_index()


def empty_contexts(df: pd.DataFrame, profile: str, generator: str) -> pd.DataFrame:
    """Per variant (rows, the papers' order) and dataset: ``(dataset, "empty")``, the share of questions whose
    context came back empty, in %, and ``(dataset, "cr_nonempty")``, the CR (ratio of sums) over the others."""
    g = df[(df.profile == profile) & (df.generator == generator)]
    cols = pd.MultiIndex.from_product([datasets(g), ("empty", "cr_nonempty")], names=["dataset", "metric"])
    out = pd.DataFrame(index=variant_order(list(g.variant.unique())), columns=cols, dtype=float)
    for r in g.itertuples():
        k = _num(getattr(r, "kept_nothing", None))
        out.loc[r.variant, (r.dataset, "empty")] = None if k is None else 100 * k
        out.loc[r.variant, (r.dataset, "cr_nonempty")] = _num(getattr(r, "cr_nonempty", None))
    return out


def empty_contexts_rows(t: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Markdown head and rows of ``empty_contexts``: ``-`` where a run is missing or kept nothing at all."""
    head = ["Method"] + [f"{label(d)} {'empty %' if m == 'empty' else 'CR non-empty'}" for d, m in t.columns]
    rows = [[v] + [fmt(t.loc[v, c], "{:.1f}" if c[1] == "empty" else "{:.2f}×") for c in t.columns] for v in t.index]
    return head, rows


def markdown(head: Sequence[str], rows: Sequence[Sequence[str]], align_first_left: bool = True) -> str:
    def esc(s: str) -> str:
        return str(s).replace("|", "\\|").replace("\n", " ")

    sep = [":---" if (i == 0 and align_first_left) else "---:" for i in range(len(head))]
    lines = ["| " + " | ".join(esc(h) for h in head) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def latex_escape(s: str) -> str:
    s = s.replace("\\", "\\textbackslash{}")
    for a, b in (
        ("&", "\\&"),
        ("%", "\\%"),
        ("_", "\\_"),
        ("#", "\\#"),
        ("[", "{[}"),
        ("]", "{]}"),
        ("ε", "$\\varepsilon$"),
        ("×", "$\\times$"),
        ("†", "$^\\dagger$"),
        (ELSEWHERE, "$^\\ddagger$"),
    ):
        s = s.replace(a, b)
    return s


def latex(t: Table2, caption: str) -> str:
    head, rows = table2_rows(t, latex=True)
    ds, k = datasets_of(t), len(T2_METRICS)
    top = " & ".join(["", *[f"\\multicolumn{{{k}}}{{c}}{{{label(d)}}}" for d in ds]]) + " \\\\"
    rules = " ".join(f"\\cmidrule(lr){{{2 + k * i}-{1 + k * (i + 1)}}}" for i in range(len(ds)))
    sub = " & ".join(["Method", *[latex_escape(METRIC_LABELS[m]) for _ in ds for m in T2_METRICS]]) + " \\\\"
    body = [" & ".join([latex_escape(r[0]), *r[1:]]) + " \\\\" for r in rows]
    assert len(head) == 1 + k * len(ds)
    return "\n".join(
        [
            "% Generated by `python -m leaderboard publish`; needs \\usepackage{booktabs}.",
            "\\begin{table}[t]",
            "\\centering",
            "\\small",
            f"\\begin{{tabular}}{{l{'r' * k * len(ds)}}}",
            "\\toprule",
            top,
            rules,
            sub,
            "\\midrule",
            *body,
            "\\bottomrule",
            "\\end{tabular}",
            f"\\caption{{{latex_escape(caption)}}}",
            "\\end{table}",
            "",
        ]
    )


def datasets_of(t: Table2) -> list[str]:
    return list(dict.fromkeys(d for d, _ in t.values.columns))


def uncertainty(df: pd.DataFrame) -> pd.DataFrame:
    """One row per run with 95% intervals and the paired difference to ``full``."""
    cols = ["profile", "generator", "dataset", "variant", "n"]
    for m in ("subem", "em", "f1"):
        cols += [m, f"{m}_lo", f"{m}_hi", f"d_{m}", f"d_{m}_lo", f"d_{m}_hi", f"p_{m}", f"sig_{m}"]
    keep = [c for c in [*cols, "n_paired"] if c in df]
    return df[keep]


def latency(df: pd.DataFrame, baseline: str = "full") -> pd.DataFrame:
    """Per run: batch-1 compression, online and total latency and the break-even against ``baseline`` (only
    against a baseline timed under the same protocol and thread count on the same CPU, ``hardware``: model and
    bf16 kind), batched throughput apart, and the run's ``cpu``."""
    cpu = df["hardware"] if "hardware" in df else pd.Series(None, index=df.index, dtype=object)
    rows = []
    for r in df.itertuples():
        base = df[
            (df.profile == r.profile)
            & (df.generator == r.generator)
            & (df.dataset == r.dataset)
            & (df.variant == baseline)
            & (df.latency_protocol == r.latency_protocol)
            & (df.latency_threads.fillna("") == ("" if pd.isna(r.latency_threads) else r.latency_threads))
            & (cpu.fillna("") == ("" if pd.isna(getattr(r, "hardware", None)) else r.hardware))
        ]
        c, gen, tot = _num(r.compress_s), _num(r.generate_s), _num(r.total_latency_s)
        bgen = _num(base.generate_s.iloc[0]) if len(base) else None
        btot = _num(base.total_latency_s.iloc[0]) if len(base) else None
        saved = bgen - gen if bgen is not None and gen is not None else None
        be = c / saved if c is not None and saved is not None and saved > 0 else None
        bc, bg = _num(getattr(r, "batched_compress_s", None)), _num(getattr(r, "batched_generate_s", None))
        rows.append(
            {
                "profile": r.profile,
                "generator": r.generator,
                "dataset": r.dataset,
                "variant": r.variant,
                "protocol": r.latency_protocol,
                "latency_n": r.latency_n,
                "latency_threads": r.latency_threads,
                "timed_at": getattr(r, "timed_at", None),
                "compress_s": c,
                "online_s": gen,
                "total_s": tot,
                "generation_saved_s": saved,
                "break_even": be,
                "pays_off": (
                    None if saved is None or c is None or r.variant == baseline else bool(saved > 0 and c < saved)
                ),
                "total_vs_full_s": tot - btot if tot is not None and btot is not None else None,
                "batched_at": getattr(r, "batched_at", None),
                "batched_s": bc + bg if bc is not None and bg is not None else None,
                "cpu": getattr(r, "hardware", None),
            }
        )
    return pd.DataFrame(rows)


def throughput_sum(lat: pd.DataFrame) -> tuple[float, int, list[str]]:
    """One block's cost of running every variant once: the sum over its variants of the batched compression +
    generation seconds per question (mean over the datasets that have the figure), how many variants it sums,
    and the variants left out (no batched figure on any dataset: mixed or unknown timing)."""
    per = lat.groupby("variant", sort=False).batched_s.apply(lambda s: pd.to_numeric(s, errors="coerce").mean())
    missing = sorted(per[per.isna()].index)
    return float(per.dropna().sum()), int(per.notna().sum()), missing


def ordered(df: pd.DataFrame) -> pd.DataFrame:
    """Rows in reading order: (profile, generator) groups, datasets NQ/TQA/HQA, the papers' method order."""
    g = {p: i for i, p in enumerate(groups(df))}
    d = {x: i for i, x in enumerate(datasets(df))}
    v = {x: i for i, x in enumerate(variant_order(list(df.variant.unique())))}
    key = [(g[(r.profile, r.generator)], d[r.dataset], v[r.variant]) for r in df.itertuples()]
    return df.iloc[sorted(range(len(df)), key=key.__getitem__)].reset_index(drop=True)


def fmt(x, spec: str = "{:.2f}") -> str:
    v = _num(x)
    return "-" if v is None else spec.format(v)


# A method's per-example diagnostics (``meta["diagnostics"]``, averaged in its summary): label and scale.
DIAGNOSTICS = {
    "eligible": ("answer in passages %", 100),
    "recall1": ("Recall-1 %", 100),
    "hit2_at1": ("Hit-2@1 %", 100),
    "recall3": ("Recall-3 %", 100),
    "llm_calls": ("LLM calls", 1),
    "summaries_kept": ("summaries kept", 1),
    "fallback": ("raw-passage fallback %", 100),
}


def diagnostics(df: pd.DataFrame) -> list[tuple[list[str], list[list[str]]]]:
    """One (head, rows) table per set of diagnostic keys (e.g. CompSelect's cascade of Table 6, EDC2's LLM
    calls): the mean over the examples that report each key, and that count."""
    groups: dict[tuple[str, ...], list[tuple[str, str, dict]]] = {}
    for r in df.itertuples():
        d = json.loads(r.diagnostics) if isinstance(getattr(r, "diagnostics", None), str) else {}
        if d:
            known = [k for k in DIAGNOSTICS if k in d]
            groups.setdefault(tuple(known + sorted(set(d) - set(known))), []).append((r.variant, r.dataset, d))
    out = []
    for keys, items in groups.items():
        head = ["Method", "Dataset"] + [f"{DIAGNOSTICS.get(k, (k, 1))[0]} (n)" for k in keys]
        rows = [
            [v, label(ds)] + [f"{d[k]['mean'] * DIAGNOSTICS.get(k, (k, 1))[1]:.2f} ({d[k]['n']})" for k in keys]
            for v, ds, d in items
        ]
        out.append((head, rows))
    return out


# "Answers that choose" (harness.metrics.hedge): SubEM beside the SubEM of answers that neither hedge between a
# comparison question's options nor echo the prompt, and its paired test against ``full``.
CHOOSE_HEAD = (
    "Method",
    "Dataset",
    "SubEM",
    "SubEM (answers that choose)",
    "Δ vs full (answers that choose)",
    "Verdict vs full: SubEM → answers that choose",
    "Hedge %",
    "SubEM from hedge",
    "Echo %",
    "SubEM from echo",
)


def verdict(r, metric: str, baseline: str = "full") -> str:
    """Where a row stands against ``baseline`` on ``metric`` by the paired test: above, below or level ('-' for
    the baseline itself or a row without the test)."""
    d, sig = _num(getattr(r, f"d_{metric}", None)), getattr(r, f"sig_{metric}", None)
    if r.variant == baseline or d is None or sig is None or pd.isna(sig):
        return "-"
    return ("above" if d > 0 else "below") if bool(sig) else "level"


def answers_that_choose(df: pd.DataFrame, profile: str, generator: str, baseline: str = "full") -> pd.DataFrame:
    """Per row and dataset of a block: SubEM, SubEM with hedged and echoed answers scored 0 (``subem_strict``) and
    its difference from ``baseline`` (``d_subem_strict``, † where not significant), the verdict against
    ``baseline`` on SubEM and on the strict column (``a → b`` where they differ), and the hedge and echo shares
    with the SubEM points they earned."""
    g = ordered(df[(df.profile == profile) & (df.generator == generator)])
    rows = []
    for r in g.itertuples():
        d = _num(getattr(r, "d_subem_strict", None))
        mark = "" if getattr(r, "sig_subem_strict", None) else f" {DAGGER}"
        before, after = verdict(r, "subem", baseline), verdict(r, "subem_strict", baseline)
        rows.append(
            [
                r.variant,
                label(r.dataset),
                fmt(r.subem),
                fmt(getattr(r, "subem_strict", None)),
                "-" if d is None else f"{d:+.2f}{mark}",
                before if before == after else f"{before} → {after}",
                *(fmt(getattr(r, m, None)) for m in ("hedge", "subem_from_hedge", "echo", "subem_from_echo")),
            ]
        )
    return pd.DataFrame(rows, columns=list(CHOOSE_HEAD))
