"""The suite clock (tests/suite_clock.py) on a two-test suite in a child pytest: its totals and its memory lines,
where the test that holds 200 MB must come first among those that raised the peak."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO

SUITE = """
HELD = []


def test_small():
    assert True


def test_holds_200_mb():
    HELD.append(bytearray(200 * 2**20))
"""


def test_the_clock_names_the_test_that_raised_the_peak(tmp_path):
    (tmp_path / "test_two.py").write_text(SUITE)
    out = tmp_path / "clock.json"
    mine = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not an xdist worker's child
    env = {**mine, "PYTHONPATH": str(REPO), "RAG_HARNESS_SUITE_CLOCK": str(out)}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "tests.suite_clock", "-p", "no:cacheprovider", "test_two.py"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "2 tests in" in done.stdout and "peak resident size: main" in done.stdout
    s = json.loads(out.read_text())
    assert s["tests"] == 2 and s["workers"] is None
    top = s["raised_peak"][0]
    assert top["test"].endswith("test_holds_200_mb") and 0.15 <= top["gb"] <= 0.3
    assert s["peak_gb"]["main"] >= top["peak_gb"]
