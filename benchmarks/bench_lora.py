"""LoRA SFT speed, fp32 against bf16 autocast, on CompSelect's extractor examples (real NQ train questions).

``python -m benchmarks.bench_lora [--n 8] [--steps 3] [--grad-accum 4] [--lm REF]``: builds the extractor's training
examples (Table 9 prompt over the passages, answer sentences as target, 1,024-token inputs) from the first NQ
train questions that have an answer sentence, then runs the same optimizer steps of ``harness.lm.lora.train_lora``
once per compute dtype in this process, and prints seconds per step, tokens per second, the ratio, the step
losses (bf16 should track fp32) and the CPU's flags. The first step of each is a warm-up and not timed. ``--lm``
times another backbone (``embedded:qwen2.5-coder-0.5b-instruct``: issue 94's step time), its own tokenizer and chat
template making the examples.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

SMOLLM2 = "embedded:smollm2-135m-instruct"


def examples(n: int, max_input_tokens: int, ref: str = SMOLLM2):
    from harness.data import DatasetSpec, load_dataset
    from methods.compselect.method import extractor_input
    from methods.compselect.prompts import sentence_lines
    from methods.compselect.train_labels import answer_sentences
    from methods.compselect.train_lm import LoraLM
    from methods.compselect.train_sft import make_example

    root = Path(os.environ.get("RAG_HARNESS_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    data = load_dataset(DatasetSpec("nq", str(root / "nq" / "train.jsonl.gz"), 5, "none", None))
    lm = LoraLM(ref, {}, "float32", "cpu")
    out = []
    for e in data:
        x = extractor_input(lm, e, max_input_tokens)
        shown = x.sentences[: x.shown]
        target = [shown[i] for i in answer_sentences(shown, e.answers)]
        if target:
            out.append(make_example(lm, x.messages, sentence_lines(target)))
        if len(out) == n:
            break
    return lm, out


def main() -> None:
    import torch

    from harness.lm.lora import train_lora
    from harness.provenance import hardware

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=16, help="training examples")
    ap.add_argument("--steps", type=int, default=3, help="timed optimizer steps (after one warm-up step)")
    ap.add_argument("--grad-accum", type=int, default=4)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--lm", default=SMOLLM2, help="the backbone (a model reference)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    lm, train = examples(args.n, 1024, args.lm)
    tokens = sum(len(e.prompt) + len(e.target) for e in train) / len(train)
    rows = []
    for dtype in (None, "bfloat16"):
        seen: list[float] = []

        def tick(step: int, seen=seen) -> None:
            seen.append(time.perf_counter())

        modules = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        _, rep = train_lora(
            lm.base,
            train,
            [],
            r=8,
            alpha=16,
            dropout=0.0,
            target_modules=modules,
            lr=5e-4,
            epochs=100,
            grad_accum=args.grad_accum,
            warmup_ratio=0.1,
            seed=0,
            max_steps=args.steps + 1,
            on_step=tick,
            compute_dtype=dtype,
        )
        s_step = (seen[-1] - seen[0]) / args.steps
        rows.append(
            {
                "compute_dtype": dtype or "float32",
                "s_per_step": round(s_step, 2),
                "tokens_per_s": round(args.grad_accum * tokens / s_step, 1),
                "step_losses": rep["step_losses"],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    print(
        json.dumps(
            {
                "lm": args.lm,
                "examples": len(train),
                "mean_tokens": round(tokens, 1),
                "grad_accum": args.grad_accum,
                "threads": args.threads,
                "bf16_speedup": round(rows[0]["s_per_step"] / rows[1]["s_per_step"], 2),
                "cpu": hardware(),
            }
        )
    )


if __name__ == "__main__":
    main()
