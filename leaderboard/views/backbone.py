"""Compressors at size (issue 94): every language-model compressor on two backbones, side by side, under each reader.

A row on another backbone is a method variant run with ``backbone=<switch>`` (conf/backbone/: the compressors'
language models switched, the generator not), so its variant names the switch: ``recomp_abs`` and
``recomp_abs[backbone=qwen05b]``. Only this view reads the switched rows (``VIEW.owns``). Per reader (the headline
block first, then every other reader of the profile that read switched rows: ``readers.reader_blocks``) and dataset,
on the questions every compared row of that reader answered (paired by example id):
- each compressor at each backbone: SubEM with its 95% interval, CR, and its compress seconds a question: from a
  latency pass that timed both backbones on one machine (``tools.latency_pass --variants
  recomp_abs,recomp_abs[backbone=qwen05b]``), with the switched row's ratio to the own row, else the accuracy
  pass's (``batched_compress_s``: runs of different machines, never put in a ratio);
- its paired difference (bootstrap) from ``full``, ``bm25`` and the BGE stand-in, and the switched row's from the
  same method on the profile's own backbone;
- per seed method (``data/claims.yaml``: the rows its paper reports it above), whether that ordering holds at each
  backbone: ``holds`` (significantly above every one), ``not shown`` (below none significantly, not above every
  one), ``fails`` (significantly below at least one).
Nothing here loads a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.metrics import corpus_cr
from harness.stats import RESAMPLES, SEED, bootstrap_ci, paired_bootstrap
from leaderboard import html
from leaderboard.collect import read_predictions
from leaderboard.page import Block, Data, Page, View
from leaderboard.reference import claims, reader_sizes, variant_order
from leaderboard.tables import DAGGER, datasets, label, markdown

BASELINES = ("full", "bm25", "bge_reranker")  # every compressor's difference from these (the three)
HOLDS, NOT_SHOWN, FAILS = "holds", "not shown", "fails"
SWITCH = "backbone"  # the Hydra override that switches the compressors' language models


def owned(df: pd.DataFrame) -> pd.Series:
    """The rows of a switched backbone: only this view reads them (``VIEW.owns``)."""
    if "backbone" not in df:
        return pd.Series(False, index=df.index)
    return df.backbone.notna() & df.overrides.fillna("").str.contains(f"(?:^|,){SWITCH}=", regex=True)


def base_variant(method: str, overrides: str) -> str:
    """The variant a switched row is on the profile's own backbone: its overrides without ``backbone=``."""
    rest = [o for o in str(overrides or "").split(",") if o and o.split("=", 1)[0] != SWITCH]
    return f"{method}[{','.join(rest)}]" if rest else method


def backbone_label(lm: str | None) -> str:
    """A backbone as its size is named (``reader_sizes.yaml``: 135M, 0.5B), else its model reference."""
    entry = reader_sizes().get(str(lm or "").split("@", 1)[0])
    return str(entry["size"]) if entry else str(lm or "own")


def own_backbone(full: pd.DataFrame, profile: str) -> str:
    """The profile's own backbone: the methods' LM most unswitched rows of ``profile`` recorded."""
    lms = full[(full.profile == profile) & full.backbone.isna()].get("backbone_lm", pd.Series(dtype=object)).dropna()
    return backbone_label(str(lms.mode().iloc[0]) if len(lms) else None)


def _pick(rows: pd.DataFrame) -> pd.Series:
    """One run per variant: the most questions, then the newest."""
    return rows.sort_values(["n", "finished_at"], ascending=False, na_position="last").iloc[0]


def _find(rows: pd.DataFrame, variant: str) -> pd.Series | None:
    """``variant``'s run among ``rows``, or the run it repeats row for row (``aliases``: shown once, under the kept
    variant's name; EDC2 falling back to every passage repeats ``full``)."""
    if (rows.variant == variant).any():
        return _pick(rows[rows.variant == variant])
    named = rows.get("aliases", pd.Series(index=rows.index, dtype=object)).fillna("").str.split(", ")
    twins = rows[named.map(lambda a: variant in a)]
    return _pick(twins) if len(twins) else None


