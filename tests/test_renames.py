"""Moving a method's code or its trained artifacts keeps the keys of the runs made before the move
(``harness/renames.py``): the published runs of every moved method are keyed exactly as this checkout composes
them, up to where the checkout and the data sit on this machine."""

from __future__ import annotations

import json

import pytest

from harness.config import compose_config
from harness.provenance import REPO_ROOT
from harness.records import config_key
from harness.renames import as_keyed
from harness.runner import key_config
from tests.conftest import REPO

RUNS = REPO / "leaderboard" / "runs" / "embedded" / "smollm2-135m-instruct-vllm" / "nq"
SHUFFLED = "dataset.sample=shuffled,dataset.seed=0"
MOVED = (
    "exit",
    "compselect",
    "compselect_direct",
    "compselect_no_extractor",
    "compselect_no_reranker",
    "compselect_no_truncator",
    "compselect_random_truncation",
    "finefilter",
    "csm",
    "csm_e2e",
    "csm_sentences",
    "ci_oracle",
    "ci_oracle_sentences",
    "edc2",
)


@pytest.mark.parametrize("variant", MOVED)
def test_a_published_run_of_a_moved_method_keeps_its_key(variant):
    run = json.loads((RUNS / variant / SHUFFLED / "run.json").read_text())
    published = run["config"]
    overrides = [f"method={variant}", "dataset=nq", "dataset.sample=shuffled", "dataset.seed=0"]
    # as the published block was made: SmolLM2 on vLLM asked with the paper's prompt, the methods' LMs at dtype auto
    # and CompSelect showing the kept clue sentences themselves, ranked by the reranker reading them alone
    then = ["generator=smollm2_vllm", "generator.prompt=paper", "generator.answer=paper", "models.lm_dtype=auto"]
    then += ["models.compselect.clue_context=sentence", "models.compselect.reranker_input=clue"]
    here = key_config(compose_config("config", [*overrides, *then], profile_env=False))
    # the folders the published run was made in: the checkout (its CompSelect artifacts) and the data
    repo_then = published["models"]["compselect"]["artifacts"].removesuffix("/methods/compselect/artifacts/embedded")
    data_then = published["dataset"]["path"].removesuffix("/nq/test.jsonl.gz")
    data_now = here["dataset"]["path"].removesuffix("/nq/test.jsonl.gz")
    text = json.dumps(here).replace(data_now, data_then).replace(str(REPO_ROOT), repo_then)
    assert config_key(json.loads(text)) == run["key"], variant


def test_only_the_moved_names_are_mapped_back():
    root = str(REPO_ROOT)
    node = {
        "_target_": "methods.csm.method.CSMSelect",
        "weights": f"{root}/methods/csm/artifacts/embedded/csm_st_passage_nq",
        "models": {"exit": {"adapter": f"{root}/methods/exit/artifacts/embedded/classifier"}},
        "others": ["methods.rerank.RerankSelect", f"{root}/methods/exit/artifacts_extra", 3, None],
    }
    assert as_keyed(node) == {
        "_target_": "methods.ci_value.CSMSelect",
        "weights": f"{root}/methods/ci_value/artifacts/embedded/csm_st_passage_nq",
        "models": {"exit": {"adapter": f"{root}/methods/exit_artifacts/embedded/classifier"}},
        "others": ["methods.rerank.RerankSelect", f"{root}/methods/exit/artifacts_extra", 3, None],
    }


@pytest.mark.parametrize(
    ("setting", "paper", "other"), [("clue_context", "sentence", "window"), ("reranker_input", "clue", "titled")]
)
def test_compselect_settings_change_only_compselect_keys_and_only_away_from_the_paper(setting, paper, other):
    """CompSelect's ``clue_context`` and ``reranker_input`` came after runs were made: at the paper's value (what
    those runs did) each leaves the key as it was; another value changes CompSelect's key and no other method's."""
    from omegaconf import open_dict

    def key(method: str, value: str, drop: bool = False) -> str:
        cfg = compose_config("config", [f"method={method}", f"models.compselect.{setting}={value}"])
        if drop:  # the config before the setting existed
            with open_dict(cfg):
                if setting in cfg.method:
                    del cfg.method[setting]
                del cfg.models.compselect[setting]
        return config_key(key_config(cfg))

    assert key("compselect", paper) == key("compselect", paper, drop=True)
    assert key("compselect", other) != key("compselect", paper)
    assert key("finefilter", other) != key("finefilter", paper)
    assert key("exit", other) == key("exit", paper) == key("exit", paper, drop=True)


def _moved(node, checkout: str):
    """``node`` as if made in the checkout folder ``checkout`` (its sibling folders moved along)."""
    here, parent = str(REPO_ROOT.resolve()), str(REPO_ROOT.resolve().parent)
    if isinstance(node, dict):
        return {k: _moved(v, checkout) for k, v in node.items()}
    if isinstance(node, list):
        return [_moved(v, checkout) for v in node]
    if isinstance(node, str) and node.startswith(here + "/"):
        return checkout + node[len(here) :]
    if isinstance(node, str) and node.startswith(parent + "/"):
        return checkout.rsplit("/", 1)[0] + node[len(parent) :]
    return node


def test_a_run_folder_made_in_another_checkout_folder_resumes_here(tmp_path, monkeypatch):
    """The key holds absolute paths (artifacts, data): a folder made in another clone has another key, and resumes
    when the paths are all that differ, each moved from one old checkout folder; anything else still refuses."""
    from harness.records import RUN, RunFolderMismatch, RunRecords
    from harness.renames import relocated

    monkeypatch.delenv("RAG_HARNESS_DATA", raising=False)  # the data beside the checkout, as in a clone

    here = key_config(compose_config("config", ["method=compselect", "dataset=nq"]))
    there = _moved(here, "/elsewhere/ws/clone")
    assert there != here and config_key(there) != config_key(here)
    assert there["dataset"]["path"].startswith("/elsewhere/ws/")  # ../shared/data moved along
    assert relocated(there, here)
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / RUN).write_text(json.dumps({"key": config_key(there), "config": there}))
    RunRecords(folder, config_key(here), here)  # resumes
    assert json.loads((folder / RUN).read_text())["key"] == config_key(there)  # the key it was made with

    same_data = {**there, "dataset": here["dataset"]}  # made in another clone, reading the very same data file
    assert relocated(same_data, here)
    elsewhere = {**there, "dataset": _moved(here["dataset"], "/other/place/clone")}  # data not beside that clone
    assert not relocated(elsewhere, here)
    other_artifacts = json.loads(json.dumps(there).replace("artifacts/embedded", "artifacts/embedded_old"))
    assert not relocated(other_artifacts, here)
    other_setting = json.loads(json.dumps(there))
    other_setting["method"]["clue_context"] = "passage"
    assert not relocated(other_setting, here)
    (folder / RUN).write_text(json.dumps({"key": config_key(other_setting), "config": other_setting}))
    with pytest.raises(RunFolderMismatch, match="another configuration"):
        RunRecords(folder, config_key(here), here)
    data_only = {**here, "dataset": there["dataset"]}  # the checkout here, its data beside another folder
    assert not relocated(data_only, here)
