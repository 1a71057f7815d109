"""Trained artifacts are checked against their manifest's SHA-256 before they load (``harness.artifacts``): a
damaged copy stops with one line naming the file, both hashes and the command that re-makes it; an untouched
copy passes. Hashing only: no model loads."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from harness.artifacts import ArtifactError, check_artifact, expected_hashes
from harness.lm.models import file_sha256
from harness.validate import ConfigError
from methods.csm.method import remake_command
from tests.conftest import REPO

ARTIFACTS = REPO / "methods"
# (folder to copy, the artifact inside it, the file to damage, the command that re-makes it)
CASES = {
    "compselect_extractor": (
        "compselect/artifacts/embedded",
        "extractor",
        "adapter_model.safetensors",
        "python -m methods.compselect.train",
    ),
    "compselect_reranker": (
        "compselect/artifacts/embedded",
        "reranker",
        "adapter_model.safetensors",
        "python -m methods.compselect.train",
    ),
    "exit_classifier": (
        "exit/artifacts/embedded",
        "classifier",
        "adapter_model.safetensors",
        "python -m methods.exit.train",
    ),
    "csm_st_head": ("csm/artifacts/embedded/csm_st_passage_nq", ".", "head.safetensors", "python -m methods.csm.train"),
    "csm_e2e_config": ("csm/artifacts/embedded/csm_e2e_passage_tqa", ".", "config.json", "python -m methods.csm.train"),
}


def copy_artifact(tmp_path: Path, case: str) -> tuple[Path, Path, str]:
    """A copy of the case's folder (manifest and the artifact's files only); returns the artifact folder, the
    file to damage and the re-make command."""
    src, sub, damaged, remake = CASES[case]
    root = tmp_path / Path(src).name
    shutil.copytree(
        ARTIFACTS / src, root, ignore=lambda d, names: [n for n in names if n in ("labels", "set4_training")]
    )
    folder = (root / sub).resolve()
    return folder, folder / damaged, remake


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_untouched_copy_passes_and_every_listed_file_is_checked(tmp_path, case):
    folder, damaged, remake = copy_artifact(tmp_path, case)
    hashes = expected_hashes(folder)
    assert damaged in hashes and hashes[damaged] == file_sha256(damaged)
    check_artifact(folder, remake)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_truncated_file_is_one_line_naming_the_file_both_hashes_and_the_command(tmp_path, case):
    folder, damaged, remake = copy_artifact(tmp_path, case)
    expected = file_sha256(damaged)
    data = damaged.read_bytes()
    damaged.write_bytes(data[: len(data) // 2])
    with pytest.raises(ArtifactError) as e:
        check_artifact(folder, remake)
    message = str(e.value)
    assert "\n" not in message and isinstance(e.value, ConfigError)  # the CLI prints it as one line
    assert str(damaged) in message and remake in message
    assert f"expected {expected}" in message and f"found {file_sha256(damaged)}" in message


def test_a_missing_file_or_folder_is_one_line_too(tmp_path):
    folder, damaged, remake = copy_artifact(tmp_path, "exit_classifier")
    damaged.unlink()
    with pytest.raises(ArtifactError, match=r"expected [0-9a-f]{64}, found unreadable \(FileNotFoundError"):
        check_artifact(folder, remake)
    with pytest.raises(ArtifactError, match=re.escape("not found; re-make it with `python -m methods.exit.train`")):
        check_artifact(tmp_path / "nowhere", "python -m methods.exit.train")


def test_a_folder_without_a_manifest_is_not_checked(tmp_path):
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_model.safetensors").write_bytes(b"anything")
    assert expected_hashes(tmp_path / "adapter") == {}
    check_artifact(tmp_path / "adapter", "python -m methods.exit.train")


def test_the_methods_check_their_artifacts_when_they_are_bound(tmp_path):
    """CompSelect, EXIT and CSM stop at ``bind`` (before any example, before any model loads) on a damaged copy."""
    from harness.protocols import MethodEnv
    from methods.compselect.method import CompSelect
    from methods.csm.method import CSMSelect
    from methods.exit.method import Exit

    env = MethodEnv(count_tokens=len, generator=None)
    extractor, damaged, _ = copy_artifact(tmp_path / "c", "compselect_extractor")
    damaged.write_bytes(b"")
    with pytest.raises(ArtifactError, match=re.escape("methods.compselect.train")):
        CompSelect("embedded:smollm2-135m-instruct", extractor=str(extractor), truncation="none").bind(env)
    classifier, damaged, _ = copy_artifact(tmp_path / "e", "exit_classifier")
    damaged.write_bytes(b"")
    with pytest.raises(ArtifactError, match=re.escape("methods.exit.train")):
        Exit("embedded:all-minilm-l6-v2", adapter=str(classifier), kind="cross_encoder").bind(env)
    head, damaged, _ = copy_artifact(tmp_path / "s", "csm_e2e_config")
    damaged.write_bytes(b"{}")
    with pytest.raises(
        ArtifactError, match=re.escape("python -m methods.csm.train --config-name train/csm_e2e dataset=triviaqa")
    ):
        CSMSelect(str(head)).bind(env)


def test_the_csm_remake_command_names_the_heads_training():
    assert remake_command("x/csm_st_passage_nq") == "python -m methods.csm.train dataset=nq"
    assert (
        remake_command("x/csm_e2e_passage_tqa")
        == "python -m methods.csm.train --config-name train/csm_e2e dataset=triviaqa"
    )


@pytest.mark.slow
def test_the_command_line_stops_before_any_example_with_one_line(tmp_path):
    import os
    import subprocess
    import sys

    head, damaged, remake = copy_artifact(tmp_path, "csm_st_head")
    damaged.write_bytes(damaged.read_bytes()[:100])
    cmd = [sys.executable, "-m", "harness", "method=csm", "dataset=nq", "limit=2", f"method.weights={head}"]
    cmd += ["generator=smollm2_transformers", f"results_dir={tmp_path / 'results'}", "latency.samples=0"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ})
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: {damaged}: SHA-256 does not match its manifest: expected ") and remake in line
    assert all(p.stat().st_size == 0 for p in (tmp_path / "results").rglob("predictions.jsonl"))  # none ran


def tiny_base_and_adapter(root: Path) -> tuple[Path, Path]:
    """A random tiny Llama and a LoRA adapter of it, saved as folders (no model of the profile loads)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1)
    config.num_attention_heads, config.num_key_value_heads = 4, 2
    base, adapter = root / "base", root / "adapter"
    LlamaForCausalLM(config).save_pretrained(base)
    tiny_tokenizer().save_pretrained(base)
    lora = get_peft_model(LlamaForCausalLM.from_pretrained(base), LoraConfig(r=2, target_modules=["q_proj"]))
    torch.nn.init.normal_(lora.base_model.model.model.layers[0].self_attn.q_proj.lora_B["default"].weight)
    lora.save_pretrained(adapter)
    return base, adapter


