"""Issue 83's device check: the cost model's batch-1 prediction beside the seconds the harness measured on an H200.

Reads the folders ``benchmarks/gpu_harness.py`` wrote (``gpu_harness.json``, ``records.jsonl``) and prints, per run
and method, the median and largest relative error of each record's predicted total (compress + generate) against
its measured seconds, under three tables: the H200 table of the papers' checkpoints
(``leaderboard/data/devices/h200.json``, eager decode: the transformers engine is Hugging Face ``generate``), the
same run's bare-forward table (``kernels``: prefill and one eager decode step of the shapes that ran) and the same
run's ``generate``-per-token column (a decode step plus ``generate``'s own work per token). Warm-up records are left
out. Then the ``diagnose`` run's plain ``generate`` loops beside the harness's records of the same moments.

    .venv/bin/python -m research.gpu_harness.compare [research/gpu_harness/h200-2026-12-04]
"""

from __future__ import annotations

import copy
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from leaderboard.costmodel import DEVICES, PAPER_COMPRESSORS, DeviceTable, Scenario, predict_record

HERE = Path(__file__).resolve().parent
# the shapes that ran: RECOMP-abs and CompSelect's extractor on the causal 3B shape, Selective-Context on GPT-2
RAN = {**PAPER_COMPRESSORS, "recomp_abs": {"lm": "llama32_3b", "module": "llama32_3b"}}
SCENARIO = Scenario(reader="llama3_8b", compressors=RAN, column="eager")


def tables(report: dict[str, Any]) -> dict[str, DeviceTable]:
    """The H200 table, and the same run's kernels in its place for the shapes that ran (bare step; generate)."""
    h200 = json.loads((DEVICES / "h200.json").read_text())
    out = {"H200 table (eager)": DeviceTable(h200, name="h200")}
    for label, column in (("same run, bare step", "decode_eager"), ("same run, generate", "decode_generate")):
        data = copy.deepcopy(h200)
        kernels = report.get("kernels") or {}
        if not kernels or not all(column in k for k in kernels.values()):
            continue
        for shape, k in kernels.items():
            data["decoders"][shape]["prefill"], data["decoders"][shape]["decode_eager"] = k["prefill"], k[column]
        out[label] = DeviceTable(data, name=label)
    return out


def errors(records: list[dict[str, Any]], table: DeviceTable) -> dict[str, list[float]]:
    """Per method, predicted total / measured total - 1 of each non-warm-up record."""
    out: dict[str, list[float]] = {}
    for r in records:
        if r.get("warmup") or "error" in r:
            continue
        p = predict_record(r, r["method"], table, SCENARIO)
        name = r["method"] + (f" ({r['tag']})" if r.get("tag") else "")
        out.setdefault(name, []).append(p["total_s"] / (r["compress_s"] + r["generate_s"]) - 1)
    return out


def report_run(folder: Path) -> None:
    report = json.loads((folder / "gpu_harness.json").read_text())
    records = [json.loads(x) for x in (folder / "records.jsonl").read_text().splitlines() if x.strip()]
    print(f"\n## {folder.name}\n\n| table | method | n | median error | largest error |\n|---|---|---|---|---|")
    for label, table in tables(report).items():
        for method, errs in errors(records, table).items():
            worst = max(errs, key=abs)
            print(f"| {label} | {method} | {len(errs)} | {statistics.median(errs):+.0%} | {worst:+.0%} |")
    for label, d in (report.get("diagnose") or {}).items():
        plain = [x["s"] for x in d["plain"]["runs"]]
        ran = [r["generate_s"] for r in records if r.get("tag") == label and not r.get("warmup")]
        print(
            f"\n{label} (threads {d['threads']}, gc {d['gc']}): the harness's full, generate median "
            f"{statistics.median(ran):.2f} s [{min(ran):.2f}, {max(ran):.2f}]; a plain generate beside it, median "
            f"{statistics.median(plain):.2f} s [{min(plain):.2f}, {max(plain):.2f}]"
        )


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "h200-2026-12-04"
    for folder in sorted(p for p in root.iterdir() if (p / "records.jsonl").is_file()):
        report_run(folder)


if __name__ == "__main__":
    main()
