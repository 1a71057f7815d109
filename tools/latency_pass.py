"""Latency side by side: every variant timed in one pass on one machine, on the same questions, ``full`` beside them.

    .venv/bin/python -m tools.latency_pass [--variants full,bm25,recomp_abs[backbone=qwen05b],...]
        [--datasets nq,triviaqa,hotpotqa] [--n 20] [--repeats 2] [--warmup 2] [--runs leaderboard/runs]
        [--out FILE] [HYDRA_OVERRIDE ...]

For each dataset, the first ``--n`` questions of the snapshot's sample (``dataset.sample=shuffled
dataset.seed=0``; Hydra overrides after the options change it or anything else) are answered by every variant
(default: every variant published under ``--runs`` for the composed generator) one example at a time, after
``--warmup`` untimed examples per variant, each as if unseen: the call cache bypassed, every engine's prefix cache
and the sentence-split memo emptied before each (the protocol of ``harness.runner.latency_pass``, whose
``process`` times them). The variants are interleaved question by question (each question starting one variant
further on), so drift on a shared machine hits every variant alike; ``full`` is always among them, the reference.
A variant named as the leaderboard names a run with its own overrides (``recomp_abs[backbone=qwen05b]``) is
composed with them.
The whole pass is repeated ``--repeats`` times (at least 2): every ratio to ``full`` is computed within a
repeat, then averaged, and the spread over the repeats is reported.

Output: JSON lines (``--out``, default ``results/latency/latency-pass-<time>.jsonl``), one row per (variant,
dataset): ``compress_s``, ``online_s`` (generation), ``total_s`` (means over the repeats, each a mean over the
questions), ``online_vs_full_ratio`` and ``total_vs_full_ratio``, the per-repeat values and their spread (max -
min), ``cpu`` (model name and whether bf16 is native: AMX / AVX512-BF16, or AVX2 only), ``threads``, every LM
the variant ran (``lms``: the generator's and its method's, with role, weights, engine and dtype), ``pass_id``
(one per invocation) and the code's commit. ``python -m leaderboard publish`` reads every
``latency-pass-*.jsonl`` under its results root (``leaderboard/runs/latency/`` for the snapshot), shows each
variant from the newest pass that timed it, and compares a row only with the ``full`` row of its own pass and CPU
(``leaderboard.passes``; ``python -m tools.add_row`` times one new variant beside ``full`` this way). A dataset's
rows are written as soon as it is timed, so ``--datasets nq`` and later ``--datasets triviaqa`` are two passes.
Beside it, ``latency-records-<time>.jsonl`` holds every timed question (variant, id, repeat, ``compress_s``,
``generate_s`` and the per-call ``tokens`` of ``harness.lm.meter``): what the cost model's check
(``tools.cost_check``) predicts from. This tool runs models; the leaderboard never does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import provenance
from harness.config import compose_config
from harness.data import DatasetSpec, load_dataset
from harness.lm import cache, forget_prefixes, hardware, speculative
from harness.protocols import Compressor, Generator, MethodEnv
from harness.runner import build_method, get_generator, process
from harness.text import forget_splits
from harness.types import Example
from leaderboard.passes import figures_vs_baseline

BASELINE = "full"
DATASETS = ("nq", "triviaqa", "hotpotqa")
SAMPLE = ("dataset.sample=shuffled", "dataset.seed=0")  # the snapshot's sample (scripts/snapshot.sh)
PREFIX = "latency-pass-"  # the file names the leaderboard reads
RECORDS_PREFIX = "latency-records-"  # each timed question: seconds and per-call tokens (the cost model's check)


def published_variants(runs: Path, profile: str, generator: str) -> tuple[list[str], str]:
    """The variants (no extra overrides) published under ``runs`` for this profile and generator; where it has
    none yet (a new generator, before its runs are published), those of the newest published block of the
    profile. Returns them and the generator whose block they came from."""
    from leaderboard.collect import collect
    from leaderboard.headline import newest_block
    from leaderboard.reference import variant_order

    df = collect(runs)
    df = df[(df.profile == profile) & ~df.variant.str.contains(r"\[", regex=True)]
    if not (df.generator == generator).any() and len(df):
        generator = newest_block(df)[1]
    return variant_order(list(df[df.generator == generator].variant.unique())), generator


@dataclass
class Setup:
    """One dataset's questions, the shared generator and every variant's bound method."""

    dataset: str
    examples: list[Example]
    generator: Generator
    methods: dict[str, Compressor]
    profile: str
    generator_name: str
    sample: str
    threads: int  # the model layer's thread count (``generator.threads``, OMP_NUM_THREADS or every core)


def split_variants(text: str) -> list[str]:
    """``--variants``, split on the commas outside brackets: ``full,edc2[backbone=qwen05b,x=1]`` is two."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [v for v in [*out, cur] if v]


