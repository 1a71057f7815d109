"""The suite's clock (a pytest plugin, loaded by ``conftest.py``): per test, its wall seconds and how many of them
went on loading models (weights read by transformers, vLLM engines started, the model layer's shared builds), and
how many child Python processes it started, and the test process's memory (its peak resident size so far, and by how
much the test raised it). At the end it prints the total, the load share, the slowest tests and those that raised
the peak most (two workers must fit in the machine's memory together),
and says so when the run is over its budget (``RAG_HARNESS_SUITE_BUDGET_S``, default 1200 s: the README's test
command in at most 20 minutes), so that a stop that slows the suite is seen at that stop. The figures are also
written as JSON to ``RAG_HARNESS_SUITE_CLOCK`` (default ``.pytest_cache/suite-clock.json``).
"""

from __future__ import annotations

import functools
import json
import os
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

BUDGET_S = float(os.environ.get("RAG_HARNESS_SUITE_BUDGET_S", "1200"))
SLOWEST = 25
MEMORY = 10  # the tests that raised a process's peak resident size most


class Clock:
    """Load time per test: only the outermost of nested loads counts (an LM build that reads weights is one)."""

    def __init__(self) -> None:
        self.depth = 0
        self.current = ""
        self.load_s: Counter[str] = Counter()
        self.loads: dict[str, Counter[str]] = {}
        self.children: Counter[str] = Counter()
        self.begun: dict[str, float] = {}  # per test, when its protocol began
        self.peak_before: dict[str, float] = {}  # per test, the process's peak resident GB when it began
        self.outcome: dict[str, str] = {}
        self.started = time.perf_counter()
        self.patched: set[str] = set()

    def timed(self, kind: str, fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.depth:
                self.depth += 1
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.depth -= 1
            self.depth = 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth = 0
                self.load_s[self.current] += time.perf_counter() - t0
                self.loads.setdefault(self.current, Counter())[kind] += 1

        return wrapper

    def patch(self) -> None:
        """Wrap the loaders present now (heavy libraries are patched once something imported them)."""
        if "shared" not in self.patched:
            from harness import resources

            orig = resources.shared
            resources.shared = lambda key, factory: orig(key, self.timed(f"shared:{key[0]}", factory))
            self.patched.add("shared")
        if "vllm" not in self.patched and "harness.lm.vllm_engine" in sys.modules:
            cls = sys.modules["harness.lm.vllm_engine"].VLLMEngine
            cls.__init__ = self.timed("vllm engine", cls.__init__)
            self.patched.add("vllm")
        if "hf" not in self.patched and "transformers" in sys.modules:
            from transformers import PreTrainedModel

            orig_fp = PreTrainedModel.from_pretrained.__func__
            PreTrainedModel.from_pretrained = classmethod(self.timed("from_pretrained", orig_fp))
            self.patched.add("hf")
        if "popen" not in self.patched:
            orig_init = subprocess.Popen.__init__

            def init(popen: Any, args: Any, *a: Any, **k: Any) -> None:
                argv = [args] if isinstance(args, str | os.PathLike) else list(args)
                if argv and "python" in Path(str(argv[0])).name:
                    self.children[self.current] += 1
                orig_init(popen, args, *a, **k)

            subprocess.Popen.__init__ = init
            self.patched.add("popen")


CLOCK = Clock()
# per test, as its teardown report carried it (from this process, or from a pytest-xdist worker's):
# [wall s, load s, {load kind: count}, child Python processes, the xdist worker or None, the process's peak resident
# GB after it, by how many GB it raised that peak]
SEEN: dict[str, list[Any]] = {}
PROPERTY = "suite_clock"


def peak_gb() -> float:
    """This process's peak resident size so far, GB: ``VmHWM`` (KiB), the high-water mark of its own memory map.

    Not ``ru_maxrss``: Linux carries that across ``exec``, so a pytest started by a 14 GB parent (the suite's own
    child-pytest tests) would report the parent's peak as its own, and no test of it could raise it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    CLOCK.patch()
    CLOCK.current = item.nodeid
    CLOCK.begun[item.nodeid] = time.perf_counter()
    CLOCK.peak_before[item.nodeid] = peak_gb()
    yield
    CLOCK.patch()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """The test's figures ride on its teardown report, so that a pytest-xdist controller sees its workers'."""
    outcome = yield
    if call.when == "teardown":
        k = item.nodeid
        wall = time.perf_counter() - CLOCK.begun[k]
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        peak = peak_gb()
        raised = peak - CLOCK.peak_before[k]
        figures = [wall, CLOCK.load_s.get(k, 0.0), dict(CLOCK.loads.get(k, {})), CLOCK.children.get(k, 0), worker]
        figures += [round(peak, 2), round(raised, 2)]
        outcome.get_result().user_properties.append((PROPERTY, figures))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.outcome != "passed":
        CLOCK.outcome[report.nodeid] = report.outcome
    for name, figures in report.user_properties:
        if name == PROPERTY and report.when == "teardown":
            SEEN[report.nodeid] = figures


def summary() -> dict[str, Any]:
    total = time.perf_counter() - CLOCK.started
    loads = Counter()
    for f in SEEN.values():
        loads.update(f[2])
    slowest = sorted(SEEN.items(), key=lambda kv: -kv[1][0])[:SLOWEST]
    workers = len({f[4] for f in SEEN.values()} - {None}) or None
    return {
        "tests": len(SEEN),
        "wall_s": round(total, 1),
        "tests_s": round(sum(f[0] for f in SEEN.values()), 1),
        "load_s": round(sum(f[1] for f in SEEN.values()), 1),
        "loads": dict(loads),
        "child_pythons": sum(f[3] for f in SEEN.values()),
        "workers": workers,
        "budget_s": BUDGET_S,
        "slowest": [
            {"test": k, "s": round(f[0], 1), "load_s": round(f[1], 1), "loads": sum(f[2].values()), "children": f[3]}
            for k, f in slowest
        ],
        "peak_gb": {w or "main": max(f[5] for f in SEEN.values() if f[4] == w) for w in {f[4] for f in SEEN.values()}},
        "raised_peak": [
            {"test": k, "gb": f[6], "peak_gb": f[5], "worker": f[4]}
            for k, f in sorted(SEEN.items(), key=lambda kv: -kv[1][6])[:MEMORY]
            if f[6] >= 0.05
        ],
        # per test: [wall s, load s, child Python processes, peak GB after it, GB it raised the peak, loads by kind]
        "per_test": {k: [round(f[0], 2), round(f[1], 2), f[3], f[5], f[6], dict(f[2])] for k, f in SEEN.items()},
    }


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not SEEN or os.environ.get("PYTEST_XDIST_WORKER"):  # a worker's figures are its controller's to print
        return
    s = summary()
    out = Path(os.environ.get("RAG_HARNESS_SUITE_CLOCK", ".pytest_cache/suite-clock.json"))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(s, indent=1))
    except OSError:
        pass
    tr = terminalreporter
    tr.section("suite clock")
    share = 100 * s["load_s"] / max(s["tests_s"], 1e-9)
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(s["loads"].items(), key=lambda kv: -kv[1]))
    on = f" on {s['workers']} workers" if s["workers"] else ""
    tr.write_line(
        f"{s['tests']} tests in {s['wall_s']:.0f} s{on}; loading models {s['load_s']:.0f} s ({share:.0f}% of the "
        f"tests' time; {kinds}); {s['child_pythons']} child Python processes"
    )
    tr.write_line(f"{'s':>7} {'load s':>7} {'loads':>5} {'child':>5}  slowest tests")
    for row in s["slowest"]:
        tr.write_line(f"{row['s']:7.1f} {row['load_s']:7.1f} {row['loads']:5d} {row['children']:5d}  {row['test']}")
    peaks = ", ".join(f"{w} {gb:.1f} GB" for w, gb in sorted(s["peak_gb"].items()))
    tr.write_line(f"peak resident size: {peaks}; the tests that raised it most:")
    for row in s["raised_peak"]:
        tr.write_line(f"  +{row['gb']:5.2f} GB to {row['peak_gb']:5.2f}  {row['test']}")
    if s["tests"] > 100 and s["wall_s"] > BUDGET_S:  # a whole-suite run, not a chosen few
        tr.write_line(
            f"SUITE OVER BUDGET: {s['wall_s']:.0f} s > {BUDGET_S:.0f} s (RAG_HARNESS_SUITE_BUDGET_S); "
            "see docs/testing.md",
            red=True,
            bold=True,
        )
