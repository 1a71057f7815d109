"""One command from a method to its published row: run it, time it beside ``full``, archive, publish, compare.

    .venv/bin/python -m tools.add_row VARIANT [--limit 200] [--datasets nq,triviaqa,hotpotqa] [--results DIR]
        [--runs leaderboard/runs] [--out leaderboard/snapshot] [--latency-n 20] [--repeats 2] [--warmup 2]
        [--resamples 1000] [HYDRA_OVERRIDE ...]

1. **run**: ``VARIANT`` (``conf/method/VARIANT.yaml``) on the snapshot's sample of each dataset
   (``scripts/snapshot.sh``: the first ``--limit`` questions of ``dataset.sample=shuffled dataset.seed=0``) in one
   process, into ``--results`` (default ``results/add_row/VARIANT``). Resumable: a re-run skips the examples its
   run folders hold.
2. **time**: a latency pass of ``VARIANT`` and ``full`` on this machine (``tools.latency_pass``: the first
   ``--latency-n`` questions of the same sample, ``--repeats`` passes, interleaved), a dataset at a time, into
   ``<results>/latency/latency-pass-add-VARIANT.jsonl``; a dataset that file holds already is not timed again
   (delete it to re-time).
3. **publish**: the runs under ``--results`` archived into ``--runs`` (``leaderboard.archive``: a newer run replaces
   the archived one of its key), the latency file copied into ``<runs>/latency/``, and ``<runs>`` published into
   ``--out``. The side-by-side latency table then holds the row from its own pass, against that pass's ``full``,
   beside the rows of the whole-dataset passes (``leaderboard.passes``).
4. **compare**: ``VARIANT`` against every Table 2 row (the variants of ``leaderboard/data/methods.yaml``) on each
   dataset, paired on the questions both ran: wins, losses, ties and the SubEM difference with its 95% paired
   bootstrap interval (``python -m leaderboard compare`` shows one pair question by question).

Overrides after the options go to the runs and the latency pass alike: ``hydra.searchpath=[file:///abs/dir]`` for
a method kept outside the repository (its YAML under ``/abs/dir/method/``, its module importable), or
``latency.samples=0``. An override of the method's knobs (``method.k=2``) is refused: the run would be published
under another name than the latency row; give such a variant its own YAML. This tool runs models; the
leaderboard never does.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from harness.provenance import REPO_ROOT
from harness.records import read_jsonl
from tools.latency_pass import DATASETS, PREFIX, SAMPLE

SNAPSHOT_N = 200  # the questions of each dataset every variant of the snapshot runs (scripts/snapshot.sh: limit=200)


def block_of(variant: str, overrides: Sequence[str]) -> tuple[str, str]:
    """The (profile, generator) block the variant's runs go to; one line if no config names the variant."""
    from hydra.errors import HydraException

    from harness.config import compose_config

    try:
        cfg = compose_config(overrides=[f"method={variant}", *SAMPLE, *overrides])
    except HydraException as e:
        raise SystemExit(f"error: method={variant}: {str(e).splitlines()[0]}") from None
    return str(cfg.profile.name), str(cfg.generator.name)


def run(variant: str, datasets: Sequence[str], limit: int | None, results: Path, overrides: Sequence[str]) -> None:
    """Step 1: the variant on each dataset's sample (resuming what its run folders hold)."""
    import harness

    for d in datasets:
        ev = harness.evaluate(variant, d, limit=limit, overrides=[*SAMPLE, *overrides], results_dir=str(results))
        s = ev.summary
        cr = f"{s['cr']:.2f}x" if s.get("cr") else "-"
        print(f"  {d}: n={s['n']} SubEM {s['subem']:.2f} CR {cr}  {ev.folder}", flush=True)


def timed(path: Path, variant: str, block: tuple[str, str], n: int, repeats: int) -> set[str]:
    """The datasets ``path`` holds a row of ``variant`` for, in this block, at these settings."""
    rows = read_jsonl(path) if path.is_file() else []
    return {
        r["dataset"]
        for r in rows
        if (r["profile"], r["generator"], r["variant"]) == (*block, variant) and r["n"] == n and r["repeats"] == repeats
    }


def time_variant(variant: str, datasets: Sequence[str], block: tuple[str, str], a: argparse.Namespace) -> Path:
    """Step 2: the latency pass of ``variant`` and ``full`` on the datasets not timed yet; returns its file."""
    from tools.latency_pass import latency_pass

    path = a.results / "latency" / f"{PREFIX}add-{variant}.jsonl"
    done = timed(path, variant, block, a.latency_n, a.repeats)
    todo = [d for d in datasets if d not in done]
    if done:
        print(f"  already timed in {path}: {', '.join(sorted(done))}")
    if todo:
        for r in latency_pass([variant], todo, a.latency_n, a.repeats, a.warmup, path, a.overrides):
            ratio = r["total_vs_full_ratio"]
            print(f"  {r['dataset']:9} {r['variant']:24} total {r['total_s']:.3f} s, {ratio or float('nan'):.2f}x full")
    return path


