"""Faults never kill a run with a raw trace: a damaged or unwritable LM call cache is healed or left out; an
example whose compression fails stops the run with one line naming it, or is recorded and skipped; a full disk
stops the run with one line naming the file and the records kept, and the run resumes once space is freed."""

from __future__ import annotations

import errno
import json
import logging
import os
import sqlite3
import subprocess
import sys

import pytest

from harness.data import DatasetSpec, load_dataset
from harness.lm import cache
from methods.vanilla import Full
from tests.conftest import DATA, REPO


@pytest.fixture
def cache_at(tmp_path):
    """Point the call cache at a file of the test's own, and back to the defaults afterwards."""

    def use(path):
        cache.configure(True, str(path))
        return path

    yield use
    cache.configure(None, None)


def double(prompts):
    return [p[0] * 2 for p in prompts]


def calls(n: int = 5):
    return cache.cached_calls("ns", "op", [[i] for i in range(n)], {}, double)


def test_a_cache_file_that_is_not_a_database_is_set_aside_and_a_new_one_started(tmp_path, cache_at, caplog):
    path = cache_at(tmp_path / "lm-calls.sqlite")
    path.write_bytes(b"not a database\n" * 300)
    with caplog.at_level(logging.WARNING, logger="harness.lm.cache"):
        first = calls()
    assert [c.value for c in first] == [0, 2, 4, 6, 8] and not any(c.replayed for c in first)
    [aside] = tmp_path.glob("lm-calls.sqlite.corrupt-*")
    [warning] = caplog.records
    assert str(path) in warning.getMessage() and str(aside) in warning.getMessage()
    cache._forget(path)  # a new process: the healed cache replays what it stored
    assert all(c.replayed for c in calls())


def test_a_cache_that_fails_its_integrity_check_is_set_aside(tmp_path, cache_at, caplog):
    path = cache_at(tmp_path / "lm-calls.sqlite")
    cache.cached_calls("ns", "op", [[i] for i in range(3000)], {}, lambda ps: ["x" * 200 for _ in ps])
    cache._forget(path)
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    with path.open("r+b") as f:  # damage pages in the middle of the table
        f.seek(path.stat().st_size // 2)
        f.write(bytes(range(256)) * 32)
    with caplog.at_level(logging.WARNING, logger="harness.lm.cache"):
        assert [c.value for c in calls()] == [0, 2, 4, 6, 8]
    assert "integrity check failed" in caplog.text and len(list(tmp_path.glob("*.corrupt-*"))) == 1


@pytest.mark.parametrize("where", ["lm-calls.sqlite", "no-such-folder/lm-calls.sqlite"])
def test_a_cache_on_a_read_only_path_degrades_to_no_cache_with_one_warning(where, cache_at, caplog):
    cache_at(f"/proc/{where}")  # procfs: nothing can be created there, not even by root
    with caplog.at_level(logging.WARNING, logger="harness.lm.cache"):
        assert [c.value for c in calls()] == [0, 2, 4, 6, 8]
        assert not any(c.replayed for c in calls())  # computed again: there is no cache
    [warning] = caplog.records
    assert "/proc/" in warning.getMessage() and "without a cache" in warning.getMessage()


# -- an example whose compression raises ---------------------------------------------------------------------------


FAIL_ON = "RAG_HARNESS_TEST_FAIL_ON"  # the id Faulty fails on: outside the config, so a resume keeps its folder


class Faulty(Full):
    """Full Content that raises on the example named by ``$RAG_HARNESS_TEST_FAIL_ON`` (an injected fault; the
    rest is the real pipeline)."""

    name = "faulty"

    def compress(self, example):
        if example.id == os.environ.get(FAIL_ON):
            raise ValueError(f"cannot compress\n{example.id}")
        return super().compress(example)


OVERRIDES = [
    "method._target_=tests.test_faults.Faulty",
    "generator=smollm2_transformers",
    "batch_size=1",
    "latency.samples=0",
    "progress=false",
]


def records(folder):
    return [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_failing_example_stops_the_run_with_one_line_and_a_resume_goes_on_from_the_kept_records(
    tmp_path, monkeypatch
):
    import harness

    ids = [e.id for e in load_dataset(DatasetSpec("nq", str(DATA / "nq" / "test.jsonl.gz"), limit=3))]
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "method=full",
        "dataset=nq",
        "limit=3",
        f"results_dir={tmp_path}",
        *OVERRIDES,
    ]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ, FAIL_ON: ids[1]})
    assert r.returncode == 2 and "Traceback" not in r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: example {ids[1]}: method full, stage compress: ValueError: cannot compress")
    [folder] = {p.parent for p in tmp_path.rglob("predictions.jsonl")}
    assert [k["id"] for k in records(folder)] == ids[:1]  # the batch before the failure
    first = records(folder)[0]
    # skip: the failure is recorded and the run goes on; the summary counts it and scores the others
    monkeypatch.setenv(FAIL_ON, ids[1])
    run = lambda **kw: harness.evaluate("full", "nq", 3, OVERRIDES, results_dir=str(tmp_path), **kw)  # noqa: E731
    ev = run(on_error="skip")
    assert ev.folder == folder and [k["id"] for k in records(folder)] == ids
    assert records(folder)[1]["error"] == {
        "stage": "compress",
        "type": "ValueError",
        "message": f"cannot compress {ids[1]}",
    }
    assert (ev.summary["n"], ev.summary["failed_examples"], ev.summary["failed_ids"]) == (2, 1, [ids[1]])
    # a resume retries the failed example: with the fault gone it is scored, and the others are kept as they were
    monkeypatch.delenv(FAIL_ON)
    ev = run(on_error="skip")
    assert (ev.summary["n"], ev.summary["failed_examples"]) == (3, 0)
    rows = records(folder)
    assert rows[0] == first and [r["id"] for r in rows] == [*ids, ids[1]] and "error" not in rows[-1]