def tiny_tokenizer():
    """A word-level tokenizer of 64 words (``merged_folder`` saves the base's tokenizer beside the weights)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(64)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0")


def test_damaged_merged_weights_are_built_again_with_one_warning(tmp_path, monkeypatch, caplog):
    """Merged (base + LoRA) weights are a cache: ``merged.json`` lists every file's SHA-256, and a truncated
    weights file (or an older folder without hashes) is built again, with one warning naming the file."""
    from transformers import AutoModelForCausalLM

    from harness.lm.loading import merged_folder

    monkeypatch.setenv("RAG_HARNESS_CACHE", str(tmp_path / "cache"))
    base, adapter = tiny_base_and_adapter(tmp_path)
    folder = Path(merged_folder(str(base), str(adapter)))
    weights = folder / "model.safetensors"
    sound = file_sha256(weights)
    assert json_files(folder)["model.safetensors"] == sound
    assert merged_folder(str(base), str(adapter)) == str(folder) and not caplog.records  # whole: reused as is

    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with caplog.at_level("WARNING"):
        assert merged_folder(str(base), str(adapter)) == str(folder)
    assert len([r for r in caplog.records if r.levelname == "WARNING"]) == 1 and str(weights) in caplog.text
    assert file_sha256(weights) == sound and AutoModelForCausalLM.from_pretrained(folder) is not None

    (folder / "merged.json").write_text('{"base": "an older cache"}')
    caplog.clear()
    with caplog.at_level("WARNING"):
        merged_folder(str(base), str(adapter))
    assert (
        len(caplog.records) == 1
        and "without file hashes" in caplog.text
        and json_files(folder)["model.safetensors"] == sound
    )


def json_files(folder: Path) -> dict:
    return json.loads((folder / "merged.json").read_text())["files"]


def test_the_generator_an_artifact_was_trained_through_is_read_from_its_manifest(tmp_path, caplog):
    """Both committed layouts (a CSM head's ``generator.name``, CompSelect's ``config.generator.name`` beside its stage
    folders); a run on another generator gets one warning line, the same one none."""
    from types import SimpleNamespace

    from harness.artifacts import trained_through, warn_if_trained_elsewhere

    art = REPO / "methods"
    head = json.loads((art / "csm/artifacts/embedded/csm_st_passage_nq/manifest.json").read_text())
    assert trained_through(art / "csm/artifacts/embedded/csm_st_passage_nq") == head["generator"]["name"]
    stages = json.loads((art / "compselect/artifacts/embedded/manifest.json").read_text())
    assert trained_through(art / "compselect/artifacts/embedded/extractor") == stages["config"]["generator"]["name"]
    assert trained_through(tmp_path) is None
    with caplog.at_level("WARNING", logger="harness.artifacts"):
        warn_if_trained_elsewhere("m", art / "compselect/artifacts/embedded/extractor", SimpleNamespace(name="g"), "r")
        warn_if_trained_elsewhere(
            "m",
            art / "compselect/artifacts/embedded/extractor",
            SimpleNamespace(name=stages["config"]["generator"]["name"]),
            "r",
        )
    assert (
        len(caplog.records) == 1
        and f"through generator {stages['config']['generator']['name']!r}, not this run's 'g'" in caplog.text
    )
