"""The read-only recipe on the headline block itself: its Table 2 contexts, made again, exported with
``python -m leaderboard export-contexts`` and read back by the embedded generator from the file alone (no
compressor bound, no call cache), give the published predictions back, example for example. Each step runs in this
process as the command line would (``harness.api``, ``leaderboard``'s ``main``): the command line's own paths are
tested in tests/test_run.py and tests/test_reuse.py."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.vllm

HEADLINE = "smollm2-135m-instruct-vllm-documents_first-unlabelled"
PUBLISHED = REPO / "leaderboard" / "runs" / "embedded" / HEADLINE / "nq"
FOLDER = "dataset.sample=shuffled,dataset.seed=0"
ROWS = "bm25,compselect"  # a retriever and the trained paper method (LoRA extractor on vLLM, trained reranker)
# the first batch of the published runs (batch size 8, the seeded shuffle), so every batch matches theirs
SAMPLE = ("dataset=nq", "dataset.sample=shuffled", "dataset.seed=0", "limit=8", "latency.samples=0")


def _harness(*overrides: str) -> None:
    """``python -m harness -m method=ROWS <overrides>``, one method after the other in this process."""
    from harness.api import evaluate

    for method in ROWS.split(","):
        evaluate(method, "nq", overrides=[*SAMPLE[1:], *overrides])


def _records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_exported_headline_contexts_read_back_give_the_published_predictions(tmp_path):
    pytest.importorskip("vllm")
    made, again, file = tmp_path / "made", tmp_path / "again", tmp_path / "contexts.jsonl.gz"
    from harness.lm import release
    from leaderboard.__main__ import main as leaderboard

    off = ("lm.cache=false", "progress=false")
    try:
        _harness(*off, f"results_dir={made}")
    finally:  # CompSelect's merged adapters: an engine each, not needed by the tests after this one
        release(lambda lm: lm.info["adapter"] is not None)
    assert leaderboard(["export-contexts", str(made), str(file), "--variants", ROWS, "--datasets", "nq"]) == 0
    _harness(*off, f"contexts={file}", f"results_dir={again}")
    for method in ROWS.split(","):
        run = again / "embedded" / HEADLINE / "nq" / method / FOLDER
        assert json.loads((run / "summary.json").read_text())["run"]["method_bound"] is False
        read = _records(run / "predictions.jsonl")
        published = {r["id"]: r for r in _records(PUBLISHED / method / FOLDER / "predictions.jsonl")}
        assert len(read) == 8 and all(r["reused"]["file"] == str(file) for r in read)
        got = [(r["id"], hashlib.sha1(r["context"].encode()).hexdigest()[:12], r["prediction"]) for r in read]
        want = [(i, published[i]["context_sha1"], published[i]["prediction"]) for i, _, _ in got]
        assert got == want
