"""Hydra launchers (joblib, Ray, submitit) running real jobs in worker processes, one writer per run folder, and
sharded runs (``shard=i/n``) merging into the unsharded run's folder and summary."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from harness.config import register_resolvers
from harness.records import read_jsonl
from harness.runlock import run_lock
from harness.runner import key_config
from harness.shards import Shard
from harness.validate import ConfigError
from tests.conftest import REPO

SMALL = ["dataset=nq", "latency.samples=0", "progress=false"]
# the launcher tests are about processes, not the engine: the transformers generator starts in seconds where a
# vLLM engine takes ~15 s (the joblib test keeps vLLM: two engines must split the cores, not both take them all)
FAST = [*SMALL, "generator=smollm2_transformers"]
METRICS = (
    "n",
    "subem",
    "em",
    "f1",
    "cr",
    "cr_mean",
    "original_tokens",
    "compressed_tokens",
    "kept_nothing",
    "cr_nonempty",
    "diagnostics",
)
PER_EXAMPLE = ("id", "prediction", "context", "units", "original_tokens", "compressed_tokens", "subem", "em", "f1")


def harness(*args: str, timeout: int = 600, **env: str) -> subprocess.CompletedProcess:
    """``python -m harness <args>`` with the tests' environment plus ``env`` (OMP_NUM_THREADS left to the
    launcher)."""
    environ = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"} | env
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def summaries(root: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in root.rglob("summary.json")}


def test_shard_folders_sit_under_the_unsharded_runs_folder_and_keep_its_key():
    register_resolvers()
    base = "out/embedded/smollm2-135m-instruct-vllm-documents_first-unlabelled/nq/bm25/"
    cases = {
        (): base,
        ("shard=0/2",): base + "shards/0-of-2",
        ("method.top_k=2",): base + "method.top_k=2",
        ("method.top_k=2", "shard=1/3"): base + "method.top_k=2/shards/1-of-3",
        ("dataset.sample=shuffled", "shard=1/2"): base + "dataset.sample=shuffled,dataset.seed=0/shards/1-of-2",
    }
    keys = set()
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        for extra, want in cases.items():
            cfg = compose("config", ["method=bm25", "dataset=nq", "results_dir=out", *extra], return_hydra_config=True)
            HydraConfig.instance().set_config(cfg)
            assert OmegaConf.select(cfg, "hydra.run.dir") == want
            assert "shard" not in cfg.hydra.job.override_dirname  # the leaderboard's variant name
            if "method.top_k=2" not in extra and "dataset.sample=shuffled" not in extra:
                plain = compose("config", ["method=bm25", "dataset=nq", "results_dir=out", *extra])
                keys.add(json.dumps(key_config(plain)))
    assert len(keys) == 1  # a shard resumes, and merges into, the unsharded run's key
    for bad in ("2/2", "1", "a/b", "-1/2"):
        with pytest.raises(ConfigError, match="shard="):
            Shard.parse(bad)
    pieces = [Shard(i, 3).take(list(range(10))) for i in range(3)]
    assert pieces == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]


def test_submitit_slurm_is_a_launcher_choice():
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            "config", ["hydra/launcher=submitit_slurm", "hydra.launcher.partition=cpu"], return_hydra_config=True
        )
    assert cfg.hydra.launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert cfg.hydra.launcher.partition == "cpu"


@pytest.mark.slow
def test_two_shards_merge_into_the_unsharded_runs_records_and_summary(tmp_path):
    from harness.api import evaluate
    from leaderboard.archive import archive_shards
    from leaderboard.collect import collect

    # fp32: bf16 answers on this CPU depend on batch composition (a shard batches other questions together)
    common = {"limit": 4, "latency": {"samples": 0}, "progress": False, "generator": {"dtype": "float32"}}
    first = evaluate("bm25", "nq", results_dir=str(tmp_path / "sharded"), shard="0/2", **common)
    run_folder = first.folder.parent.parent
    assert first.folder == run_folder / "shards" / "0-of-2" and len(first.records) == 2
    assert first.summary["merged_into"] is None and not (run_folder / "summary.json").exists()
    # carried to another machine without passage text (leaderboard archive --shards), the shard still merges there
    [carried] = archive_shards(tmp_path / "sharded", tmp_path / "carry")
    assert carried == tmp_path / "carry" / first.folder.relative_to(tmp_path / "sharded")
    assert all("context" not in r and r["context_sha1"] for r in read_jsonl(carried / "predictions.jsonl"))
    elsewhere = evaluate("bm25", "nq", results_dir=str(tmp_path / "carry"), shard="1/2", **common)
    assert elsewhere.summary["merged_into"] == str(tmp_path / "carry" / run_folder.relative_to(tmp_path / "sharded"))
    second = evaluate("bm25", "nq", results_dir=str(tmp_path / "sharded"), shard="1/2", **common)
    assert second.summary["merged_into"] == str(run_folder)  # the last shard merged the set
    assert archive_shards(tmp_path / "sharded", tmp_path / "carry2") == []  # merged: archive the run instead
    single = evaluate("bm25", "nq", results_dir=str(tmp_path / "single"), **common)
    carried_summary = json.loads((carried.parent.parent / "summary.json").read_text())

    merged = json.loads((run_folder / "summary.json").read_text())
    for k in METRICS:
        assert merged[k] == single.summary[k] == carried_summary[k], k
    assert merged["shards"]["count"] == 2 and merged["config"]["shard"] is None
    ours, theirs = read_jsonl(run_folder / "predictions.jsonl"), read_jsonl(single.folder / "predictions.jsonl")
    assert [{k: r[k] for k in PER_EXAMPLE} for r in ours] == [{k: r[k] for k in PER_EXAMPLE} for r in theirs]
    assert json.loads((run_folder / "run.json").read_text())["key"] == single.summary["config_key"]

    board = collect(tmp_path / "sharded")  # the shards' own folders hold no summary.json: one run
    assert len(board) == 1 and board.iloc[0]["variant"] == "bm25[generator.dtype=float32]"
    assert board.iloc[0]["n"] == 4
    assert board.iloc[0]["subem"] == single.summary["subem"]

    cli = [sys.executable, "-m", "harness.merge"]
    redo = subprocess.run([*cli, str(run_folder)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert redo.returncode == 0, redo.stderr
    assert json.loads((run_folder / "summary.json").read_text())["subem"] == merged["subem"]
    assert len(read_jsonl(run_folder / "predictions.jsonl")) == 4  # nothing appended twice
    partial = tmp_path / "partial"
    shutil.copytree(first.folder, partial / "shards" / "0-of-2")
    r = subprocess.run([*cli, str(partial)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "shards not finished: 1-of-2" in r.stderr
    assert not (partial / "summary.json").exists()


@pytest.mark.slow
def test_a_second_process_on_a_busy_run_folder_fails_at_once(tmp_path):
    # the first run must outlast the second's start-up (~5-10 s): 6 full-context answers one at a time (~15 s)
    args = ["method=full", *FAST, "limit=6", "batch_size=1", f"results_dir={tmp_path}"]
    environ = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    first = subprocess.Popen(
        [sys.executable, "-m", "harness", *args],
        cwd=REPO,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lock = tmp_path / "embedded" / "smollm2-135m-instruct-documents_first-unlabelled" / "nq" / "full" / ".run.lock"
    deadline = time.time() + 120
    while time.time() < deadline and not (lock.is_file() and lock.read_text()):
        time.sleep(0.2)
    try:
        assert lock.read_text().startswith(f"pid {first.pid} ")
        t0 = time.time()
        second = harness(*args, timeout=300)
        assert second.returncode == 2, second.stderr[-2000:]
        assert f"is being written by another run (pid {first.pid} " in second.stderr
        assert time.time() - t0 < 60  # before any model loads
        assert first.poll() is None  # the first run still holds the folder
    finally:
        _, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-2000:]
    ids = [r["id"] for r in read_jsonl(lock.parent / "predictions.jsonl")]
    assert len(ids) == len(set(ids)) == 6
    with run_lock(lock.parent):  # released when the first run ended
        assert lock.read_text().startswith(f"pid {os.getpid()} ")


@pytest.mark.slow
def test_joblib_launcher_runs_the_grid_in_two_worker_processes(tmp_path):
    r = harness(
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "method=naive,bm25",
        *SMALL,
        "limit=2",
        f"results_dir={tmp_path}",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    got = summaries(tmp_path)
    assert sorted(got) == ["bm25", "naive"]
    for s in got.values():
        assert s["n"] == 2
        assert s["run"]["generator_loaded_here"]  # each worker loaded its own (one process would load it once)
        assert s["timed_at"]["threads"] == {"1": 2}  # joblib gave each worker one of the two cores


@pytest.mark.slow
def test_ray_launcher_runs_the_grid_on_a_local_cluster(tmp_path):
    ray_init = "+hydra.launcher.ray.init."
    r = harness(
        "-m",
        "hydra/launcher=ray",
        f"{ray_init}_node_ip_address=127.0.0.1",
        f"{ray_init}include_dashboard=false",
        f"{ray_init}num_cpus=2",
        "method=naive,bm25",
        *FAST,
        "limit=2",
        f"results_dir={tmp_path}",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Ray Launcher is launching 2 jobs" in r.stdout + r.stderr
    got = summaries(tmp_path)
    assert sorted(got) == ["bm25", "naive"]
    for s in got.values():
        assert s["n"] == 2 and s["run"]["generator_loaded_here"]
        assert s["timed_at"]["threads"] == {"1": 2}  # Ray's one CPU per task


@pytest.mark.slow
def test_submitit_local_launcher_runs_a_job_in_its_own_process(tmp_path):
    r = harness("-m", "hydra/launcher=submitit_local", "method=naive", *FAST, "limit=2", f"results_dir={tmp_path}")
    assert r.returncode == 0, r.stderr[-3000:]
    [s] = summaries(tmp_path).values()
    assert s["n"] == 2
    [job] = [d for d in (tmp_path / ".submitit").iterdir() if d.name.isdigit()]  # the job's pickles and logs
    assert list(job.glob("*_result.pkl")) and list(job.glob("*_log.out"))
