"""Prints generation throughput batched vs batch 1, and harness overhead, on the embedded generator.

    .venv/bin/python -m benchmarks.bench_generator [--n 16] [--batch 8] [--dataset nq] [--contexts full,top1,none]

Throughput: the same N prompts (the shared prompt) generated one at a time and in batches, for three context
sizes: the full top-5 passages (~800 tokens, what `full` sends), the first passage only (~170 tokens, about a
compressed context at CR 4-5x) and no context (`naive`); the ratio is batched / batch-1 examples per second.
On a CPU, batching pays where decoding dominates (short prompts) and not where the prompt's prefill does: the
prefill is compute-bound, so eight prompts cost eight times one. The prefill/decode split is printed too.
Overhead: one harness run of `bm25` over N examples; the ratio is the run's wall time (model loading
excluded) / the seconds spent inside compression and generation.
Figures from one invocation are comparable with each other; absolute numbers depend on the machine's load.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def prefill_seconds(gen, prompts) -> float:
    """Seconds of one forward pass over each prompt alone (the prefill share of batch-1 generation)."""
    import torch

    t = 0.0
    for p in prompts:
        ids = torch.tensor([gen._encode(p)])
        with torch.inference_mode():
            t0 = time.perf_counter()
            gen.model(input_ids=ids)
            t += time.perf_counter() - t0
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dataset", default="nq")
    ap.add_argument("--contexts", default="full,top1,none", help="comma list of full, top1, none")
    ap.add_argument("--generator", default="smollm2_transformers", help="the prefill split needs a torch model")
    args = ap.parse_args()

    from harness.config import compose_config
    from harness.data import DatasetSpec, load_dataset
    from harness.provenance import hardware
    from harness.runner import get_generator, run

    cfg = compose_config(
        "config",
        [
            f"dataset={args.dataset}",
            f"generator={args.generator}",
            "lm.cache=false",
            "method=bm25",
            f"limit={args.n}",
            f"batch_size={args.batch}",
            f"generator.batch_size={args.batch}",
            "progress=false",
        ],
    )
    from harness.lm import cache

    cache.configure(False)  # every call computes
    gen, _ = get_generator(cfg.generator)
    d = cfg.dataset
    exs = load_dataset(DatasetSpec(d.name, d.path, int(d.top_k), d.rank, args.n))
    print(f"hardware: {hardware()}")
    for kind in args.contexts.split(","):
        docs = {
            "full": lambda e: [p.render() for p in e.passages],
            "top1": lambda e: [p.render() for p in e.passages[:1]],
            "none": lambda e: [],
        }[kind]
        prompts = [gen.messages(e.question, docs(e)) for e in exs]  # the generator's own prompt, fitted
        gen.generate(prompts[:2])  # warm-up
        t0 = time.perf_counter()
        one = [gen.generate([p])[0] for p in prompts]
        t_one = time.perf_counter() - t0
        t0 = time.perf_counter()
        many = gen.generate(prompts)
        t_many = time.perf_counter() - t0
        same = sum(a.answer == b.answer for a, b in zip(one, many, strict=True))
        prompt_toks = sum(g.prompt_tokens for g in many) / len(many)
        t_prefill = prefill_seconds(gen, prompts)
        print(f"generation, {args.n} prompts of {args.dataset}, context {kind} (mean prompt {prompt_toks:.0f} tokens):")
        for label, t, gs in (("batch 1 ", t_one, one), (f"batch {args.batch:<2}", t_many, many)):
            toks = sum(g.completion_tokens for g in gs)
            print(f"  {label}: {t:7.2f} s  {args.n / t:6.2f} ex/s  {toks / t:7.1f} new tok/s")
        print(
            f"  batched / batch-1 throughput: {t_one / t_many:.2f}x  (identical answers: {same}/{args.n}); "
            f"prefill alone, one prompt at a time: {t_prefill:.2f} s = {t_prefill / t_one:.0%} of batch-1 time"
        )

    with tempfile.TemporaryDirectory() as tmp:
        s = run(cfg, tmp)
    r = s["run"]
    print(
        f"harness run (bm25, {args.n} examples, batch {args.batch}): wall {r['wall_s']:.2f} s, "
        f"model {r['model_s']:.2f} s, overhead {r['overhead']:.3f}"
    )


if __name__ == "__main__":
    main()
