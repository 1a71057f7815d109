"""EXIT classifier training speed, fp32 against bf16 autocast (real NQ train questions, the embedded encoder).

``python -m benchmarks.bench_exit_classifier [--steps 6] [--batch 32]``: builds EXIT's training pairs (answer
sentences and balanced negatives, ``methods.exit.train_data.labelled_sentences``) from NQ train questions, then runs
the same optimizer steps of ``methods.exit.train_classifier.train_cross_encoder`` once per compute dtype in this
process, and prints seconds per step, the ratio, the step losses (bf16 should track fp32) and the CPU's flags.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path


def pairs(n: int) -> list:
    from harness.data import DatasetSpec, load_dataset
    from methods.exit.train_data import labelled_sentences

    root = Path(os.environ.get("RAG_HARNESS_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    data = load_dataset(DatasetSpec("nq", str(root / "nq" / "train.jsonl.gz"), 5, "none", None))
    rng = random.Random(0)
    out = [
        ((e.question, r["text"], r["context"]), r["label"]) for e in data for r in labelled_sentences(e, 3, 1, rng, 0.5)
    ]
    return out[:n]


def main() -> None:
    import torch

    from harness.lm.hardware import describe
    from methods.exit.train_classifier import train_cross_encoder

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=256)
    a = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    data = pairs(a.batch * (a.steps + 1))
    train, val = data[: a.batch * a.steps], data[a.batch * a.steps :][:4]
    rows = {}
    for dtype in (None, "bfloat16", None, "bfloat16"):  # twice each, interleaved: the machine is shared
        _, _, report = train_cross_encoder(
            "embedded:all-minilm-l6-v2",
            train,
            val,
            lora={"r": 16, "alpha": 32, "target_modules": ["query", "key", "value", "dense"]},
            lr=1e-3,
            epochs=1,
            batch_size=a.batch,
            warmup_ratio=0.06,
            max_length=a.max_length,
            seed=0,
            eval_every=10**9,
            progress=False,
            compute_dtype=dtype,
        )
        name = dtype or "float32"
        rows.setdefault(name, []).append(report["wall_s"] / report["steps"])
        rows[name + "_losses"] = report["step_losses"]
    best = {k: min(v) for k, v in rows.items() if not k.endswith("_losses")}
    print(
        json.dumps(
            {
                "cpu": describe(),
                "steps": a.steps,
                "batch": a.batch,
                "max_length": a.max_length,
                "s_per_step": best,
                "bf16_speedup": round(best["float32"] / best["bfloat16"], 2),
                "losses": {k: v for k, v in rows.items() if k.endswith("_losses")},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
