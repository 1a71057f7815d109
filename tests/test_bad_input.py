"""Bad input never crashes raw or scores wrong: empty-normalising gold aliases, unreadable files, and
out-of-range settings each end in one message naming the file and line, or the key and value."""

from __future__ import annotations

import gzip
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.config import register_resolvers
from harness.data import DatasetError, DatasetSpec, load_dataset, load_dataset_report, read_examples
from harness.validate import ConfigError, validate_config
from tests.conftest import DATA, REPO

GOOD = {
    "id": "q1",
    "question": "who wrote hamlet",
    "answers": ["Shakespeare"],
    "ctxs": [{"title": "Hamlet", "text": "Hamlet is a tragedy by William Shakespeare."}],
}


def row(i: int, answers: list[str] | None = None) -> dict:
    return {**GOOD, "id": f"q{i}", "answers": answers or ["Shakespeare"]}


def jsonl_bytes(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def compose_cfg(*overrides: str):
    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


# -- gold answers that normalise to the empty string ----------------------------------------------------------


def test_empty_normalising_aliases_are_dropped_with_one_warning(tmp_path, caplog):
    path = tmp_path / "d.jsonl"
    rows = [row(0), row(1, ["the", "Shakespeare", ".a"]), row(2), row(3, ["*", "Bard"]), row(4, ["(a", "  ", "x"])]
    path.write_bytes(jsonl_bytes(rows))
    with caplog.at_level(logging.WARNING, logger="harness.data"):
        exs = read_examples(path)
    assert [e.answers for e in exs] == [("Shakespeare",), ("Shakespeare",), ("Shakespeare",), ("Bard",), ("x",)]
    [rec] = caplog.records
    msg = rec.getMessage()
    assert str(path) in msg and "dropped 5" in msg
    assert "line 2 (id q1: 'the', '.a')" in msg and "line 4" in msg and "line 5" in msg


def test_example_with_no_usable_alias_is_an_error_naming_file_and_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(jsonl_bytes([row(0), row(1), row(2, ["the", "*"])]))
    with pytest.raises(DatasetError) as e:
        read_examples(path)
    msg = str(e.value)
    assert str(path) in msg and "line 3" in msg and "field 'answers'" in msg and "skip_unanswerable" in msg


def test_skip_unanswerable_skips_and_counts_within_the_limit(tmp_path, caplog):
    path = tmp_path / "d.jsonl"
    path.write_bytes(jsonl_bytes([row(0), row(1, ["a"]), row(2), row(3), row(4, ["the"]), row(5)]))
    spec = DatasetSpec("d", str(path), 5, "none", None, skip_unanswerable=True)
    with caplog.at_level(logging.WARNING, logger="harness.data"):
        full = load_dataset_report(spec)
    assert [e.id for e in full.examples] == ["q0", "q2", "q3", "q5"] and full.skipped == ["q1", "q4"]
    assert "skipping 2 example(s)" in caplog.text and "line 2 (id q1" in caplog.text
    cut = load_dataset_report(DatasetSpec("d", str(path), 5, "none", 2, skip_unanswerable=True))
    assert [e.id for e in cut.examples] == ["q0", "q2"] and cut.skipped == ["q1"]  # limit counts usable ones


def test_shipped_data_loses_its_empty_aliases(caplog):
    with caplog.at_level(logging.WARNING, logger="harness.data"):
        tqa = {e.id: e for e in read_examples(DATA / "triviaqa" / "test.jsonl.gz")}
        nq = {e.id: e for e in read_examples(DATA / "nq" / "train.jsonl.gz")}
    assert len(tqa["tqa-dev-ib4-0230"].answers) == 11 and ".a" not in tqa["tqa-dev-ib4-0230"].answers
    assert nq["nq-open-test-1451"].answers == ("a rotationally symmetric saltire", "the symbol ×")
    assert "line 120 (id tqa-dev-ib4-0230: '.a', '(a')" in caplog.text
    assert "line 906 (id nq-open-test-1451: '*')" in caplog.text


# -- unreadable files --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["bad.jsonl", "bad.jsonl.gz"])
def test_non_utf8_names_file_and_line(tmp_path, name):
    data = jsonl_bytes([row(0)]) + json.dumps(row(1)).encode().replace(b"hamlet", b"haml\xe9t") + b"\n"
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    with pytest.raises(DatasetError) as e:
        read_examples(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: line 2: not valid UTF-8 (byte 0xe9") and "\n" not in msg


def test_non_utf8_in_dpr_json_names_line(tmp_path):
    path = tmp_path / "dpr.json"
    path.write_bytes(b'[\n{"question": "q", "answers": ["a"],\n "ctxs": [{"text": "caf\xe9"}]}\n]\n')
    with pytest.raises(DatasetError, match=r"dpr\.json: line 3: not valid UTF-8"):
        read_examples(path)


def test_truncated_gzip_names_file_and_last_good_line(tmp_path):
    full = gzip.compress(jsonl_bytes([{**row(i), "question": f"question {i} " * 20} for i in range(3000)]))
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(full[: len(full) // 2])
    with pytest.raises(DatasetError) as e:
        read_examples(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: after line ") and "truncated or corrupt" in msg and "\n" not in msg


def test_not_a_gzip_file(tmp_path):
    path = tmp_path / "plain.jsonl.gz"
    path.write_bytes(jsonl_bytes([row(0)]))
    with pytest.raises(DatasetError, match=r"plain\.jsonl\.gz: not a valid gzip file"):
        read_examples(path)


@pytest.mark.parametrize("name", ["bom.jsonl", "bom.jsonl.gz", "bom.json"])
def test_utf8_bom_is_read(tmp_path, name):
    data = jsonl_bytes([row(0), row(1)]) if ".jsonl" in name else json.dumps([GOOD]).encode()
    data = b"\xef\xbb\xbf" + data
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    exs = read_examples(path)
    assert exs[0].question == "who wrote hamlet" and exs[0].id in ("q0", "q1")


def test_too_deeply_nested_json_names_line(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + "[" * 100_000 + "\n")
    with pytest.raises(DatasetError, match=r"deep\.jsonl: line 2: not valid JSON \(RecursionError"):
        read_examples(path)


def test_bad_json_in_dpr_file_names_line(tmp_path):
    path = tmp_path / "dpr.json"
    path.write_text('[\n{"question": "q", "answers": ["a"], "ctxs": []},\n{"question": }\n]\n')
    with pytest.raises(DatasetError, match=r"dpr\.json: line 3: not valid JSON"):
        read_examples(path)


# -- settings ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "key", "value"),
    [
        (["limit=-1"], "limit", "-1"),
        (["limit=0"], "limit", "0"),
        (["limit=abc"], "limit", "'abc'"),
        (["limit=2.5"], "limit", "2.5"),
        (["limit=true"], "limit", "True"),
        (["batch_size=0"], "batch_size", "0"),
        (["dataset.top_k=0"], "dataset.top_k", "0"),
        (["latency.samples=-1"], "latency.samples", "-1"),
        (["latency.warmup=-2"], "latency.warmup", "-2"),
        (["dataset.skip_unanswerable=maybe"], "dataset.skip_unanswerable", "'maybe'"),
        (["method=bm25", "method.top_k=0"], "method.top_k", "0"),
        (["method=bm25", "method.scorer.b=1.5"], "method.scorer.b", "1.5"),
        (["method=longllmlingua", "method.rate=0"], "method.rate", "0"),
        (["method=longllmlingua", "method.rate=1.2"], "method.rate", "1.2"),
        (["method=selective_context", "method.reduce_ratio=-0.1"], "method.reduce_ratio", "-0.1"),
        (["method=exit", "method.threshold=nan"], "method.threshold", "nan"),
        (["method=exit", "method.batch_size=0"], "method.batch_size", "0"),
        (["method=csm", "method.dedup_threshold=inf"], "method.dedup_threshold", "inf"),
        (["method=compselect", "method.seed=1.5"], "method.seed", "1.5"),
        (["method=compselect", "method.extractor_max_new_tokens=0"], "method.extractor_max_new_tokens", "0"),
        (["method=edc2", "method.llm.batch_size=0"], "method.llm.batch_size", "0"),
        (["generator.batch_size=0"], "generator.batch_size", "0"),
    ],
)
def test_out_of_range_setting_names_key_value_and_range(overrides, key, value):
    with pytest.raises(ConfigError) as e:
        validate_config(compose_cfg(*overrides))
    msg = str(e.value)
    assert msg.startswith(f"{key}={value}: must be ") and "\n" not in msg


@pytest.mark.slow
def test_every_shipped_config_is_accepted():
    methods = sorted(p.stem for p in (REPO / "conf" / "method").glob("*.yaml"))
    generators = sorted(p.stem for p in (REPO / "conf" / "generator").glob("*.yaml"))
    for profile in ("embedded", "paper"):
        for m in methods:
            validate_config(compose_cfg(f"method={m}", f"profile={profile}"))
        for g in generators:
            validate_config(compose_cfg(f"generator={g}", f"profile={profile}"))
    validate_config(compose_cfg("limit=3", "latency.samples=0", "method=longllmlingua", "method.rate=1"))


def test_rules_apply_to_any_method_by_key_name():
    cfg = OmegaConf.create({"method": {"stage": {"_target_": "x.Y", "top_k": None, "cut_threshold": 0.2}}})
    validate_config(cfg)  # null leaves a knob to the component; absent top-level keys are not required
    cfg.method.stage.cut_threshold = "high"
    with pytest.raises(ConfigError, match=r"^method\.stage\.cut_threshold='high': must be a finite number"):
        validate_config(cfg)
    ok = OmegaConf.create({"method": {"options": {"context_budget": "+200"}, "budget": 300}})
    validate_config(ok)  # library pass-through options are not checked


def test_load_dataset_rejects_bad_limit_and_top_k():
    path = str(DATA / "nq" / "test.jsonl.gz")
    with pytest.raises(ConfigError, match=r"^limit=-1: must be an integer >= 1 or null"):
        load_dataset(DatasetSpec("nq", path, 5, "none", -1))
    with pytest.raises(ConfigError, match=r"^dataset\.top_k=0: must be an integer >= 1"):
        load_dataset(DatasetSpec("nq", path, 0, "none", 1))


# -- the command line ---------------------------------------------------------------------------------------------


def harness(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "harness", "progress=false", f"results_dir={tmp_path}", *overrides]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)


def no_records(folder: Path) -> bool:
    return not [p for p in folder.rglob("*") if p.name in ("run.json", "predictions.jsonl", "summary.json")]


def test_cli_bad_setting_prints_one_line_without_traceback(tmp_path):
    r = harness(tmp_path, "method=naive", "limit=-1")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr and r.stdout == ""
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("error: limit=-1: must be an integer >= 1")
    assert no_records(tmp_path)


def test_cli_bad_data_prints_one_line_and_verbose_shows_the_traceback(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(jsonl_bytes([row(0)]) + b'{"question": "\xff"}\n')
    r = harness(tmp_path / "runs", "method=naive", f"dataset.path={bad}")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line == f"error: {bad}: line 2: not valid UTF-8 (byte 0xff at column 15); re-encode the file as UTF-8"
    assert no_records(tmp_path)
    r = harness(tmp_path / "runs", "method=naive", f"dataset.path={bad}", "hydra.verbose=true")
    assert r.returncode != 0 and "Traceback" in r.stderr and "DatasetError" in r.stderr


@pytest.mark.parametrize("content", [b"", b"\n\n", b"[]"], ids=["empty", "blank-lines", "empty-dpr-json"])
def test_cli_an_empty_dataset_file_is_one_line_naming_the_file(tmp_path, content):
    empty = tmp_path / ("empty.json" if content == b"[]" else "empty.jsonl")
    empty.write_bytes(content)
    r = harness(tmp_path / "runs", "method=naive", f"dataset.path={empty}")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line == f"error: {empty}: no example to evaluate: the file holds no example"
    assert no_records(tmp_path / "runs")


def test_cli_a_file_whose_every_example_is_skipped_is_one_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(jsonl_bytes([row(0, ["the"]), row(1, ["*"])]))
    r = harness(tmp_path / "runs", "method=naive", f"dataset.path={path}", "dataset.skip_unanswerable=true")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        f"error: {path}: no example to evaluate: every one of its 2 examples has no usable gold answer and was skipped"
    )


def test_cli_a_shard_that_selects_no_example_is_one_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(jsonl_bytes([row(0), row(1)]))
    r = harness(tmp_path / "runs", "method=naive", f"dataset.path={path}", "shard=2/3")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line.startswith(f"error: {path}: shard=2/3 selects no example: the split gives 2")
    assert no_records(tmp_path / "runs")