# -- a full disk ---------------------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs of the test's own (a genuinely full filesystem; mounting needs root), unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs for the full-disk test needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=True)


def fill(disk, leave: int):
    """A file that takes all of ``disk``'s free space but ``leave`` bytes."""
    st = os.statvfs(disk)
    filler = disk / "filler"
    filler.write_bytes(b"\0" * (st.f_bavail * st.f_frsize - leave))
    return filler


@pytest.mark.slow
def test_a_full_disk_stops_the_run_with_one_line_and_a_resume_after_freeing_space_completes(small_disk):
    import harness

    settings = ["generator=smollm2_transformers", "batch_size=2", "latency.samples=0", "progress=false"]
    n = 6
    ids = [e.id for e in load_dataset(DatasetSpec("nq", str(DATA / "nq" / "test.jsonl.gz"), limit=n))]
    filler = fill(small_disk, 40 * 1024)  # the run's config files and its first batch (full: ~3.3 kB a record)
    cmd = [sys.executable, "-m", "harness", "method=full", "dataset=nq", f"limit={n}", f"results_dir={small_disk}"]
    r = subprocess.run([*cmd, *settings], cwd=REPO, capture_output=True, text=True, timeout=600)
    [folder] = {p.parent for p in small_disk.rglob("predictions.jsonl")}
    kept = records(folder)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "Logging error" not in r.stderr, r.stderr[-3000:]
    assert r.stderr.strip().splitlines()[-1] == (
        f"error: {folder / 'predictions.jsonl'}: no space left on device ({len(kept)} records kept); "
        "free space and re-run to resume"
    )
    assert 0 < len(kept) < n and [k["id"] for k in kept] == ids[: len(kept)]  # whole lines only, none torn
    filler.unlink()
    ev = harness.evaluate("full", "nq", n, settings, results_dir=str(small_disk))
    rows = records(folder)
    assert ev.folder == folder and rows[: len(kept)] == kept and [k["id"] for k in rows] == ids
    assert ev.summary["n"] == n and all("subem" in k and "error" not in k for k in rows)


def test_a_quota_reads_as_a_full_disk_and_other_write_errors_do_not(tmp_path):
    from harness.records import disk_full

    path = tmp_path / "predictions.jsonl"
    quota = disk_full(OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)), path, 3)
    assert str(quota) == f"{path}: disk quota exceeded (3 records kept); free space and re-run to resume"
    assert disk_full(OSError(errno.EACCES, os.strerror(errno.EACCES)), path, 3) is None
