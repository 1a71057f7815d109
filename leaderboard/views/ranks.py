"""The "Where the answer sits" view (issue 84): each dataset's questions grouped by the rank of the first passage, as
the run read it, that holds a gold answer (1, 2, 3, 4-5, none), each Table 2 row's SubEM per group beside `full`'s.

Why: selectors beat `full` on NQ but not on TriviaQA or HotpotQA. If that is position, `full` falls as the first
answer-bearing passage sits lower in the top-5 and a selector flattens the fall; if it is distraction, the selectors
gain even where the answer is in the first passage. No model runs: "as the run read it" is the dataset file read by
id with the harness's loader, cut as the run cut it (its ``dataset.top_k`` after its ``dataset.rank``: BM25 on
HotpotQA), and a passage holds a gold answer by the data's ``has_answer`` (``retrieval._holds``). Intervals are
``harness.stats`` (percentile bootstrap; the paired bootstrap against `full` on the same questions of a group).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from harness.data import DatasetError, DatasetSpec, load_dataset
from harness.stats import RESAMPLES, SEED, bootstrap_ci, paired_bootstrap
from leaderboard.collect import read_predictions
from leaderboard.page import Block, Data, Page, View
from leaderboard.reference import method_map, variant_order
from leaderboard.tables import DAGGER, datasets, label
from leaderboard.views.retrieval import _dataset_config, _holds, data_root

GROUPS = ("1", "2", "3", "4-5", "none")
TOP1 = "top1"


def group_of(rank: int | None) -> str:
    """A question's group by the rank (1-based) of its first answer-bearing passage; ``none`` where none holds one
    (a rank past 5, read with more passages, counts with 4-5: lower than the first three)."""
    if rank is None:
        return "none"
    return str(rank) if rank <= 3 else "4-5"


def first_gold_rank(passages: Sequence[Any], answers: Sequence[str]) -> int | None:
    """The rank (1-based) of the first passage holding a gold answer, None if none does."""
    return next((i + 1 for i, p in enumerate(passages) if _holds(p, answers)), None)


@lru_cache(maxsize=32)
def ranks_of(dataset: str, split: str, top_k: int, rank: str) -> dict[str, int | None]:
    """Per example id of ``<data root>/<dataset>/<split>.jsonl.gz``: ``first_gold_rank`` of its passages as read."""
    path = data_root() / dataset / f"{split}.jsonl.gz"
    spec = DatasetSpec(dataset, str(path), top_k=top_k, rank=rank, skip_unanswerable=True)
    return {ex.id: first_gold_rank(ex.passages, ex.answers) for ex in load_dataset(spec)}


def run_ranks(folder: str | Path) -> dict[str, int | None]:
    """``ranks_of`` for the passages a run read (its config's dataset, split, ``top_k`` and ``rank``)."""
    d = _dataset_config(folder)
    return ranks_of(d["name"], d.get("split") or "test", int(d.get("top_k") or 5), d.get("rank") or "none")


def shown_variants(variants: Iterable[str]) -> list[str]:
    """The Table 2 rows (``data/methods.yaml``) and ``top1`` that ran, in the paper's order."""
    known = {v for vs in method_map().values() for v in vs} | {TOP1}
    return variant_order([v for v in dict.fromkeys(variants) if v in known])


def by_group(
    scored: dict[str, pd.DataFrame],
    ranks: dict[str, int | None],
    baseline: str = "full",
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> pd.DataFrame:
    """One line per (variant, group): ``n``, SubEM with its 95% interval, and ``d_subem`` (with interval, p and
    significance) against ``baseline`` on the same questions of the group. ``scored``: per variant, its records'
    ``id`` and ``subem``; only questions whose rank is known are grouped."""
    base = scored.get(baseline)
    rows = []
    for variant, p in scored.items():
        p = p[p.id.isin(ranks.keys())].assign(group=lambda x: x.id.map(lambda i: group_of(ranks[i])))
        for g in GROUPS:
            part = p[p.group == g]
            row: dict[str, Any] = {"variant": variant, "group": g, "n": len(part)}
            if len(part):
                ci = bootstrap_ci(part.subem, resamples, seed)
                row.update(subem=ci.mean, subem_lo=ci.lo, subem_hi=ci.hi)
            if base is not None and variant != baseline and len(part):
                both = part.merge(base[["id", "subem"]], on="id", suffixes=("", "_b"))
                if len(both):
                    t = paired_bootstrap(both.subem, both.subem_b, resamples, seed)
                    row.update(d_subem=t.delta, d_lo=t.lo, d_hi=t.hi, p=t.p, sig=t.significant)
            rows.append(row)
    return pd.DataFrame(rows)


def block_table(
    full: pd.DataFrame, profile: str, generator: str, baseline: str = "full", resamples: int = RESAMPLES
) -> pd.DataFrame:
    """``by_group`` for every dataset of one block, with the block's ``generator`` and the ``dataset``."""
    g = full[(full.profile == profile) & (full.generator == generator)]
    out = []
    for ds in datasets(g):
        runs = {r.variant: r for r in g[g.dataset == ds].itertuples()}
        shown = shown_variants(runs)
        if baseline not in shown:
            continue
        read = lambda r: read_predictions(r.folder, None if pd.isna(r.n) else int(r.n))[["id", "subem"]]  # noqa: E731
        ranks = run_ranks(runs[baseline].folder)
        t = by_group({v: read(runs[v]) for v in shown}, ranks, baseline, resamples)
        out.append(t.assign(dataset=ds, generator=generator))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def _cell(r: dict[str, Any]) -> str:
    if not r.get("n"):
        return "-"
    s = f"{r['subem']:.1f} [{r['subem_lo']:.0f}, {r['subem_hi']:.0f}]"
    if r.get("d_subem") is not None and not pd.isna(r.get("d_subem")):
        s += f" ({r['d_subem']:+.1f}{'' if r['sig'] else ' ' + DAGGER})"
    return s


def table_rows(t: pd.DataFrame, dataset: str) -> tuple[list[str], list[list[str]]]:
    """One dataset's table: a line per variant, a column per group (n in the header)."""
    d = t[t.dataset == dataset]
    base = d[d.variant == d.variant.iloc[0]]
    counts = {r.group: int(r.n) for r in base.itertuples()}
    head = ["Method"] + [f"rank {g} (n = {counts.get(g, 0)})" for g in GROUPS]
    rows = []
    for v, g in d.groupby("variant", sort=False):
        cells = {r["group"]: _cell(r) for r in g.to_dict("records")}
        rows.append([v] + [cells.get(x, "-") for x in GROUPS])
    return head, rows


NOT_SELECTORS = ("full", "naive", "oracle_sentences", TOP1)


def findings(t: pd.DataFrame, dataset: str, reader: str) -> str:
    """Under one reader: whether `full` falls with rank, and in which groups selectors beat it significantly (the
    first passage: distraction; lower ones: position)."""
    d = t[t.dataset == dataset]
    full = {r.group: r for r in d[d.variant == "full"].itertuples() if r.n}
    if "1" not in full:
        return ""
    path = ", ".join(f"{g}: {full[g].subem:.0f}" for g in GROUPS if g in full and g != "none")
    text = f"Under `{reader}` on {label(dataset)}, `full`'s SubEM by rank is {path}"
    if "4-5" in full:
        fall = full["1"].subem - full["4-5"].subem
        moves = "falls" if fall > 0 else "rises" if fall < 0 else "stays level"
        text += f" ({moves} {abs(fall):.0f} points from rank 1 to 4-5)" if fall else f" ({moves} from rank 1 to 4-5)"
    gains = d[~d.variant.isin(NOT_SELECTORS) & d.sig.fillna(False).astype(bool) & (d.d_subem > 0)]
    first = sorted(set(gains[gains.group == "1"].variant))
    lower = sorted(set(gains[gains.group.isin(["2", "3", "4-5"])].variant))
    said = []
    if first:
        said.append(f"where the answer is in the first passage ({', '.join(f'`{v}`' for v in first)}): distraction")
    if lower:
        said.append(f"where it sits lower ({', '.join(f'`{v}`' for v in lower)}): position")
    text += "; selectors beat it significantly " + (" and ".join(said) if said else "in no group") + "."
    return text + _top1_clause(d)


def _top1_clause(d: pd.DataFrame) -> str:
    """What the first passage alone scores where it holds the answer, against `full` (the other passages' cost)."""
    top = d[(d.variant == TOP1) & (d.group == "1")]
    if top.empty or pd.isna(top.d_subem.iloc[0]):
        return ""
    r = top.iloc[0]
    sig = bool(r.sig) if not pd.isna(r.sig) else False
    verdict = "distract the reader" if sig and r.d_subem > 0 else "cost nothing significant there"
    return (
        f" Read alone there, the first passage (`{TOP1}`) scores {r.subem:.0f} ({r.d_subem:+.1f}"
        f"{'' if sig else ', not significant'}): the other passages {verdict}."
    )


def section(
    full: pd.DataFrame, gens: Sequence[str], profile: str, baseline: str, csv: Path
) -> tuple[str, str, Path | None]:
    """The view for the readers ``gens`` (the headline's first): its Markdown, HTML and CSV (``("", "", None)``
    when no block has a `full` row to group by)."""
    from leaderboard import html
    from leaderboard.tables import markdown

    try:
        tables = [block_table(full, profile, g, baseline) for g in gens]
    except (DatasetError, OSError) as e:
        why = f"Not shown: the passages the runs read cannot be re-read here ({' '.join(str(e).split())[:300]})."
        return f"{why}\n", html.note(why), None
    t = pd.concat([x for x in tables if not x.empty], ignore_index=True) if any(len(x) for x in tables) else None
    if t is None:
        return "", "", None
    t.to_csv(csv, index=False)
    key = (
        "Questions grouped by the rank of the first passage, as the run read it, that holds a gold answer (the "
        "data's has_answer). Per group: SubEM [95% interval] and, in brackets, the difference from `full` on the "
        f"same questions ({DAGGER}: not significant, paired bootstrap)."
    )
    md, body = [f"{key}\n"], [html.note(key)]
    for g in gens:
        for ds in datasets(t[t.generator == g]):
            head, rows = table_rows(t[t.generator == g], ds)
            title = f"{label(ds)}, read by `{g}`"
            md.append(f"### {title}\n\n{markdown(head, rows)}\n")
            body.append(html.section(title.replace("`", ""), html.frame_html(pd.DataFrame(rows, columns=head)), 3))
    said = [x for g in gens for ds in datasets(t[t.generator == g]) if (x := findings(t[t.generator == g], ds, g))]
    if said:
        md.append("".join(f"- {x}\n" for x in said))
        body.append(html.points(said))
    return "\n".join(md), "".join(body), csv


def render(page: Page, d: Data, b: Block) -> None:
    """The headline's Table 2 rows (and ``top1``) by the rank of the first answer-bearing passage, under each
    reader, with ``answer_rank_<profile>_<generator>.csv``."""
    if page.archive:
        return
    from leaderboard.views.readers import reader_blocks

    gens = reader_blocks(d.full, b.profile, b.gen)
    md, body, csv = section(d.full, gens, b.profile, b.baseline, page.out / f"answer_rank_{b.slug}.csv")
    if md:
        page.md.append(md)
        page.add(body)
    if csv:
        page.written.append(csv)


VIEW = View("ranks", "ranks", render)
