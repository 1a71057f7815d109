"""Metric regression check: run a small fixed grid and compare it with a committed baseline.

``python -m tools.regress`` runs every (method, dataset) cell of ``regress/grid.yaml`` (greedy, embedded
profile, the first N examples) in one process, so the generator loads once, into a scratch results folder;
then compares each cell's per-example records with ``regress/baseline/<dataset>__<method>.jsonl`` and its
summary with ``regress/baseline/summary.json``. ``--update`` rewrites the baseline from the run instead.

Verdict, per cell and per method pooled over the datasets, for SubEM, EM and F1: the per-example differences
(current - baseline, on the same example ids) are resampled (paired bootstrap, 1000 resamples, seed 0);
a metric **fails** when its whole 95% interval lies below zero, i.e. when the drop is larger than the
bootstrap interval allows for the examples that changed. A run with no changed prediction has a zero-width
interval at 0 and passes. Changed predictions, contexts (token counts and a hash) and CRs are always reported;
``--strict`` also fails on any change. Exit status: 0 pass, 1 regression, 2 no usable baseline.

This module sits on top of the core: it runs the harness and judges records with the bootstrap statistics
(``harness.stats``); nothing in the run loop imports it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.lm.hardware import cpu_label
from harness.provenance import REPO_ROOT
from harness.records import PREDICTIONS, SUMMARY, read_jsonl, slim_record

METRICS = ("subem", "em", "f1")
KEEP = (
    "id",
    "question",
    "answers",
    "prediction",
    "subem",
    "em",
    "f1",
    "original_tokens",
    "compressed_tokens",
)


# ----------------------------------------------------------------------------------------------- records
def slim(record: dict[str, Any]) -> dict[str, Any]:
    """The part of a prediction record the baseline keeps: answer, scores, token counts, a context hash."""
    return {**{k: record.get(k) for k in KEEP}, **slim_record(record, KEEP)}


def cell_name(dataset: str, method: str) -> str:
    return f"{dataset}__{method}"


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows), "utf-8")


def cell_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    out: dict[str, Any] = {"n": n}
    for m in METRICS:
        out[m] = 100 * sum(r[m] for r in rows) / n if n else None
    comp = sum(r["compressed_tokens"] for r in rows)
    out["cr"] = sum(r["original_tokens"] for r in rows) / comp if comp else None
    return out


# ----------------------------------------------------------------------------------------------- compare
@dataclass
class Test:
    metric: str
    base: float
    now: float
    delta: float
    lo: float
    hi: float
    p: float

    @property
    def failed(self) -> bool:
        return self.hi < 0


@dataclass
class CellReport:
    name: str
    n: int
    tests: list[Test]
    changed: list[dict[str, Any]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    cr: tuple[float | None, float | None] = (None, None)

    @property
    def failed(self) -> bool:
        return any(t.failed for t in self.tests)

    @property
    def context_changes(self) -> int:
        return sum(1 for c in self.changed if c["context_changed"])


def _tests(base: Sequence[dict], now: Sequence[dict], resamples: int, seed: int, level: float) -> list[Test]:
    from harness.stats import paired_bootstrap

    tests = []
    for m in METRICS:
        a, b = [r[m] for r in now], [r[m] for r in base]
        t = paired_bootstrap(a, b, resamples, seed, level)
        n = max(len(a), 1)
        tests.append(Test(m, 100 * sum(b) / n, 100 * sum(a) / n, t.delta, t.lo, t.hi, t.p))
    return tests


def compare_cell(
    name: str,
    baseline: Sequence[dict],
    current: Sequence[dict],
    resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> CellReport:
    """Compare one cell on the example ids both hold; baseline ids the run lacks are listed as missing."""
    now = {r["id"]: r for r in current}
    pairs = [(b, now[b["id"]]) for b in baseline if b["id"] in now]
    missing = [b["id"] for b in baseline if b["id"] not in now]
    base_rows, now_rows = [b for b, _ in pairs], [c for _, c in pairs]
    changed = []
    for b, c in pairs:
        ctx = b.get("context_sha1") != c.get("context_sha1") or b.get("compressed_tokens") != c.get("compressed_tokens")
        if b["prediction"] != c["prediction"] or ctx:
            changed.append(
                {
                    "id": b["id"],
                    "question": b.get("question"),
                    "answers": b.get("answers"),
                    "was": b["prediction"],
                    "now": c["prediction"],
                    "context_changed": ctx,
                    "tokens": (b.get("compressed_tokens"), c.get("compressed_tokens")),
                    **{f"{m}": (b[m], c[m]) for m in METRICS},
                }
            )
    report = CellReport(name, len(pairs), _tests(base_rows, now_rows, resamples, seed, level), changed, missing)
    report.cr = (
        cell_summary(base_rows)["cr"] if pairs else None,
        cell_summary(now_rows)["cr"] if pairs else None,
    )
    return report


def pooled(
    cells: Sequence[tuple[str, Sequence[dict], Sequence[dict]]],
    name: str,
    resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> CellReport:
    """One test over several cells (a method over every dataset): ids are made unique per cell."""
    base, now = [], []
    for cname, b, c in cells:
        base += [{**r, "id": f"{cname}/{r['id']}"} for r in b]
        now += [{**r, "id": f"{cname}/{r['id']}"} for r in c]
    rep = compare_cell(name, base, now, resamples, seed, level)
    rep.changed, rep.missing = [], []  # listed per cell already
    return rep


@dataclass
class Report:
    cells: list[CellReport]
    pooled: list[CellReport]
    strict: bool = False

    @property
    def changed(self) -> int:
        return sum(len(c.changed) for c in self.cells)

    @property
    def failed(self) -> bool:
        return (
            any(c.failed or c.missing for c in self.cells)
            or any(p.failed for p in self.pooled)
            or (self.strict and self.changed > 0)
        )


def compare(
    baseline: dict[str, list[dict]],
    current: dict[str, list[dict]],
    resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    strict: bool = False,
) -> Report:
    """Compare every baseline cell (``<dataset>__<method>`` -> slim records) that the run has."""
    cells = [compare_cell(k, baseline[k], current.get(k, []), resamples, seed, level) for k in baseline]
    by_method: dict[str, list] = {}
    for k in baseline:
        by_method.setdefault(k.split("__", 1)[1], []).append((k, baseline[k], current.get(k, [])))
    pools = [pooled(v, f"{m} (all datasets)", resamples, seed, level) for m, v in by_method.items() if len(v) > 1]
    return Report(cells, pools, strict)


def _fmt(x: float | None, spec: str = "{:.2f}") -> str:
    return "-" if x is None else spec.format(x)


def format_report(report: Report, show: int = 10) -> str:
    """A readable report: one line per cell and pooled method, then every changed example of the cells."""
    lines = []
    head = (
        f"{'cell':38} {'n':>3}  {'SubEM base->now':>17}  {'EM base->now':>15}  {'F1 base->now':>15}  "
        f"{'CR base->now':>15} {'changed':>7}  verdict"
    )
    lines += [head, "-" * len(head)]
    for c in [*report.cells, *report.pooled]:
        t = {x.metric: x for x in c.tests}
        cols = "  ".join(
            f"{_fmt(t[m].base):>7}->{_fmt(t[m].now):<7}".rjust(w) for m, w in (("subem", 17), ("em", 15), ("f1", 15))
        )
        cr = ("-" if c.cr == (None, None) else f"{_fmt(c.cr[0])}->{_fmt(c.cr[1])}").rjust(15)
        verdict = "FAIL" if c.failed else ("MISSING" if c.missing else ("changed" if c.changed else "ok"))
        nchg = str(len(c.changed)) if any(c is x for x in report.cells) else ""
        lines.append(f"{c.name:38} {c.n:>3}  {cols}  {cr} {nchg:>7}  {verdict}")
    for c in [*report.cells, *report.pooled]:
        for t in c.tests:
            if t.failed:
                lines.append(
                    f"\nFAIL {c.name}: {t.metric} {t.base:.2f} -> {t.now:.2f} (Δ {t.delta:+.2f}, paired "
                    f"bootstrap 95% CI [{t.lo:+.2f}, {t.hi:+.2f}], p={t.p:.3f}): the drop is beyond the "
                    "interval"
                )
    for c in report.cells:
        if c.missing:
            lines.append(
                f"\nMISSING {c.name}: {len(c.missing)} baseline examples were not run: "
                f"{', '.join(c.missing[:5])}{' ...' if len(c.missing) > 5 else ''}"
            )
        if not c.changed:
            continue
        worse = sum(1 for x in c.changed if x["subem"][1] < x["subem"][0] or x["f1"][1] < x["f1"][0])
        better = sum(1 for x in c.changed if x["subem"][1] > x["subem"][0] or x["f1"][1] > x["f1"][0])
        lines.append(
            f"\n{c.name}: {len(c.changed)} of {c.n} examples changed ({worse} worse, {better} better, "
            f"{c.context_changes} with a different context)"
        )

        def order(x: dict) -> int:  # worse first, then better, then changes that kept the scores
            d = (x["subem"][1] - x["subem"][0]) + (x["f1"][1] - x["f1"][0])
            return 0 if d < 0 else (1 if d > 0 else 2)

        for x in sorted(c.changed, key=order)[:show]:
            lines.append(f"  - {x['id']}: {x['question']!r} gold={x['answers'][:3]!r}")
            lines.append(
                f"      was: {x['was']!r}  (SubEM {x['subem'][0]:.0f}, EM {x['em'][0]:.0f}, F1 {x['f1'][0]:.2f})"
            )
            lines.append(
                f"      now: {x['now']!r}  (SubEM {x['subem'][1]:.0f}, EM {x['em'][1]:.0f}, "
                f"F1 {x['f1'][1]:.2f})"
                + (f"  [context {x['tokens'][0]} -> {x['tokens'][1]} tokens]" if x["context_changed"] else "")
            )
        if len(c.changed) > show:
            lines.append(f"  ... {len(c.changed) - show} more (--show N)")
    verdict = "REGRESSION" if report.failed else "PASS"
    lines.append(
        f"\n{verdict}: {sum(c.failed for c in report.cells)} of {len(report.cells)} cells and "
        f"{sum(p.failed for p in report.pooled)} of {len(report.pooled)} pooled methods fail; "
        f"{report.changed} examples changed" + (" (--strict: any change fails)" if report.strict else "")
    )
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- running
def load_grid(path: str | Path) -> dict[str, Any]:
    grid = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    for k in ("methods", "datasets", "limit"):
        if k not in grid:
            raise ValueError(f"{path}: the grid needs '{k}'")
    grid.setdefault("overrides", [])
    grid.setdefault("tolerance", {})
    return grid


def run_grid(grid: dict[str, Any], out: Path) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    """Run every cell in this process (one generator load); returns slim records and run summaries."""
    # idle OpenMP threads sleep instead of spinning (read when torch first loads; no effect if it is loaded)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    records, summaries = {}, {}
    for dataset in grid["datasets"]:
        for method in grid["methods"]:
            name = cell_name(dataset, method)
            records[name], summaries[name] = run_cell(grid, dataset, method, out)
    return records, summaries


def run_cell(grid: dict[str, Any], dataset: str, method: str, out: Path) -> tuple[list[dict], dict]:
    """One cell of the grid, composed as ``python -m harness`` would with the grid's overrides (the profile's
    environment applied: the embedded profile never touches the hub); its slim records and summary."""
    from harness.config import compose_config
    from harness.runner import run

    limit = int(grid["limit"])
    # reuse=false: every context computed, never read back from an earlier run (harness.reuse)
    overrides = [f"method={method}", f"dataset={dataset}", f"limit={limit}", "progress=false", "latency.samples=0"]
    overrides.append("reuse=false")
    cfg = compose_config("config", [*overrides, *grid["overrides"]])
    folder = out / cfg.profile.name / cfg.generator.name / dataset / method
    t0 = time.perf_counter()
    s = run(cfg, folder)
    records = [slim(r) for r in read_jsonl(folder / PREDICTIONS)][:limit]
    summary = {
        **cell_summary(records),
        "wall_s": round(time.perf_counter() - t0, 2),
        "generator_model": {
            k: v for k, v in (s["generator_info"].get("model") or {}).items() if k != "path"
        },  # the local cache path is no provenance
        "method_info": s["method_info"],
        "git": s["git"],
    }
    name = cell_name(dataset, method)
    print(
        f"  {name:38} n={s['n']:<4} SubEM {s['subem']:6.2f}  F1 {s['f1']:6.2f}  {summary['wall_s']:7.1f}s",
        flush=True,
    )
    return records, summary


def write_baseline(
    folder: Path,
    grid: dict[str, Any],
    records: dict[str, list[dict]],
    summaries: dict[str, dict],
    seconds: float,
) -> None:
    """Write the cells just run into ``folder``. A partial update (``--methods``/``--datasets``) keeps the other
    cells of ``grid`` (the whole grid file) and their summaries; only cells the grid no longer has are removed."""
    folder.mkdir(parents=True, exist_ok=True)
    cells = {cell_name(d, m) for d in grid["datasets"] for m in grid["methods"]}
    for old in folder.glob("*.jsonl"):
        if old.stem not in cells:
            old.unlink()
    for name, rows in records.items():
        write_jsonl(folder / f"{name}.jsonl", rows)
    previous = folder / SUMMARY
    kept = json.loads(previous.read_text(encoding="utf-8")).get("cells", {}) if previous.is_file() else {}
    kept = {n: c for n, c in kept.items() if n in cells and n not in summaries and (folder / f"{n}.jsonl").is_file()}
    summary = {
        "grid": grid,
        "grid_seconds": round(seconds, 1),
        "cpu": cpu_label(),  # a gate run on the other CPU kind shows whether the fp32 predictions hold
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "updated_cells": sorted(summaries),
        "cells": dict(sorted({**kept, **summaries}.items())),
    }
    (folder / SUMMARY).write_text(json.dumps(summary, indent=1, ensure_ascii=False, default=str) + "\n")


def baseline_cpu(folder: Path) -> str | None:
    """The CPU label (``harness.lm.hardware.cpu_label``) the baseline was written on; None before it was kept."""
    summary = folder / SUMMARY
    return json.loads(summary.read_text(encoding="utf-8")).get("cpu") if summary.is_file() else None


def read_baseline(folder: Path, names: Sequence[str]) -> dict[str, list[dict]]:
    missing = [n for n in names if not (folder / f"{n}.jsonl").is_file()]
    if missing:
        raise FileNotFoundError(f"no baseline for {', '.join(missing)} in {folder} (run with --update)")
    return {n: read_jsonl(folder / f"{n}.jsonl") for n in names}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.regress", description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", default=str(REPO_ROOT / "regress" / "grid.yaml"))
    ap.add_argument("--baseline", default=str(REPO_ROOT / "regress" / "baseline"))
    ap.add_argument("--out", help="scratch results folder (default: a temporary folder, removed afterwards)")
    ap.add_argument("--update", action="store_true", help="rewrite the baseline from this run")
    ap.add_argument("--strict", action="store_true", help="fail on any changed prediction or context")
    ap.add_argument("--methods", nargs="*", help="run only these methods of the grid")
    ap.add_argument("--datasets", nargs="*", help="run only these datasets of the grid")
    ap.add_argument("--show", type=int, default=10, help="changed examples listed per cell")
    a = ap.parse_args(argv)
    whole = load_grid(a.grid)
    grid = {**whole}
    if a.methods:
        grid["methods"] = [m for m in grid["methods"] if m in a.methods]
    if a.datasets:
        grid["datasets"] = [d for d in grid["datasets"] if d in a.datasets]
    names = [cell_name(d, m) for d in grid["datasets"] for m in grid["methods"]]
    base_dir = Path(a.baseline)
    baseline = None
    if not a.update:
        try:
            baseline = read_baseline(base_dir, names)
        except FileNotFoundError as e:
            print(e, file=sys.stderr)
            return 2
    if a.out and Path(a.out).exists() and any(Path(a.out).iterdir()):
        print(
            f"--out {a.out} is not empty: the harness would resume its records instead of recomputing them",
            file=sys.stderr,
        )
        return 2
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="regress-"))
    print(
        f"regress: {len(names)} cells ({len(grid['methods'])} methods x {len(grid['datasets'])} datasets, "
        f"{grid['limit']} examples each) -> {out}",
        flush=True,
    )
    t0 = time.perf_counter()
    try:
        current, summaries = run_grid(grid, out)
    finally:
        if not a.out:
            shutil.rmtree(out, ignore_errors=True)
    seconds = time.perf_counter() - t0
    print(f"grid ran in {seconds:.1f} s", flush=True)
    if a.update:
        write_baseline(base_dir, whole, current, summaries, seconds)
        print(f"baseline written to {base_dir} ({len(names)} cells)")
        return 0
    tol = grid["tolerance"]
    report = compare(
        baseline,
        current,
        int(tol.get("resamples", 1000)),
        int(tol.get("seed", 0)),
        float(tol.get("level", 0.95)),
        a.strict,
    )
    print(f"baseline made on: {baseline_cpu(base_dir) or 'not recorded'}; this run on: {cpu_label()}")
    print(format_report(report, a.show))
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
