"""The compressors' backbone switch (issue 94): ``backbone=qwen05b`` puts every compressor's language model on
Qwen2.5-Coder-0.5B-Instruct and nothing else; the default leaves every earlier run's key as it was; a run on the
switched backbone names it in its folder, its record and its leaderboard row; each prompted or scoring method
compresses a real question on it."""

from __future__ import annotations

import json

import pytest
from conftest import LM as SMOL
from conftest import QWEN05, needs_qwen05, release_built_since

from harness.config import compose_config
from harness.runner import backbone, key_config

# each method and where its config names the LM it calls
LM_OF = {
    "recomp_abs": lambda c: c.method.model,
    "refiner": lambda c: c.method.model,
    "edc2": lambda c: c.method.llm.model,
    "longllmlingua": lambda c: c.method.model,
    "selective_context": lambda c: c.method.model,
    "compselect_direct": lambda c: c.method.lm,
    "compselect": lambda c: c.method.lm,
    "finefilter": lambda c: c.method.lm,
}
PROMPTED = ["recomp_abs", "refiner", "edc2", "longllmlingua", "selective_context", "compselect_direct"]


@pytest.mark.parametrize("method", sorted(LM_OF))
def test_the_switch_moves_every_compressor_lm_and_nothing_else(method):
    base = compose_config(overrides=[f"method={method}"], profile_env=False)
    switched = compose_config(overrides=[f"method={method}", "backbone=qwen05b"], profile_env=False)
    assert LM_OF[method](base) == SMOL and LM_OF[method](switched) == QWEN05
    assert switched.generator == base.generator  # the reader stays what generator= says
    for encoder in ("encoder", "csm_encoder", "recomp_extr", "reranker"):
        assert switched.models[encoder] == base.models[encoder]
    assert switched.models.exit == base.models.exit  # EXIT's classifier is MiniLM, no LM to switch
    if method in ("compselect", "finefilter"):  # trained on the backbone: its own artifacts
        assert base.method.extractor != switched.method.extractor
        assert switched.method.extractor.endswith("artifacts/embedded-qwen05b/extractor")


def test_the_default_backbone_adds_nothing_to_a_run_key():
    cfg = compose_config(overrides=["method=compselect"], profile_env=False)
    assert "backbone" not in cfg and "backbone" not in key_config(cfg)
    assert backbone(cfg) == {"switch": None, "lm": SMOL, "compselect_lm": SMOL}
    switched = compose_config(overrides=["method=compselect", "backbone=qwen05b"], profile_env=False)
    assert key_config(switched)["backbone"]["lm"] == QWEN05
    assert backbone(switched) == {"switch": "qwen25-coder-05b-instruct", "lm": QWEN05, "compselect_lm": QWEN05}


@pytest.mark.slow
def test_compselect_on_an_untrained_backbone_is_one_line_naming_its_artifacts(tmp_path):
    from harness import api
    from harness.artifacts import ArtifactError

    with pytest.raises(ArtifactError) as e:
        api.evaluate("compselect", "nq", 1, ["backbone=qwen05b"], results_dir=str(tmp_path), latency={"samples": 0})
    line = str(e.value)
    assert "\n" not in line and "embedded-qwen05b" in line and "backbone=" in line


# the prompted methods by the 0.5B instance they call: RECOMP-abs, Refiner, EDC2 and compselect_direct generate on
# one vLLM engine; LongLLMLingua scores on transformers, Selective-Context on a vLLM engine without speculation
SHARING = [("recomp_abs", "refiner", "edc2", "compselect_direct"), ("longllmlingua",), ("selective_context",)]


def check_05b_row(method: str, ev) -> None:
    """The row ran on the 0.5B, names the switch, and its context holds something (less than the input, except
    EDC2's fallback to every passage)."""
    assert "backbone=qwen05b" in str(ev.folder), method
    assert ev.summary["backbone"]["switch"] == "qwen25-coder-05b-instruct"
    info = json.dumps(ev.summary["method_info"])
    assert "qwen2.5-coder-0.5b-instruct" in info and "smollm2" not in info, (method, info)
    record = ev.records.iloc[0]
    assert record["context"].strip(), method
    if method == "edc2":  # it may fall back to every passage (the 0.5B's summaries: research/backbone)
        meta = record["meta"]
        assert meta["llm_calls"] == len(meta["clusters"]) and all(s.strip() for s in meta["summaries"])
    else:
        assert ev.summary["compressed_tokens"] < ev.summary["original_tokens"], method


@pytest.mark.slow
@needs_qwen05
def test_every_prompted_method_compresses_a_question_on_the_05b_and_names_it(tmp_path):
    """One NQ question per method: the smallest slice on which a method that does not reach the 0.5B, or reaches
    it and keeps nothing, fails; the row's name, folder and record carry the switch."""
    from harness import api, resources
    from leaderboard.collect import collect

    assert sorted(m for group in SHARING for m in group) == sorted(PROMPTED)
    for group in SHARING:
        before = set(resources.loaded())
        for method in group:
            evaluated = api.evaluate(
                method, "nq", 1, ["backbone=qwen05b"], results_dir=str(tmp_path), latency={"samples": 0}
            )
            check_05b_row(method, evaluated)
        release_built_since(before, spare=lambda lm: lm.ref == SMOL)  # one 0.5B instance at a time (3-4 GB)
    rows = collect(tmp_path)
    assert sorted(rows.variant) == sorted(f"{m}[backbone=qwen05b]" for m in PROMPTED)
    assert set(rows.backbone) == {"qwen25-coder-05b-instruct"}


def test_the_backbone_script_switches_every_step_and_reads_with_the_05b():
    import subprocess

    from harness.provenance import REPO_ROOT

    def dry(step: str) -> list[list[str]]:
        env = {"DRY_RUN": "1", "PATH": "/usr/bin:/bin"}
        done = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "backbone.sh"), step], env=env, capture_output=True)
        assert done.returncode == 0, done.stderr
        return [line.split() for line in done.stdout.decode().splitlines()]

    probe = dry("probe")
    assert len(probe) == 2 and "backbone=qwen05b" in probe[0] and "backbone=qwen05b" not in probe[1]
    assert all("dataset.split=train" in c and "limit=20" in c for c in probe)
    (compress,), (read,) = dry("compress"), dry("read05b")
    for c in (compress, read):
        assert "backbone=qwen05b" in c and "limit=200" in c and "dataset.sample=shuffled" in c
    assert "generator=qwen25_05b_vllm" in read and not any(a.startswith("generator=") for a in compress)
    methods = next(a for a in compress if a.startswith("method=")).removeprefix("method=").split(",")
    assert set(methods) == {"compselect", "finefilter", *PROMPTED, "edc2_no_escape"}
    ((*_, timed),) = [c[: c.index("--datasets")] for c in dry("time")]  # one latency pass: both backbones
    from tools.latency_pass import split_variants

    assert split_variants(timed)[:3] == ["full", "compselect", "compselect[backbone=qwen05b]"]
    assert set(split_variants(timed)) == {"full", *methods, *(f"{m}[backbone=qwen05b]" for m in methods)}
