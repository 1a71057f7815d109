"""Gather the recounted tokens of a block's rows into the file the "At the readers' scale" view reads.

    .venv/bin/python -m tools.recount RESULTS [--out leaderboard/runs/scale] [--variants a,b] [--datasets nq,...]

Every run folder under ``RESULTS`` (``summary.json`` beside ``predictions.jsonl``) whose records carry ``tokens``
(``harness.lm.meter``) adds one line per question to ``<out>/tokens-<profile>-<generator>.jsonl.gz``: ``profile``,
``generator``, ``variant``, ``dataset``, ``sample``, ``id``, ``batch``, ``tokens``, ``prompt_tokens``,
``completion_tokens``, ``compress_s``, ``generate_s`` (no question, passage or answer text). A run made at batch 1
gives each question's calls exactly; ``scripts/recount.sh`` makes the Table 2 rows so: a batch-8 pass that fills the
call cache, then a batch-1 pass that replays it (minutes), into a results root of their own, so that a
200-question recount never stands in for the published runs. ``--latency RECORDS PASS`` adds a latency pass's
timed questions (``tools.latency_pass``: exact per question, batch 1; the first repeat). A (variant, dataset) cell
recounted here replaces that cell's lines in an existing file; the file's other cells are kept, so that the datasets
can be recounted one at a time (``--fresh`` rewrites the file whole).
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

FIELDS = ("id", "batch", "tokens", "prompt_tokens", "completion_tokens", "compress_s", "generate_s")


def runs(results: Path) -> list[Path]:
    return sorted(p.parent for p in results.rglob("summary.json") if (p.parent / "predictions.jsonl").is_file())


def lines_of(folder: Path) -> list[dict[str, Any]]:
    """One line per counted record of a run folder (none where its records predate token accounting)."""
    s = json.loads((folder / "summary.json").read_text())
    head = {k: s.get(k) for k in ("profile", "generator", "dataset", "sample")}
    out = []
    for x in (folder / "predictions.jsonl").read_text().splitlines():
        r = json.loads(x) if x.strip() else {}
        if "tokens" in r and "error" not in r:
            out.append({**head, "variant": s["method"], **{k: r.get(k) for k in FIELDS}})
    return out


def latency_lines(records: Path, passes: Path) -> list[dict[str, Any]]:
    """One line per question of a latency pass's per-question records (``tools.latency_pass``; the first repeat),
    its profile and generator read from the pass's own rows (``passes``, the ``latency-pass-*.jsonl`` beside it)."""
    block = {(r["variant"], r["dataset"]): r for r in map(json.loads, passes.read_text().splitlines()) if r}
    out = []
    for r in map(json.loads, [x for x in records.read_text().splitlines() if x.strip()]):
        row = block.get((r["variant"], r["dataset"]))
        if row is None or r.get("repeat", 0) != 0:
            continue
        head = {"profile": row["profile"], "generator": row["generator"], "dataset": r["dataset"]}
        sample = {"sample": row.get("sample"), "batch": 1, "from": f"latency pass {row.get('pass_id')}"}
        out.append({**head, **sample, "variant": r["variant"], **{k: r.get(k) for k in FIELDS if k in r}})
    return out


def kept_lines(path: Path, recounted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines of an existing tokens file whose (variant, dataset) cell is not among ``recounted``'s."""
    if not path.is_file():
        return []
    cells = {(x["variant"], x["dataset"]) for x in recounted}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        old = [json.loads(x) for x in f if x.strip()]
    return [x for x in old if (x["variant"], x["dataset"]) not in cells]


def recount(
    results: Path | None,
    out: Path,
    variants: Sequence[str] | None = None,
    datasets: Sequence[str] | None = None,
    latency: Sequence[tuple[Path, Path]] = (),
    fresh: bool = False,
) -> list[Path]:
    """Write one tokens file per (profile, generator) found in the run folders under ``results`` and the latency
    passes' (records, pass) files, keeping an existing file's other cells unless ``fresh``; returns the files
    written."""
    by_block: dict[tuple[str, str], list[dict[str, Any]]] = {}
    found = [x for folder in (runs(results) if results else []) for x in lines_of(folder)]
    found += [x for records, passes in latency for x in latency_lines(records, passes)]
    seen: set[tuple[str, ...]] = set()
    for line in found:  # a question counted twice (a run and a pass) is kept once, the run's
        key = (line["profile"], line["generator"], line["variant"], line["dataset"], str(line["id"]))
        if (
            key in seen
            or (variants and line["variant"] not in variants)
            or (datasets and line["dataset"] not in datasets)
        ):
            continue
        seen.add(key)
        by_block.setdefault((line["profile"], line["generator"]), []).append(line)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for (profile, generator), lines in by_block.items():
        path = out / f"tokens-{profile}-{generator}.jsonl.gz"
        lines = ([] if fresh else kept_lines(path, lines)) + lines
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.writelines(json.dumps(x) + "\n" for x in lines)
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.recount", description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, nargs="?", help="a results root of run folders")
    ap.add_argument(
        "--latency",
        nargs=2,
        action="append",
        type=Path,
        default=[],
        metavar=("RECORDS", "PASS"),
        help="a latency pass's latency-records-*.jsonl and its latency-pass-*.jsonl (first repeat)",
    )
    ap.add_argument("--out", type=Path, default=Path("leaderboard/runs/scale"))
    ap.add_argument("--variants")
    ap.add_argument("--datasets")
    ap.add_argument("--fresh", action="store_true", help="rewrite the file whole, keeping none of its cells")
    a = ap.parse_args(argv)
    split = lambda s: s.split(",") if s else None  # noqa: E731
    for path in recount(a.results, a.out, split(a.variants), split(a.datasets), [tuple(x) for x in a.latency], a.fresh):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
