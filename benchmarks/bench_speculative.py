"""Prompt-lookup speculative decoding on and off, stage by stage: seconds per question, the ratio, accepted tokens.

    .venv/bin/python -m benchmarks.bench_speculative [--n 20] [--dataset nq] [--batch 8] [--methods ...] [--out F]

For the shared generator (full top-5 context) and every method with a generating stage (CompSelect: extractor,
reranker, truncator; FineFilter: the same with its index truncator; RECOMP-abs, Refiner, EDC2), on the same first N
questions, in one process on one machine, fp32 as published: each question is compressed (the generator: answered)
at batch 1 with speculation off and then on, alternately, every engine's prefix cache emptied before each and the
call cache bypassed (the latency protocol); then the same in batches of ``--batch`` (the accuracy pass). Off and on
are separate engines (the LM key holds the setting), so neither warms the other. Printed per stage and batch size:
seconds per question off / on and their ratio, the accepted share of proposed tokens and the mean accepted per
proposal (vLLM's counters, pooled over a method's engines), and whether every output is identical (documents and
intermediate outputs; the generator's tokens). The CPU and its flags head the table; rows go to ``--out`` (JSON
lines) as they come. Quote ratios from one invocation: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness.config import compose_config
from harness.data import DatasetSpec, load_dataset
from harness.lm import cache, forget_prefixes, hardware, live, release, speculative
from harness.protocols import MethodEnv
from harness.runner import build_method, get_generator
from harness.types import Example

METHODS = ("generator", "compselect", "finefilter", "recomp_abs", "refiner", "edc2")
Run = Callable[[Sequence[Example]], tuple[list[Any], dict[str, float]]]


def header() -> str:
    from harness.provenance import hardware as machine

    hw = hardware.describe()
    return (
        f"# {machine().get('cpu')} | {hw['cores']} cores | flags: {' '.join(hw['cpu_flags'])} | "
        f"native bf16: {hw['native_bf16']}"
    )


def counts() -> dict[str, float]:
    """Speculation counters summed over every live LM (vLLM only)."""
    out: dict[str, float] = {}
    for lm in live():
        for k, v in lm.speculation_counts().items():
            out[k] = out.get(k, 0.0) + v
    return out


def method_runner(cfg, generator) -> Run:
    m = build_method(cfg.method)
    m.bind(MethodEnv(count_tokens=generator.count_tokens, generator=generator))

    def run(batch: Sequence[Example]) -> tuple[list[Any], dict[str, float]]:
        comps = m.compress_batch(list(batch))
        keep = lambda meta: {k: v for k, v in meta.items() if "second" not in k}  # noqa: E731
        return [(c.documents, keep(c.meta)) for c in comps], dict(comps[0].timings)

    return run


def generator_runner(generator) -> Run:
    def run(batch: Sequence[Example]) -> tuple[list[Any], dict[str, float]]:
        prompts = [generator.messages(e.question, [p.render() for p in e.passages]) for e in batch]
        return [g.text for g in generator.generate(prompts)], {}

    return run


def timed(run: Run, batches: Sequence[Sequence[Example]]) -> tuple[list[Any], float, dict[str, float]]:
    """Outputs, seconds and per-stage seconds over ``batches``, each as if unseen."""
    outs, spent, stages = [], 0.0, {}
    for b in batches:
        forget_prefixes()
        t0 = time.perf_counter()
        got, timings = run(b)
        spent += time.perf_counter() - t0
        outs += got
        for k, v in timings.items():
            stages[k] = stages.get(k, 0.0) + v * len(b)
    return outs, spent, stages


def build(name: str, setting: Any) -> Run:
    """A runner of ``name`` whose LMs (the generator's included) speculate per ``setting`` (a method may start its
    LMs at its first call: the setting is configured before each)."""
    cfg = compose_config(overrides=[f"method={'full' if name == 'generator' else name}"])
    speculative.configure(setting)
    cfg.generator.speculative = setting
    generator, _ = get_generator(cfg.generator)
    inner = generator_runner(generator) if name == "generator" else method_runner(cfg, generator)

    def run(batch: Sequence[Example]) -> tuple[list[Any], dict[str, float]]:
        speculative.configure(setting)
        return inner(batch)

    return run


def bench(name: str, examples: list[Example], batch: int, spec: dict[str, Any]) -> list[dict[str, Any]]:
    runners = {"off": build(name, None), "on": build(name, spec)}
    rows = []
    for size in (1, batch):
        batches = [examples[i : i + size] for i in range(0, len(examples), size)]
        timed(runners["off"], batches[:1])  # warm-up: engines started, kernels built
        timed(runners["on"], batches[:1])
        res: dict[str, tuple] = {"off": ([], 0.0, {}), "on": ([], 0.0, {})}
        before = counts()
        for b in batches:  # off and on alternately, so that drift hits both
            for mode in ("off", "on"):
                o, s, st = timed(runners[mode], [b])
                prev = res[mode]
                merged = {k: prev[2].get(k, 0.0) + v for k, v in st.items()}
                res[mode] = (prev[0] + o, prev[1] + s, merged)
        after = counts()
        d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
        n = len(examples)
        row = {
            "stage": name,
            "batch": size,
            "n": n,
            "off_s": res["off"][1] / n,
            "on_s": res["on"][1] / n,
            "ratio": res["off"][1] / res["on"][1] if res["on"][1] else None,
            "accepted_share": d["accepted_tokens"] / d["draft_tokens"] if d.get("draft_tokens") else None,
            "accepted_per_draft": d["accepted_tokens"] / d["drafts"] if d.get("drafts") else None,
            "identical": res["off"][0] == res["on"][0],
            "stages_off": {k: v / n for k, v in res["off"][2].items()},
            "stages_on": {k: v / n for k, v in res["on"][2].items()},
        }
        rows.append(row)
    release()
    return rows


def show(row: dict[str, Any]) -> str:
    def f(x: Any, spec: str = ".2f") -> str:
        return "-" if x is None else format(x, spec)

    stages = " ".join(f"{k} {row['stages_off'][k]:.2f}->{row['stages_on'].get(k, 0):.2f}" for k in row["stages_off"])
    return (
        f"{row['stage']:12} b{row['batch']:<3} {f(row['off_s'], '8.2f')} {f(row['on_s'], '8.2f')} "
        f"{f(row['ratio'], '6.2f')}x {f(row['accepted_share'], '7.2f')} {f(row['accepted_per_draft'], '6.2f')} "
        f"{'yes' if row['identical'] else 'NO':9} {stages}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--dataset", default="nq")
    ap.add_argument("--batch", type=int, default=8, help="the accuracy pass's batch (batch_size)")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    cfg = compose_config(overrides=[f"dataset={a.dataset}", f"limit={a.n}"])
    d = cfg.dataset
    examples = load_dataset(DatasetSpec(d.name, d.path, int(d.top_k), d.rank, a.n))
    spec = dict(cfg.models.speculative)
    print(header())
    print(f"# {a.dataset} first {a.n}, fp32, speculation {spec}")
    print(f"{'stage':12} {'batch':4} {'off s/q':>8} {'on s/q':>8} {'ratio':>7} {'accept':>7} {'/draft':>6} identical")
    with cache.bypassed():
        for name in a.methods.split(","):
            for row in bench(name, examples, a.batch, spec):
                print(show(row), flush=True)
                if a.out:
                    with a.out.open("a") as f:
                        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
