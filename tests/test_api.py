"""``harness.evaluate``: the command line's config and run folder from Python, on the real embedded generator;
the API and the command line resume each other's runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

import harness
from harness.api import run_overrides, settings_overrides
from harness.records import read_jsonl
from tests.conftest import REPO

COLUMNS = {"id", "question", "answers", "prediction", "context", "original_tokens", "compressed_tokens", "subem"}


def test_import_harness_stays_light():
    code = (
        "import sys, harness; harness.evaluate; harness.Evaluation; "
        "print(sorted(m for m in ('torch', 'vllm', 'transformers', 'pandas', 'harness.runner') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("value", "typed"),
    [
        (0, "0"),
        (0.25, "0.25"),
        (True, "true"),
        (None, "null"),
        ("bm25", "bm25"),
        ("/a b/c's.jsonl", None),
        ("true", None),
        ([1, "x"], "[1,x]"),
    ],
)
def test_settings_become_overrides_hydra_reads_back(value, typed):
    [line] = settings_overrides({"method": {"knob": value}})
    assert line.startswith("method.knob=")
    if typed is not None:
        assert line == f"method.knob={typed}"
    [parsed] = OverridesParser.create().parse_overrides([line])
    assert parsed.key_or_group == "method.knob" and parsed.value() == value


def test_keywords_map_to_the_command_lines_overrides():
    got = run_overrides("bm25", "nq", 3, ["method.top_k=2"], batch_size=4, latency={"samples": 0}, generator__threads=1)
    want = "method=bm25 dataset=nq limit=3 method.top_k=2 batch_size=4 latency.samples=0 generator.threads=1"
    assert got == [*want.split(), "hydra.mode=RUN"]


def _lines(path: Path) -> list[str]:
    return path.read_text("utf-8").splitlines()


def _hydra_files(folder: Path) -> dict[str, object]:
    files = {
        name: yaml.safe_load((folder / ".hydra" / name).read_text())
        for name in ("config.yaml", "overrides.yaml", "hydra.yaml")
    }
    files["hydra.yaml"]["hydra"]["runtime"].pop("cwd")  # the one field that depends on where each was started
    return files


@pytest.mark.slow
def test_api_and_cli_share_the_run_folder_and_resume_each_other(tmp_path):
    # the folder's sharing is the runner's, not the engine's: the transformers generator starts in seconds
    fast = ["generator=smollm2_transformers"]
    common = {"latency": {"samples": 0}, "results_dir": str(tmp_path), "progress": False}
    cli_args = ["latency.samples=0", f"results_dir={tmp_path}", "progress=false"]

    first = harness.evaluate("bm25", "nq", limit=2, overrides=fast, **common)
    folder = tmp_path / "embedded" / "smollm2-135m-instruct-documents_first-unlabelled" / "nq" / "bm25"
    assert first.folder == folder
    assert first.summary["run"]["examples_computed"] == 2 and len(first.records) == 2
    assert {"config.yaml", "overrides.yaml", "hydra.yaml"} <= {p.name for p in (folder / ".hydra").iterdir()}
    written = _lines(folder / "predictions.jsonl")

    cli = [sys.executable, "-m", "harness", "method=bm25", "dataset=nq", "limit=3", *fast, *cli_args]
    r = subprocess.run(cli, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith(f"records: {folder}")
    assert json.loads((folder / "summary.json").read_text())["run"]["examples_computed"] == 1  # resumed the API's
    extended = _lines(folder / "predictions.jsonl")
    assert len(extended) == 3 and extended[:2] == written
    cli_hydra = _hydra_files(folder)

    # resumes the command line's run: nothing to do
    again = harness.evaluate("bm25", "nq", limit=3, overrides=fast, **common)
    assert again.folder == folder and again.summary["run"]["examples_computed"] == 0
    assert _lines(folder / "predictions.jsonl") == extended
    assert [p.name for p in tmp_path.rglob("summary.json")] == ["summary.json"]  # one run folder in all
    assert _hydra_files(folder) == cli_hydra  # the same .hydra files as the command line's for these overrides

    frame, s = again.records, again.summary
    assert len(frame) == 3 and set(frame.columns) >= COLUMNS
    assert list(frame["id"]) == [json.loads(line)["id"] for line in extended]
    assert s["n"] == 3 and s["dataset"] == "nq" and s["method"] == "bm25"
    for m in ("subem", "em", "f1"):
        assert s[m] == pytest.approx(frame[m].mean() * 100)
    assert (frame["compressed_tokens"] < frame["original_tokens"]).all()  # BM25 kept one passage of five


def test_read_jsonl_stops_at_a_torn_line_and_repairs_only_when_asked(tmp_path):
    path = tmp_path / "predictions.jsonl"
    path.write_bytes(b'{"id": "a"}\n{"id": "b"}\n{"id": "c", "pred')
    assert read_jsonl(path) == [{"id": "a"}, {"id": "b"}]
    assert path.read_bytes().endswith(b'"pred')  # a reader leaves the file as it is
    assert read_jsonl(path, repair=True) == [{"id": "a"}, {"id": "b"}]
    assert path.read_bytes() == b'{"id": "a"}\n{"id": "b"}\n'
    assert read_jsonl(tmp_path / "missing.jsonl") == []
