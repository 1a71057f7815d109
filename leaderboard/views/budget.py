"""The "At the same budget" view (issue 84): every Table 2 method whose keep rate can be set, at CompSelect's CR, on the
same questions as CompSelect.

Rows sit at different compression ratios, so a higher SubEM may be a method keeping more, not choosing better. The
budget variants (``conf/method/*_budget.yaml``: a name ending in ``_budget``, its knob set per dataset on train
questions by ``tools.choose_budget``) land at CompSelect's CR. Here, per reader and dataset, on the questions every
budget row and CompSelect share: each row's CR and its ratio to CompSelect's (a row more than ``TOLERANCE`` off is
shown and named, never counted as matched), SubEM with its 95% interval, and the paired difference from CompSelect
(``harness.stats``). The passage selectors (``LIMITS``) cannot go below one passage: their top-1 rows stand in where
that lands within the tolerance, and a line says the ratio they reach where it does not.

Budget rows are kept out of every other table (``split_budget``): run on the shuffled 200, they would shrink Table 2's
shared questions and rank a 200-question row beside 800-question ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from harness.metrics import corpus_cr
from harness.stats import RESAMPLES, SEED, bootstrap_ci, paired_bootstrap
from leaderboard.collect import read_records
from leaderboard.page import Block, Data, Page, View
from leaderboard.tables import DAGGER, datasets, label

SUFFIX = "_budget"
TARGET = "compselect"
TOLERANCE = 0.15
LIMITS = {"bm25": "top_k = 1 passage", "bge_reranker": "top_k = 1 passage"}  # passage selectors at their limit


def is_budget(variant: str) -> bool:
    """Whether a variant is a budget variant (its knob set per dataset to CompSelect's CR)."""
    return str(variant).endswith(SUFFIX)


def owned(df: pd.DataFrame) -> pd.Series:
    """The budget rows of collected runs: only this view reads them (``VIEW.owns``)."""
    return df.variant.map(is_budget).astype(bool)


def split_budget(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every other row, the budget rows): only this view reads the second."""
    mask = owned(df)
    return df[~mask].reset_index(drop=True), df[mask].reset_index(drop=True)


def knob(config: dict[str, Any], dataset: str) -> tuple[str, Any]:
    """(the knob, its value) of a budget run's method config: the key whose value is ``per_dataset[dataset]``."""
    method = (config or {}).get("method") or {}
    value = (method.get("per_dataset") or {}).get(dataset)
    name = next((k for k, v in method.items() if k != "per_dataset" and v == value and value is not None), "")
    return name, value


def _records(row: Any) -> pd.DataFrame:
    n = None if pd.isna(row.n) else int(row.n)
    return pd.DataFrame(read_records(row.folder, n))


def compare(records: dict[str, pd.DataFrame], target: str = TARGET, resamples: int = RESAMPLES, seed: int = SEED):
    """One line per variant of ``records`` (``target`` first), on the ids they all share: n, CR (ratio of sums),
    its ratio to the target's, whether it is within ``TOLERANCE``, SubEM with its 95% interval and the paired
    difference from the target (interval, p, significance)."""
    ids = frozenset.intersection(*(frozenset(p.id) for p in records.values()))
    cut = {v: p[p.id.isin(ids)].sort_values("id").reset_index(drop=True) for v, p in records.items()}
    base = cut[target]
    base_cr = corpus_cr(list(base.original_tokens), list(base.compressed_tokens))[0]
    rows = []
    for v in [target, *(x for x in cut if x != target)]:
        p = cut[v]
        cr = corpus_cr(list(p.original_tokens), list(p.compressed_tokens))[0]
        ci = bootstrap_ci(p.subem, resamples, seed)
        row: dict[str, Any] = {"variant": v, "n": len(p), "cr": cr, "subem": ci.mean, "subem_lo": ci.lo}
        row.update(subem_hi=ci.hi, kept_nothing=float((p.compressed_tokens == 0).mean()))
        row["cr_ratio"] = cr / base_cr if cr and base_cr else None
        row["within"] = row["cr_ratio"] is not None and abs(row["cr_ratio"] - 1) <= TOLERANCE
        if v != target:
            both = p.merge(base[["id", "subem"]], on="id", suffixes=("", "_t"))
            t = paired_bootstrap(both.subem, both.subem_t, resamples, seed)
            row.update(d_subem=t.delta, d_lo=t.lo, d_hi=t.hi, p=t.p, sig=t.significant)
        rows.append(row)
    return pd.DataFrame(rows)


def block_table(
    full: pd.DataFrame, budget: pd.DataFrame, profile: str, generator: str, resamples: int = RESAMPLES
) -> pd.DataFrame:
    """``compare`` for every dataset where ``generator`` has budget rows and a CompSelect row, with the passage
    selectors' top-1 rows (``LIMITS``), each budget row's knob and value, ``dataset`` and ``generator``."""
    mine = lambda df: df[(df.profile == profile) & (df.generator == generator)]  # noqa: E731
    f, b = mine(full), mine(budget)
    out = []
    for ds in datasets(b):
        own = {r.variant: r for r in f[f.dataset == ds].itertuples()}
        runs = {r.variant: r for r in b[b.dataset == ds].itertuples()}
        if TARGET not in own or not runs:
            continue
        recs = {TARGET: _records(own[TARGET])} | {v: _records(r) for v, r in runs.items()}
        recs |= {v: _records(own[v]) for v in LIMITS if v in own}
        t = compare({v: p for v, p in recs.items() if len(p)}, TARGET, resamples)
        knobs = {v: knob(_config(r.folder), ds) for v, r in runs.items()} | {v: (LIMITS[v], None) for v in LIMITS}
        t["knob"] = [knobs.get(v, ("", None))[0] for v in t.variant]
        t["value"] = [knobs.get(v, ("", None))[1] for v in t.variant]
        out.append(t.assign(dataset=ds, generator=generator))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def _config(folder: str | Path) -> dict[str, Any]:
    import json

    path = Path(folder) / "summary.json"
    return json.loads(path.read_text(encoding="utf-8")).get("config") or {} if path.is_file() else {}


def table_rows(t: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """One dataset's table under one reader."""
    head = ["Method", "knob", "CR", "CR / CompSelect's", "SubEM [95%]", "minus CompSelect [95%]", "kept nothing"]
    rows = []
    for r in t.to_dict("records"):
        value = "" if r.get("value") is None or pd.isna(r.get("value")) else f" = {r['value']:g}"
        ratio = "-" if r["cr_ratio"] is None else f"{r['cr_ratio']:.2f}" + ("" if r["within"] else " (off)")
        diff = "-"
        if r["variant"] != TARGET:
            diff = f"{r['d_subem']:+.1f} [{r['d_lo']:+.1f}, {r['d_hi']:+.1f}]" + ("" if r["sig"] else f" {DAGGER}")
        rows.append(
            [
                f"`{r['variant']}`",
                (r.get("knob") or "") + value,
                f"{r['cr']:.1f}x",
                ratio,
                f"{r['subem']:.1f} [{r['subem_lo']:.1f}, {r['subem_hi']:.1f}]",
                diff,
                f"{100 * r['kept_nothing']:.0f}%",
            ]
        )
    return head, rows


def verdict(t: pd.DataFrame, dataset: str, reader: str) -> str:
    """One sentence: whether CompSelect is ahead (every matched row significantly lower), level (none higher) or
    behind at its own budget on ``dataset`` under ``reader`` (rows within the tolerance only), and which rows could
    not reach it."""
    d = t[t.dataset == dataset]
    own = d[d.variant == TARGET].iloc[0]
    matched = d[(d.variant != TARGET) & d.within.astype(bool)]
    off = d[(d.variant != TARGET) & ~d.within.astype(bool)]
    head = f"On {label(dataset)} under `{reader}` (n = {int(own.n)}, CompSelect {own.subem:.1f} at {own.cr:.1f}x)"
    if matched.empty:
        text = f"{head}, no row lands within {TOLERANCE:.0%} of CompSelect's CR"
    else:
        above = matched[matched.sig.astype(bool) & (matched.d_subem > 0)]
        below = matched[matched.sig.astype(bool) & (matched.d_subem < 0)]
        best = matched.loc[matched.subem.idxmax()]
        if not above.empty:
            verb = "beats" if len(above) == 1 else "beat"
            text = f"{head}, CompSelect is behind at its own budget: {_names(above)} {verb} it"
        elif best.subem > own.subem:
            text = (
                f"{head}, CompSelect is not ahead at its own budget: `{best.variant}` scores {best.subem:.1f} "
                f"({best.d_subem:+.1f}, not significant)"
            )
        elif len(below) == len(matched):
            text = f"{head}, CompSelect is ahead at its own budget: every matched row scores significantly lower"
        else:
            text = f"{head}, CompSelect is level at its own budget: no matched row scores higher, not every one lower"
        text += f"; it beats {len(below)} of the {len(matched)} matched rows significantly"
        text += f" ({_names(below)})" if len(below) else ""
    if len(off):
        text += "; off budget: " + ", ".join(f"`{r.variant}` reaches {r.cr:.1f}x" for r in off.itertuples())
    return text + "."


def _names(rows: pd.DataFrame) -> str:
    return ", ".join(f"`{v}`" for v in rows.variant)


def section(
    full: pd.DataFrame, budget: pd.DataFrame, gens: Sequence[str], profile: str, csv: Path
) -> tuple[str, str, Path | None]:
    """The view for the readers ``gens`` (the headline's first): its Markdown, HTML and CSV (``("", "", None)``
    without budget rows)."""
    from leaderboard import html
    from leaderboard.tables import markdown

    if budget.empty:
        return "", "", None
    tables = [block_table(full, budget, profile, g) for g in gens]
    tables = [x for x in tables if len(x)]
    if not tables:
        return "", "", None
    t = pd.concat(tables, ignore_index=True)
    t.to_csv(csv, index=False)
    key = (
        f"Each budget row's knob is set per dataset, on train questions, to land at CompSelect's CR "
        f"(research/budget/README.md). On the questions every row shares: CR and its ratio to CompSelect's (off: more "
        f"than {TOLERANCE:.0%} away, not counted as matched), SubEM [95% interval] and the paired difference from "
        f"CompSelect ({DAGGER}: not significant, paired bootstrap). The passage selectors keep at least one passage."
    )
    md, body = [f"{key}\n"], [html.note(key)]
    said = []
    for g in gens:
        tg = t[t.generator == g]
        for ds in datasets(tg):
            head, rows = table_rows(tg[tg.dataset == ds])
            title = f"{label(ds)}, read by `{g}`"
            md.append(f"### {title}\n\n{markdown(head, rows)}\n")
            plain = [[c.replace("`", "") for c in row] for row in rows]
            body.append(html.section(title.replace("`", ""), html.frame_html(pd.DataFrame(plain, columns=head)), 3))
            said.append(verdict(tg, ds, g))
    md.append("".join(f"- {x}\n" for x in said))
    body.append(html.points(said))
    return "\n".join(md), "".join(body), csv


def render(page: Page, d: Data, b: Block) -> None:
    """The budget variants beside CompSelect on the same questions, under each reader, with
    ``budget_<profile>_<generator>.csv``."""
    if page.archive:
        return
    from leaderboard.views.readers import reader_blocks

    gens = reader_blocks(d.full, b.profile, b.gen)
    page.view(*section(d.full, d.rows_of("budget"), gens, b.profile, page.out / f"budget_{b.slug}.csv"))


# the budget rows are run on the shuffled 200: in Table 2 they would shrink its shared questions
VIEW = View("budget", "budget", render, owns=owned)
