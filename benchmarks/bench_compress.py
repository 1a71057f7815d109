"""pytest-benchmark of the compression step of every method variant in ``conf/method/`` (embedded).

Not collected by the default test run (``testpaths = ["tests"]``) and never asserted in CI: this machine is
shared and noisy, so the figures are reported, not gated. Each variant is built from its Hydra config and
bound to the shared embedded generator exactly as the run loop does (models load in ``bind()``, outside the
timing), then ``compress_batch`` is timed on the first ``BENCH_N`` NQ examples at once ("batched") and on
one example ("batch1"). ``extra_info`` holds seconds per example and the achieved compression ratio.

Break-even: the shared generator is also timed answering the same examples with the full context and with each
method's compressed context (same batch shape). ``break_even`` = compression seconds / generation seconds saved
per example: below 1 the compression pays for itself in wall time. The run ends by printing a table of these
figures per method and mode (``benchmarks/conftest.py``).

    # run and save (to .benchmarks/), then compare a later run with the saved one
    .venv/bin/python -m pytest benchmarks/bench_compress.py --benchmark-enable --benchmark-autosave
    .venv/bin/python -m pytest benchmarks/bench_compress.py --benchmark-enable --benchmark-compare \
        --benchmark-compare-fail=mean:25%
    .venv/bin/python -m pytest_benchmark compare --group-by=param:method --columns=min,mean,stddev,rounds

Environment: ``BENCH_METHODS=full,bm25`` (default: every variant), ``BENCH_N`` (8), ``BENCH_ROUNDS`` (3),
``BENCH_DATASET`` (nq).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
ALL = sorted(p.stem for p in (REPO / "conf" / "method").glob("*.yaml"))
CHOSEN = [m for m in os.environ.get("BENCH_METHODS", ",".join(ALL)).split(",") if m]
N, ROUNDS = int(os.environ.get("BENCH_N", "8")), int(os.environ.get("BENCH_ROUNDS", "3"))
DATASET = os.environ.get("BENCH_DATASET", "nq")


def _cfg(method: str):
    from harness.config import compose_config

    return compose_config("config", [f"method={method}", f"dataset={DATASET}", f"limit={N}"])


@pytest.fixture(scope="module")
def setup():
    """The examples and the shared generator, built once."""
    from harness.data import DatasetSpec, load_dataset
    from harness.runner import get_generator

    cfg = _cfg("full")
    d = cfg.dataset
    examples = load_dataset(DatasetSpec(d.name, d.path, int(d.top_k), d.rank, N))
    gen = get_generator(cfg.generator)
    gen = gen[0] if isinstance(gen, tuple) else gen  # the run loop's helper returns (generator, fresh)
    full = {mode: [[p.render() for p in e.passages] for e in _batch(examples, mode)] for mode in MODES}
    gen_full = {mode: _generate_s(gen, _batch(examples, mode), full[mode]) for mode in MODES}
    return examples, gen, gen_full


MODES = ("batched", "batch1")


def _batch(examples, mode: str):
    return examples if mode == "batched" else examples[:1]


def _generate_s(gen, examples, documents) -> float:
    """Seconds per example the shared generator takes to answer ``examples`` with ``documents``, as one batch
    (the mean of ``ROUNDS`` timings after one warm-up call)."""
    msgs = [gen.messages(e.question, d) for e, d in zip(examples, documents, strict=True)]  # its prompt, fitted
    gen.generate(msgs)
    times = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        gen.generate(msgs)
        times.append(time.perf_counter() - t0)
    return sum(times) / len(times) / len(examples)


def _method(name: str, gen):
    from harness.protocols import MethodEnv
    from harness.runner import build_method

    m = build_method(_cfg(name).method)
    m.bind(MethodEnv(count_tokens=gen.count_tokens, generator=gen))
    return m


def _cr(examples, comps, gen) -> float | None:
    from harness.prompt import render_documents

    orig = sum(gen.count_tokens(render_documents([p.render() for p in e.passages])) for e in examples)
    comp = sum(gen.count_tokens(render_documents(c.documents)) for c in comps)
    return orig / comp if comp else None


@pytest.mark.parametrize("method", CHOSEN)
@pytest.mark.parametrize("mode", MODES)
def test_compress(benchmark, setup, method, mode):
    examples, gen, gen_full = setup
    batch = _batch(examples, mode)
    compressor = _method(method, gen)
    benchmark.group = f"compress-{mode}"
    out = benchmark.pedantic(compressor.compress_batch, args=(batch,), rounds=ROUNDS, warmup_rounds=1, iterations=1)
    assert len(out) == len(batch)
    benchmark.extra_info.update({"examples": len(batch), "dataset": DATASET, "cr": _cr(batch, out, gen)})
    if not benchmark.stats:  # None under --benchmark-disable (the function then runs once, untimed)
        return
    compress_s = benchmark.stats.stats.mean / len(batch)
    gen_s = _generate_s(gen, batch, [c.documents for c in out])
    saved = gen_full[mode] - gen_s
    row = {
        "method": method,
        "mode": mode,
        "s_per_example": compress_s,
        "generate_full_s": gen_full[mode],
        "generate_compressed_s": gen_s,
        "generation_saved_s": saved,
        "break_even": compress_s / saved if saved > 0 else None,
    }
    benchmark.extra_info.update(row)
    BREAK_EVEN.append({**row, "cr": benchmark.extra_info["cr"]})


BREAK_EVEN: list[dict] = []  # rows printed by benchmarks/conftest.py at the end of the run