def variant_overrides(variant: str) -> tuple[str, list[str]]:
    """A variant as the leaderboard names it (``method[override,...]``: the run's own overrides) -> (method, its
    overrides), so that ``recomp_abs[backbone=qwen05b]`` is timed with its compressors' backbone switched."""
    method, _, rest = variant.partition("[")
    return method, [o for o in rest.rstrip("]").split(",") if o]


def setup(dataset: str, variants: Sequence[str], n: int, overrides: Sequence[str]) -> Setup:
    """Compose every variant's config on ``dataset`` (the snapshot's sample, then ``overrides``, then the variant's
    own), build and bind its method to the one shared generator, and load the first ``n`` questions."""
    methods: dict[str, Compressor] = {}
    cfg = None
    for v in variants:
        method, own = variant_overrides(v)
        cfg = compose_config(overrides=[f"method={method}", f"dataset={dataset}", *SAMPLE, *overrides, *own])
        speculative.configure(cfg.models.get("speculative"))
        generator, _ = get_generator(cfg.generator)
        m = build_method(cfg.method)
        m.bind(MethodEnv(count_tokens=generator.count_tokens, generator=generator))
        methods[v] = m
    assert cfg is not None
    d = cfg.dataset
    sample, seed = str(d.get("sample", "first")), int(d.get("seed", 0))
    examples = load_dataset(DatasetSpec(d.name, d.path, int(d.top_k), d.rank, n, sample=sample, seed=seed))
    return Setup(
        dataset,
        examples,
        generator,
        methods,
        str(cfg.profile.name),
        str(cfg.generator.name),
        "first" if sample == "first" else f"{sample} seed {seed}",
        hardware.thread_count(cfg.generator.get("threads")),
    )


def time_one(method: Compressor, generator: Generator, example: Example) -> dict[str, Any] | None:
    """One example as if unseen: its record's ``compress_s``, ``generate_s`` and per-call ``tokens``
    (``harness.lm.meter``); None if it failed."""
    forget_prefixes()
    forget_splits()
    rows, _ = process([example], method, generator, on_error="skip")
    return None if "error" in rows[0] else {k: rows[0][k] for k in ("compress_s", "generate_s", "tokens")}


def time_pass(
    s: Setup, warmup: int, repeats: int, records: list[dict[str, Any]] | None = None
) -> dict[str, list[list[tuple[float, float]]]]:
    """Per variant, per repeat: the (compression, generation) seconds of every question, variants interleaved;
    each timed question's record (variant, id, repeat, seconds, tokens) appended to ``records`` when given."""
    names = list(s.methods)
    with cache.bypassed():
        for v in names:
            for e in s.examples[:warmup]:
                time_one(s.methods[v], s.generator, e)
        times: dict[str, list[list[tuple[float, float]]]] = {v: [[] for _ in range(repeats)] for v in names}
        for r in range(repeats):
            for i, e in enumerate(s.examples):
                k = (i + r) % len(names)
                for v in names[k:] + names[:k]:
                    t = time_one(s.methods[v], s.generator, e)
                    if t is None:
                        continue
                    times[v][r].append((t["compress_s"], t["generate_s"]))
                    if records is not None:
                        records.append({"variant": v, "dataset": s.dataset, "id": e.id, "repeat": r, **t})
                print(f"{s.dataset} repeat {r + 1}/{repeats}: question {i + 1}/{len(s.examples)}", flush=True)
    return times