def _records(row: pd.Series) -> pd.DataFrame:
    return read_predictions(row.folder, None if pd.isna(row.n) else int(row.n))


def pass_seconds(passes: pd.DataFrame, profile: str, reader: str, dataset: str, own: str, switched: str):
    """(own, switched) compress seconds a question from the newest latency pass that timed both variants on one
    machine (same ``pass_id``, CPU and threads), with that CPU; None without one."""
    if passes.empty or "compress_s" not in passes:
        return None
    p = passes[(passes.profile == profile) & (passes.generator == reader) & (passes.dataset == dataset)]
    both = []
    for key, g in p.groupby(["pass_id", "cpu", "threads"]):
        v = g.set_index("variant")
        if own in v.index and switched in v.index:
            both.append((str(g.finished_at.max()), v.loc[own].compress_s, v.loc[switched].compress_s, key[1]))
    if not both:
        return None
    _, a, b, cpu = max(both)
    return float(a), float(b), str(cpu)


@dataclass
class Side:
    """One reader and dataset: every compressor at both backbones beside the baselines (``compare``)."""

    dataset: str
    reader: str
    n: int  # questions every compared row answered
    table: pd.DataFrame  # per (method, backbone): scores and paired differences
    own: str  # the profile's own backbone's label
    other: str  # the switched backbone's label


def _diff(p: pd.DataFrame, q: pd.DataFrame, resamples: int, seed: int) -> dict[str, float | bool]:
    t = paired_bootstrap(p.subem.to_numpy(), q.subem.to_numpy(), resamples, seed)
    return {"d": t.delta, "lo": t.lo, "hi": t.hi, "p": t.p, "sig": bool(t.significant)}


def compare(
    full: pd.DataFrame,
    switched: pd.DataFrame,
    profile: str,
    reader: str,
    dataset: str,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    passes: pd.DataFrame | None = None,
) -> Side | None:
    """The switched rows of ``reader`` on ``dataset`` beside the same methods on the profile's own backbone and the
    baselines (``BASELINES`` and the seeds' claimed rows), on the questions they all share; None without a switched
    row whose own-backbone row and ``full`` the reader also read."""
    mine = lambda df: df[(df.profile == profile) & (df.generator == reader) & (df.dataset == dataset)]  # noqa: E731
    own, sw = mine(full), mine(switched)
    pairs = {}  # method variant -> (own-backbone row, switched row)
    for _, rows in sw.groupby("variant"):
        r = _pick(rows)
        base = base_variant(r.method, r.overrides)
        if (mine_own := _find(own, base)) is not None:
            pairs[base] = (mine_own, r)
    if not pairs or _find(own, "full") is None:
        return None
    wanted = set(BASELINES) | {b for m in pairs for b in claims().get(m, {}).get("above", [])}
    base_rows = {b: r for b in wanted if (r := _find(own, b)) is not None}
    recs = {("", b): _records(r) for b, r in base_rows.items()}
    for m, (o, s) in pairs.items():
        recs |= {(backbone, m): _records(r) for backbone, r in (("own", o), ("switched", s))}
    ids = frozenset.intersection(*(frozenset(p.id) for p in recs.values()))
    if not ids:
        return None
    cut = {k: p[p.id.isin(ids)].sort_values("id").reset_index(drop=True) for k, p in recs.items()}
    switched_label = backbone_label(next(iter(pairs.values()))[1].backbone_lm)
    rows = []
    for m in variant_order(list(pairs)):
        timed = pass_seconds(
            pd.DataFrame() if passes is None else passes, profile, reader, dataset, m, pairs[m][1].variant
        )
        for k, side in enumerate(("own", "switched")):
            row = _row(m, side, pairs[m], cut, resamples, seed)
            if timed:
                row |= {"compress_s": timed[k], "timed_in": f"one pass, {timed[2]}"}
            rows.append(row)
    return Side(dataset, reader, len(ids), pd.DataFrame(rows), own_backbone(full, profile), switched_label)