def publish_row(results: Path, latency_file: Path, runs: Path, out: Path, resamples: int) -> None:
    """Step 3: archive the runs and the latency file into ``runs``, publish ``runs`` into ``out``."""
    from leaderboard.archive import archive
    from leaderboard.publish import publish

    for folder in archive(results, runs):
        print(f"  archived {folder}")
    (runs / "latency").mkdir(parents=True, exist_ok=True)
    shutil.copy2(latency_file, runs / "latency" / latency_file.name)
    print(f"  latency pass -> {runs / 'latency' / latency_file.name}")
    publish(runs, out, resamples=resamples)
    print(f"  published {out / 'leaderboard.md'} and {out / 'index.html'}")


def table2_rows() -> list[str]:
    """The variants of Table 2's rows, in the papers' order (``leaderboard/data/methods.yaml``)."""
    from leaderboard.reference import method_map

    return [v for vs in method_map().values() for v in vs]


def comparisons(runs: Path, variant: str, block: tuple[str, str], datasets: Sequence[str]) -> Iterator[str]:
    """Step 4: one line per (dataset, Table 2 row), paired on the questions both ran (``leaderboard.compare``)."""
    from harness.stats import paired_bootstrap
    from leaderboard.compare import CompareError, compare
    from leaderboard.tables import label

    yield f"{variant} against the Table 2 rows ({block[0]} / {block[1]}), SubEM paired on the questions both ran:"
    for d in datasets:
        yield label(d)
        for row in (r for r in table2_rows() if r != variant):
            try:
                c = compare(runs / block[0] / block[1] / d, variant, row, d, block[1])
            except CompareError as e:
                yield f"  vs {row:18} {e}"
                continue
            t = paired_bootstrap([x["subem"] for x, _ in c.pairs], [y["subem"] for _, y in c.pairs])
            yield (
                f"  vs {row:18} {len(c.pairs):4} questions  W/L/T {c.wins}/{c.losses}/{c.ties}  "
                f"{t.delta:+.1f} [{t.lo:+.1f}, {t.hi:+.1f}] p={t.p:.3f}"
            )
    yield f"Question by question: python -m leaderboard compare {runs} {variant} ROW --dataset DATASET"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tools.add_row", description=__doc__.splitlines()[0])
    ap.add_argument("variant", help="the method variant (conf/method/VARIANT.yaml, or on hydra.searchpath)")
    ap.add_argument("--limit", type=int, default=SNAPSHOT_N, help=f"questions per dataset (default {SNAPSHOT_N})")
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--results", type=Path, help="results root of its runs (default results/add_row/VARIANT)")
    ap.add_argument("--runs", type=Path, default=REPO_ROOT / "leaderboard" / "runs", help="the archive")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "leaderboard" / "snapshot", help="the published folder")
    ap.add_argument("--latency-n", type=int, default=20, help="questions per dataset in the latency pass (20)")
    ap.add_argument("--repeats", type=int, default=2, help="latency pass repeats (default 2, at least 2)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed examples per variant first (default 2)")
    ap.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of the page (default 1000)")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides for the runs and the latency pass")
    return ap


def user_errors() -> tuple[type[Exception], ...]:
    """What ``python -m harness`` ends with one line (a bad setting or data, a failing example, a busy or other
    run folder), and Hydra's own (a target that does not import)."""
    from hydra.errors import HydraException

    from harness.__main__ import USER_ERRORS
    from harness.runner import ExampleError

    return (*USER_ERRORS, ExampleError, HydraException)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return add_row(parser().parse_intermixed_args(argv))
    except user_errors() as e:
        print("error: " + " ".join(str(e).splitlines()), file=sys.stderr)
        return 2


def add_row(a: argparse.Namespace) -> int:
    """The four steps (module docstring), each timed."""
    if bad := [o for o in a.overrides if o.lstrip("+~").startswith(("method.", "method="))]:
        raise SystemExit(f"error: {bad[0]}: give the variant its own YAML (conf/method/<name>.yaml), not an override")
    if a.repeats < 2:
        raise SystemExit("error: --repeats must be at least 2 (tools.latency_pass reports the spread over repeats)")
    a.results = a.results or Path("results") / "add_row" / a.variant
    datasets = a.datasets.split(",")
    block = block_of(a.variant, a.overrides)
    minutes: dict[str, float] = {}

    def step(name: str, t0: float) -> None:
        minutes[name] = (time.perf_counter() - t0) / 60
        print(f"[{name}] done in {minutes[name]:.1f} min", flush=True)

    print(f"[run] {a.variant} on {', '.join(datasets)}: {a.limit} questions each, {' '.join(SAMPLE)}", flush=True)
    t0 = time.perf_counter()
    run(a.variant, datasets, a.limit, a.results, a.overrides)
    step("run", t0)
    print(f"[time] latency pass of {a.variant} and full: {a.latency_n} questions x {a.repeats} repeats", flush=True)
    t0 = time.perf_counter()
    latency_file = time_variant(a.variant, datasets, block, a)
    step("time", t0)
    print(f"[publish] archive into {a.runs}, publish into {a.out}", flush=True)
    t0 = time.perf_counter()
    publish_row(a.results, latency_file, a.runs, a.out, a.resamples)
    step("publish", t0)
    t0 = time.perf_counter()
    for line in comparisons(a.runs, a.variant, block, datasets):
        print(line, flush=True)
    step("compare", t0)
    print("minutes per step: " + ", ".join(f"{k} {v:.1f}" for k, v in minutes.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