def _mean(xs: Sequence[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _summary(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """Mean and spread (max - min) over the repeats; None if any repeat lacks the figure."""
    if not values or any(v is None for v in values):
        return None, None
    return statistics.fmean(values), max(values) - min(values)  # type: ignore[type-var, arg-type]


def lm_entries(info: Any, role: str) -> list[dict[str, Any]]:
    """Every LM in a ``describe()`` tree (a dict with ``engine`` and ``dtype``; its weights are its ``ref`` or its
    ``model``'s): its role, weights, engine, dtype."""
    if isinstance(info, dict):
        if "engine" in info and "dtype" in info:
            model = info.get("model")
            ref = info.get("ref") or (model.get("ref") if isinstance(model, dict) else None)
            return [{"role": role, "ref": ref, "engine": info["engine"], "dtype": info["dtype"]}]
        return [e for v in info.values() for e in lm_entries(v, role)]
    if isinstance(info, list | tuple):
        return [e for v in info for e in lm_entries(v, role)]
    return []


def variant_lms(method: Compressor, generator: Generator) -> list[dict[str, Any]]:
    """The LMs a variant ran, once each: the generator's and its method's own (``describe()``, after the pass)."""
    g = generator.describe()
    found = [{**e, "ref": e["ref"] or (g.get("model") or {}).get("ref")} for e in lm_entries(g.get("lm"), "generator")]
    found += lm_entries(method.describe(), "method")
    return [dict(t) for t in dict.fromkeys(tuple(e.items()) for e in found)]


def rows(s: Setup, times: dict[str, list[list[tuple[float, float]]]], common: dict[str, Any]) -> list[dict]:
    """One result row per variant: means, spreads, and the figures against ``full`` within each repeat
    (``leaderboard.passes.figures_vs_baseline``, the same the leaderboard recomputes)."""
    per: dict[str, dict[str, list[float | None]]] = {}
    for v, reps in times.items():
        comp = [_mean([c for c, _ in rep]) for rep in reps]
        online = [_mean([g for _, g in rep]) for rep in reps]
        total = [None if c is None or g is None else c + g for c, g in zip(comp, online, strict=True)]
        per[v] = {"compress": comp, "online": online, "total": total, "n": [len(rep) for rep in reps]}
    out = []
    for v, p in per.items():
        row = {
            **common,
            "profile": s.profile,
            "generator": s.generator_name,
            "dataset": s.dataset,
            "sample": s.sample,
            "variant": v,
            "baseline": BASELINE,
            "threads": s.threads,
            "n": min(p["n"]),
            "compress_s": _summary(p["compress"])[0],
            "online_s": _summary(p["online"])[0],
            "total_s": _summary(p["total"])[0],
            "online_s_spread": _summary(p["online"])[1],
            "total_s_spread": _summary(p["total"])[1],
            "compress_s_repeats": p["compress"],
            "online_s_repeats": p["online"],
            "total_s_repeats": p["total"],
            "lms": variant_lms(s.methods[v], s.generator),
        }
        out.append(row)
    base = next(r for r in out if r["variant"] == BASELINE)
    return [{**r, **figures_vs_baseline(r, base)} for r in out]


def latency_pass(
    variants: Sequence[str],
    datasets: Sequence[str],
    n: int,
    repeats: int,
    warmup: int,
    out: Path,
    overrides: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Time ``variants`` (``full`` added first if missing) on each dataset and append their rows to ``out``."""
    if repeats < 2:
        raise SystemExit("--repeats must be at least 2: the spread over repeated passes is part of the result")
    variants = [BASELINE, *[v for v in variants if v != BASELINE]]
    common = {
        "pass_id": f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}",
        "cpu": hardware.cpu_label(),
        "repeats": repeats,
        "warmup": warmup,
        "protocol": "batch1-interleaved",
        "commit": provenance.git_commit().get("commit"),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    import torch

    written = []
    for d in datasets:
        s = setup(d, variants, n, overrides)
        timed: list[dict[str, Any]] = []
        found = rows(s, time_pass(s, warmup, repeats, timed), {**common, "torch_threads": torch.get_num_threads()})
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        with out.open("a", encoding="utf-8") as f:
            for r in found:
                f.write(json.dumps({**r, "finished_at": stamp}) + "\n")
        with records_path(out).open("a", encoding="utf-8") as f:
            for t in timed:
                f.write(json.dumps({"pass_id": common["pass_id"], "cpu": common["cpu"], **t}) + "\n")
        written += found
    return written


def records_path(out: Path) -> Path:
    """Where a pass's per-question records go: beside ``out``, named so that the leaderboard's reading of pass
    files (``latency-pass-*.jsonl``) never takes them for one."""
    name = out.name[len(PREFIX) :] if out.name.startswith(PREFIX) else out.name
    return out.with_name(RECORDS_PREFIX + name)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.latency_pass", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--variants",
        help="comma-separated, each a method or method[override,...] (default: every variant published under --runs)",
    )
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--n", type=int, default=20, help="questions per dataset (default 20)")
    ap.add_argument("--repeats", type=int, default=2, help="passes over the whole sample (default 2, at least 2)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed examples per variant first (default 2)")
    ap.add_argument("--runs", type=Path, default=provenance.REPO_ROOT / "leaderboard" / "runs")
    ap.add_argument("--out", type=Path, help="JSON lines (default results/latency/latency-pass-<time>.jsonl)")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides for every variant (e.g. generator.threads=2)")
    a = ap.parse_args(argv)
    if a.variants:
        variants = split_variants(a.variants)
    else:
        cfg = compose_config(overrides=[*SAMPLE, *a.overrides])
        variants, block = published_variants(a.runs, str(cfg.profile.name), str(cfg.generator.name))
        if not variants:
            raise SystemExit(f"no variant of profile {cfg.profile.name} published under {a.runs}: --variants")
        if block != cfg.generator.name:
            print(f"{cfg.generator.name} has no published block yet: timing the variants of {block}'s")
    out = a.out or Path("results") / "latency" / f"{PREFIX}{time.strftime('%Y%m%dT%H%M%S')}.jsonl"
    found = latency_pass(variants, a.datasets.split(","), a.n, a.repeats, a.warmup, out, a.overrides)
    f = lambda x, spec=".3f": "-" if x is None else format(x, spec)  # noqa: E731
    for r in found:
        print(
            f"{r['dataset']:9} {r['variant']:32} total {f(r['total_s'])} s (spread {f(r['total_s_spread'])}), "
            f"{f(r['total_vs_full_ratio'], '.2f')}x full; online {f(r['online_vs_full_ratio'], '.2f')}x"
        )
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
