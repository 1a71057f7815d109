"""``python -m leaderboard export-contexts <results> <out.jsonl.gz>``: the compressed contexts of a block's Table 2
rows as one gzipped JSON-lines file that any generator can read (``python -m harness contexts=<file> ...``).

Line 1 is ``{"manifest": {...}}``: the commit that exports, the block (profile, generator), the sample, and per
(method, dataset) row its context key (``harness.reuse``), run key, source generator, the method's weights and
``describe()``, n, and the run's commit. Every other line is one example's context: method, dataset, id, the
documents as the generator was given them, the kept units, the measured ``compress_s`` and ``stages`` (batched) and,
for the batch-1 latency sample, ``latency`` (its ``compress_s``, ``stages``, ``threads``).

The contexts come from the full run folders (``predictions.jsonl`` keeps each context's text) or from an archive
(``leaderboard/runs``: its records keep each context's hash, its store the texts, ``leaderboard.context_store``),
of runs made since run folders hold a context key (``run.json`` ``contexts``). A row whose folder lacks them fails
in one line naming it. Nothing here loads a model.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from harness.provenance import git_commit
from harness.records import LATENCY, PREDICTIONS, RUN, read_jsonl
from harness.reuse import split_documents
from leaderboard import context_store
from leaderboard.collect import collect, read_records
from leaderboard.headline import pick_headline
from leaderboard.reference import method_map

DATASETS = ("nq", "triviaqa", "hotpotqa")


class ExportError(RuntimeError):
    """The results cannot give the contexts asked for (one line naming the folder and why)."""


def table2_variants() -> list[str]:
    """The Table 2 rows, in the paper's order (``leaderboard/data/methods.yaml``)."""
    return [v for vs in method_map().values() for v in vs]


def _rows(
    runs: pd.DataFrame, block: tuple[str, str], variants: Sequence[str], sample: str, datasets: Sequence[str]
) -> pd.DataFrame:
    g = runs[(runs.profile == block[0]) & (runs.generator == block[1]) & (runs["sample"] == sample)]
    g = g[g.variant.isin(variants) & g.dataset.isin(datasets)]
    missing = [f"{v}/{d}" for v in variants for d in datasets if g[(g.variant == v) & (g.dataset == d)].empty]
    if missing:
        raise ExportError(f"block {block[0]}/{block[1]} ({sample}) has no run of {', '.join(missing)}")
    return g


def _with_texts(records: list[dict[str, Any]], folder: Path, archive: Path, dataset: str) -> list[dict[str, Any]]:
    """``records`` with their context texts: their own, or an archived run's from the archive's store
    (``leaderboard.context_store``); ``ExportError`` when neither holds them."""
    records = context_store.fill(records, archive, dataset)
    lost = [r["id"] for r in records if "context" not in r]
    if lost:
        raise ExportError(
            f"{folder / PREDICTIONS}: {len(lost)} of {len(records)} records keep no context text and "
            f"{context_store.store_file(archive, dataset)} does not hold them (first: {lost[0]}): export from the "
            "results folder of the run that made them, or archive it again"
        )
    return records


def _row_contexts(row: Any, archive: Path, limit: int | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One run's manifest entry and its context lines (its first ``limit`` examples, default all it scored);
    ``ExportError`` when neither its folder nor the store of ``archive`` (the results root) keeps its contexts."""
    folder = Path(row.folder)
    run = json.loads((folder / RUN).read_text()) if (folder / RUN).is_file() else {}
    contexts = run.get("contexts") or {}
    if not contexts.get("key"):
        why = "reads the generator" if "contexts" in run else "was made before run folders held a context key"
        raise ExportError(f"{folder / RUN}: no context key ({row.variant} {why}); re-run it into this results root")
    n = None if pd.isna(row.n) else int(row.n)
    records = read_records(folder, n if limit is None else min(limit, n if n is not None else limit))
    records = _with_texts(records, folder, archive, row.dataset)
    timed = {r["id"]: r for r in read_jsonl(folder / LATENCY)}
    lines = []
    for r in records:
        lat = timed.get(r["id"])
        lines.append(
            {
                "method": row.variant,
                "dataset": row.dataset,
                "id": r["id"],
                "documents": r.get("documents") or split_documents(r["context"] or ""),
                "units": r.get("units"),
                "compress_s": r["compress_s"],
                "stages": r.get("stages") or {},
                "meta": r.get("meta") or {},
                **({"reused": r["reused"]} if "reused" in r else {}),
                **({"tokens": {"compress": r["tokens"].get("compress")}} if r.get("tokens") else {}),
                "latency": None
                if lat is None
                else {k: lat.get(k) for k in ("compress_s", "stages", "threads", "tokens")},
            }
        )
    entry = {
        "method": row.variant,
        "dataset": row.dataset,
        "key": contexts["key"],
        "run_key": run.get("key"),
        "generator": row.generator,
        "commit": row.commit,
        "n": len(lines),
        "method_weights": contexts.get("method_weights"),
        "method_info": contexts.get("method_info"),
    }
    return entry, lines


def export_contexts(
    results: str | Path,
    out: str | Path,
    block: str | None = None,
    variants: Sequence[str] | None = None,
    sample: str = "shuffled seed 0",
    datasets: Sequence[str] = DATASETS,
    limit: int | None = None,
) -> Path:
    """Write the contexts of ``variants`` (default: the Table 2 rows) on ``datasets`` (default NQ, TriviaQA and
    HotpotQA) in ``block`` (``GENERATOR`` or ``PROFILE/GENERATOR``; default: the newest block) of ``results`` to
    ``out``; ``sample`` as the leaderboard names it (``first``, ``shuffled seed 0``); ``limit``: each row's first N
    examples only (the shuffled 200 of a run made on every question)."""
    runs = collect(results)
    if runs.empty:
        raise ExportError(f"{results}: no run folder (summary.json) under it")
    chosen = pick_headline(runs, block)
    g = _rows(runs, chosen, list(variants or table2_variants()), sample, datasets)
    entries, lines = [], []
    for row in g.itertuples():
        entry, rows = _row_contexts(row, Path(results), limit)
        entries.append(entry)
        lines += rows
    manifest = {
        "format": "rag-compress-harness contexts 1",
        "commit": git_commit(),
        "profile": chosen[0],
        "generator": chosen[1],
        "sample": sample,
        "limit": limit,
        "datasets": list(datasets),
        "rows": entries,
    }
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wt", encoding="utf-8") as f:
        for line in [{"manifest": manifest}, *lines]:
            f.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
    return out
