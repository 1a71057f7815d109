"""The cost model against a latency pass: each timed question's predicted batch-1 seconds beside its measured ones.

    .venv/bin/python -m tools.cost_check RECORDS [RECORDS ...] --table leaderboard/data/devices/cpu-<kind>.json
        [--out FILE.json]

``RECORDS`` are the per-question files a latency pass writes (``tools.latency_pass``: ``latency-records-*.jsonl``,
each question's ``compress_s``, ``generate_s`` and per-call ``tokens``); ``--table`` a device table measured on the
same machine in the same session (``benchmarks.device_table``): timings from different machines never meet. Every
call is costed on the shape of the model that made it (``AS_RAN``: the embedded models' own shapes), the generation
on the generator's. Per variant and dataset it prints the median and the largest relative error of the predicted
total (compression + generation), and of each stage, and says which stage misses most. ``--out`` writes the same
figures as JSON (what the leaderboard's "At the readers' scale" view states under it).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from leaderboard.costmodel import DeviceTable, Scenario, predict_record

# the embedded models, by reference, and the device table's shape of each (benchmarks.device_table's names)
AS_RAN = {
    "embedded:smollm2-135m-instruct": "smollm2_135m",
    # LongLLMLingua drives the torch model itself (transformers, eager): that engine's figures where the table has
    # them (``--merge`` adds a transformers table's shapes with this suffix)
    "embedded:smollm2-135m-instruct|module": "smollm2_135m_transformers",
    "embedded:gemma3-270m": "gemma3_270m",
    "embedded:qwen2.5-coder-0.5b-instruct": "qwen25_05b",
    "embedded:qwen2.5-coder-1.5b-instruct": "qwen25_15b",
    "embedded:all-minilm-l6-v2": "minilm_l6",
}
READER_SHAPE = "smollm2_135m"


def scenario(table: DeviceTable, reader: str = READER_SHAPE) -> Scenario:
    """Every call on its own model's shape (of those the table holds); the generator's on the reader's."""
    held = set(table.shapes)
    return Scenario(
        reader=reader,
        compressors={},
        default={"lm": reader, "module": "minilm_l6"},
        column="eager",
        models={k: v for k, v in AS_RAN.items() if v in held},
    )


def merged(path: Path, other: Path | None) -> DeviceTable:
    """The table at ``path``, with ``other``'s decoders added as ``<shape>_<engine>`` (same machine, same
    session)."""
    data = json.loads(path.read_text())
    if other is not None:
        more = json.loads(other.read_text())
        engine = more.get("meta", {}).get("engine", "other")
        for shape, entry in more.get("decoders", {}).items():
            data["decoders"][f"{shape}_{engine}"] = entry
    return DeviceTable(data, name=path.stem)


def read_records(paths: Sequence[Path]) -> list[dict[str, Any]]:
    return [json.loads(x) for p in paths for x in p.read_text().splitlines() if x.strip()]


def rel(predicted: float, measured: float) -> float | None:
    return None if measured <= 0 else predicted / measured - 1


def per_question(records: Sequence[dict[str, Any]], table: DeviceTable, sc: Scenario) -> list[dict[str, Any]]:
    """Each record's predicted and measured seconds, total and per stage."""
    out = []
    for r in records:
        p = predict_record(r, r["variant"], table, sc)
        comp, gen = p["stages"]["compress"]["s"], p["stages"]["generate"]["s"]
        out.append(
            {
                "variant": r["variant"],
                "dataset": r["dataset"],
                "id": r["id"],
                "repeat": r.get("repeat"),
                "predicted_compress_s": comp,
                "predicted_generate_s": gen,
                "predicted_total_s": comp + gen,
                "compress_s": r["compress_s"],
                "generate_s": r["generate_s"],
                "total_s": r["compress_s"] + r["generate_s"],
                "exact": p["exact"],
            }
        )
    return out


def _stats(errors: list[float]) -> dict[str, float | None]:
    if not errors:
        return {"median_error": None, "largest_error": None}
    return {"median_error": statistics.median(errors), "largest_error": max(errors, key=abs)}


def summary(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (variant, dataset): n, median and largest relative error of the total, and of each stage where it
    took time, with the mean predicted and measured seconds."""
    keys = list(dict.fromkeys((r["variant"], r["dataset"]) for r in rows))
    out = []
    for variant, dataset in keys:
        rs = [r for r in rows if (r["variant"], r["dataset"]) == (variant, dataset)]
        row: dict[str, Any] = {"variant": variant, "dataset": dataset, "n": len(rs)}
        for part in ("total", "compress", "generate"):
            errs = [e for r in rs if (e := rel(r[f"predicted_{part}_s"], r[f"{part}_s"])) is not None]
            if part == "compress" and statistics.fmean(r["compress_s"] for r in rs) < 0.01:
                errs = []  # no compression to speak of (a few milliseconds of Python): nothing to model
            row[part] = {
                **_stats(errs),
                "predicted_s": statistics.fmean(r[f"predicted_{part}_s"] for r in rs),
                "measured_s": statistics.fmean(r[f"{part}_s"] for r in rs),
            }
        out.append(row)
    return out


def overall(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The median and largest error of the total over every question, and the rows over 30 % at the median."""
    errs = [e for r in rows if (e := rel(r["predicted_total_s"], r["total_s"])) is not None]
    return {"n": len(errs), **_stats(errs)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.cost_check", description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="+", type=Path)
    ap.add_argument("--table", type=Path, required=True)
    ap.add_argument("--out", type=Path)
    ap.add_argument(
        "--merge",
        type=Path,
        help="a second table of the same machine (another engine): its decoders join as <shape>_<engine>",
    )
    a = ap.parse_args(argv)
    table = merged(a.table, a.merge)
    rows = per_question(read_records(a.records), table, scenario(table))
    found = summary(rows)
    pct = lambda x: "-" if x is None else f"{x:+.0%}"  # noqa: E731
    for r in found:
        t, c, g = r["total"], r["compress"], r["generate"]
        print(
            f"{r['dataset']:9} {r['variant']:32} n {r['n']:3}  total {t['predicted_s']:.3f}/{t['measured_s']:.3f} s "
            f"median {pct(t['median_error'])} largest {pct(t['largest_error'])}  compress {pct(c['median_error'])}"
            f"  generate {pct(g['median_error'])}"
        )
    every = overall(rows)
    print(
        f"all {every['n']} questions: median error {pct(every['median_error'])}, largest {pct(every['largest_error'])}"
    )
    if a.out:
        meta = {"table": str(a.table), "records": [str(p) for p in a.records], "device": table.meta}
        a.out.write_text(json.dumps({"meta": meta, "overall": every, "rows": found}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