def _row(m: str, side: str, pair: tuple[pd.Series, pd.Series], cut: dict, resamples: int, seed: int) -> dict:
    """One compressor at one backbone: its scores, and its paired differences from every baseline row read."""
    p, run = cut[side, m], pair[side == "switched"]
    ci = bootstrap_ci(p.subem.to_numpy(), resamples, seed)
    row = {"method": m, "side": side, "variant": run.variant, "n": len(p), "subem": ci.mean, "subem_lo": ci.lo}
    row |= {"subem_hi": ci.hi, "cr": corpus_cr(list(p.original_tokens), list(p.compressed_tokens))[0]}
    row |= {"compress_s": run.get("batched_compress_s"), "timed_in": f"accuracy pass, {run.get('hardware')}"}
    for (kind, b), q in cut.items():
        if kind == "":
            row |= {f"{k}_{b}": x for k, x in _diff(p, q, resamples, seed).items()}
    if side == "switched":
        row |= {f"{k}_own": x for k, x in _diff(p, cut["own", m], resamples, seed).items()}
    return row


def ordering(r: dict | pd.Series, method: str) -> tuple[str, dict[str, str]]:
    """Whether the seed's claimed ordering holds for one compressor row: the verdict and, per claimed baseline the
    row was compared with, ``above`` / ``level`` / ``below``."""
    each = {}
    for b in claims().get(method, {}).get("above", []):
        if f"d_{b}" in r and not pd.isna(r[f"d_{b}"]):
            sig = bool(r[f"sig_{b}"])
            each[b] = "above" if sig and r[f"d_{b}"] > 0 else "below" if sig else "level"
    if any(x == "below" for x in each.values()):
        return FAILS, each
    return (HOLDS if each and all(x == "above" for x in each.values()) else NOT_SHOWN), each


def _delta(r: dict, key: str) -> str:
    d = r.get(f"d_{key}")
    if d is None or pd.isna(d):
        return "-"
    return f"{d:+.1f}" + ("" if r[f"sig_{key}"] else f" {DAGGER}")


def _order_cell(r: dict) -> str:
    if r["method"] not in claims():
        return ""
    verdict, each = ordering(r, r["method"])
    below = [b for b, x in each.items() if x == "below"]
    level = [b for b, x in each.items() if x == "level"]
    detail = "; ".join(
        x for x in (f"below {', '.join(below)}" if below else "", f"level {', '.join(level)}" if level else "") if x
    )
    return verdict + (f" ({detail})" if detail else "")


def table_rows(s: Side) -> tuple[list[str], list[list[str]]]:
    """One reader and dataset: per compressor and backbone its SubEM, CR, seconds and differences."""
    head = [
        "Method",
        "backbone",
        "SubEM [95%]",
        "CR",
        "compress s/q",
        "Δ full",
        "Δ bm25",
        "Δ BGE",
        f"Δ vs {s.own}",
        "seed's ordering",
    ]
    rows, own_s = [], {}
    for r in s.table.to_dict("records"):
        secs = r.get("compress_s")
        one_pass = str(r.get("timed_in", "")).startswith("one pass")
        own_s |= {r["method"]: secs} if r["side"] == "own" else {}
        ratio = secs / own_s[r["method"]] if r["side"] == "switched" and one_pass and own_s.get(r["method"]) else None
        rows.append(
            [
                f"`{r['method']}`",
                s.own if r["side"] == "own" else s.other,
                f"{r['subem']:.1f} [{r['subem_lo']:.1f}, {r['subem_hi']:.1f}]",
                f"{r['cr']:.1f}x" if r["cr"] else "-",
                ("-" if secs is None or pd.isna(secs) else f"{secs:.2f}") + (f" ({ratio:.1f}x)" if ratio else ""),
                *(_delta(r, b) for b in BASELINES),
                _delta(r, "own") if r["side"] == "switched" else "",
                _order_cell(r),
            ]
        )
    return head, rows


def said(sides: list[Side]) -> list[str]:
    """Per reader, dataset and seed method: its claimed ordering at each backbone, and what the switch changed."""
    out = []
    for s in sides:
        t = s.table
        for m in [m for m in dict.fromkeys(t.method) if m in claims()]:
            own, sw = (t[(t.method == m) & (t.side == k)].iloc[0] for k in ("own", "switched"))
            change = _delta(sw.to_dict(), "own")
            out.append(
                f"{label(s.dataset)}, read by `{s.reader}` (n = {s.n}): `{m}`'s claimed ordering "
                f"{ordering(own, m)[0]} at {s.own} and {ordering(sw, m)[0]} at {s.other}; the {s.other} backbone "
                f"moves its SubEM {change} ({own.subem:.1f} -> {sw.subem:.1f}), its CR {own.cr:.1f}x -> {sw.cr:.1f}x."
            )
    return out


def frame(sides: list[Side]) -> pd.DataFrame:
    """Every compared compressor row, long (the CSV), with its reader, dataset and backbone."""
    out = []
    for s in sides:
        t = s.table.assign(dataset=s.dataset, generator=s.reader, n_shared=s.n)
        t["backbone"] = [s.own if x == "own" else s.other for x in t.side]
        t["ordering"] = [ordering(r, r["method"])[0] if r["method"] in claims() else None for r in t.to_dict("records")]
        out.append(t)
    return pd.concat(out, ignore_index=True)


def section(
    full: pd.DataFrame,
    switched: pd.DataFrame,
    gens: list[str],
    profile: str,
    csv: Path,
    resamples: int = RESAMPLES,
    passes: pd.DataFrame | None = None,
) -> tuple[str, str, Path | None]:
    """The view under the readers ``gens`` (the headline's first): Markdown, HTML and ``backbone_<stem>.csv``;
    ``("", "", None)`` without switched rows."""
    if switched.empty:
        return "", "", None
    both = pd.concat([full, switched], ignore_index=True)
    sides = [
        s
        for g in gens
        for d in datasets(switched[(switched.profile == profile) & (switched.generator == g)])
        if (s := compare(both, switched, profile, g, d, resamples, passes=passes)) is not None
    ]
    if not sides:
        return "", "", None
    frame(sides).to_csv(csv, index=False)
    key = (
        f"Each language-model compressor on the profile's own backbone ({sides[0].own}) and with its language models "
        f"switched ({sides[0].other}: `backbone=` in its variant, conf/backbone/), the generator unchanged. Per reader "
        f"and dataset, on the questions every row shown answered: SubEM [95% interval], CR, compress seconds a "
        f"question (from a latency pass that timed both backbones on one machine, the switched row's ratio to the "
        f"own row beside it; else the accuracy pass's, of runs on different machines, never in a ratio), and "
        f"the paired difference from `full`, `bm25`, the BGE stand-in and, for the switched row, the same method on "
        f"{sides[0].own} ({DAGGER}: not significant, paired bootstrap). The seed's ordering (leaderboard/data/"
        f"claims.yaml: the rows its paper reports it above): `{HOLDS}` (significantly above every one), `{NOT_SHOWN}` "
        f"(below none significantly), `{FAILS}` (significantly below at least one)."
    )
    md, body = [f"{key}\n"], [html.note(key)]
    for s in sides:
        head, rows = table_rows(s)
        title = f"{label(s.dataset)}, read by `{s.reader}` (n = {s.n})"
        md.append(f"### {title}\n\n{markdown(head, rows)}\n")
        plain = [[c.replace("`", "") for c in row] for row in rows]
        body.append(html.section(title.replace("`", ""), html.frame_html(pd.DataFrame(plain, columns=head)), 3))
    points = said(sides)
    md.append("".join(f"- {x}\n" for x in points))
    body.append(html.points(points))
    return "\n".join(md), "".join(body), csv


def render(page: Page, d: Data, b: Block) -> None:
    """The headline profile's compressors at both backbones, with ``backbone_<profile>_<generator>.csv``."""
    if page.archive:
        return
    from leaderboard.views.readers import reader_blocks

    gens = reader_blocks(d.full, b.profile, b.gen)
    csv = page.out / f"backbone_{b.slug}.csv"
    page.view(*section(d.full, d.rows_of("backbone"), gens, b.profile, csv, d.resamples, d.passes))


# the switched rows run on the shuffled 200 (the n): in Table 2 they would shrink its shared questions
VIEW = View("backbone", "backbone", render, owns=owned)
