"""Prompt-lookup speculative decoding (harness.lm.speculative): the same greedy tokens in fp32 for every generating
stage, with the real embedded model; the setting is recorded, and keys the call cache only where it could change
the tokens."""

from __future__ import annotations

import sqlite3

import pytest

from harness.config import compose_config
from harness.lm import cache, get_lm, release, speculative
from harness.lm.speculative import Speculation
from harness.protocols import MethodEnv
from harness.runner import build_method, get_generator, key_config
from harness.validate import ConfigError
from tests.conftest import LM

ON = {"method": "ngram", "num_tokens": 6, "lookup_max": 4, "lookup_min": 2, "max_batch": 1}


def test_a_setting_parses_validates_and_maps_to_vllms_per_batch_schedule():
    spec = Speculation.parse(ON)
    assert spec == Speculation() and Speculation.parse({"method": None}) is None and Speculation.parse(None) is None
    assert spec.vllm_config()["num_speculative_tokens_per_batch_size"] == [(1, 1, 6), (2, 2, 0)]
    assert spec.applies("float32") and not spec.applies("bfloat16")
    assert speculative.active(ON, "bfloat16") is None
    assert speculative.active({**ON, "dtypes": ["float32", "bfloat16"]}, "bfloat16") is not None
    with pytest.raises(ConfigError, match="unknown key"):
        Speculation.parse({**ON, "window": 3})
    with pytest.raises(ConfigError, match="lookup_min <= lookup_max"):
        Speculation.parse({**ON, "lookup_min": 5})


def test_the_run_setting_reaches_every_lm_and_stays_out_of_the_runs_key():
    cfg = compose_config(overrides=["method=compselect"])
    assert speculative.default() == Speculation.parse(cfg.models.speculative)
    assert cfg.generator.speculative == cfg.models.speculative
    key = key_config(cfg)
    assert "speculative" not in key["generator"] and "speculative" not in key["models"]
    off = compose_config(overrides=["method=compselect", "models.speculative=null"])
    assert key_config(off) == key  # the same tokens: the same run folder and key


def _rows(path) -> int:
    with sqlite3.connect(path) as con:
        return con.execute("SELECT count(*) FROM calls").fetchone()[0]


def test_the_setting_is_recorded_and_keys_the_call_cache_only_where_it_could_change_tokens(tmp_path, nq5):
    from harness.prompt import build_messages

    prompt = [build_messages(nq5[0].question, [p.render() for p in nq5[0].passages[:2]])]
    cache.configure(True, str(tmp_path / "c.sqlite"))
    try:
        plain = get_lm(LM, engine="transformers", dtype="float32", speculative=None)
        spec = get_lm(LM, engine="transformers", dtype="float32", speculative=ON)
        assert plain.info["speculative"] is None and spec.info["speculative"]["num_tokens"] == 6
        first = plain.generate(prompt, 12)
        again = spec.generate(prompt, 12)  # fp32: the same tokens, so the same call
        assert again[0].replayed and again[0].token_ids == first[0].token_ids and _rows(tmp_path / "c.sqlite") == 1
        bf16 = get_lm(LM, engine="transformers", dtype="bfloat16", speculative={**ON, "dtypes": ["bfloat16"]})
        bf16_plain = get_lm(LM, engine="transformers", dtype="bfloat16", speculative=None)
        assert not bf16.generate(prompt, 4)[0].replayed and not bf16_plain.generate(prompt, 4)[0].replayed
        assert _rows(tmp_path / "c.sqlite") == 3  # bf16 with and without: two keys
    finally:
        cache.configure(None, None)
        release(lambda lm: lm.info["engine"] == "transformers")


@pytest.mark.slow
@pytest.mark.vllm
def test_the_shared_generator_answers_the_same_with_and_without(nq5):
    import numba

    from harness.prompt import build_messages

    prompts = [build_messages(e.question, [p.render() for p in e.passages]) for e in nq5[:3]]
    try:
        on = get_lm(LM, dtype="float32", speculative=ON)
        off = get_lm(LM, dtype="float32", speculative=None)
        one_at_a_time = [on.generate([p], 32)[0].token_ids for p in prompts]  # batch 1: it speculates
        # the proposer's numba-parallel code ran on numba's own pool, not on a second OpenMP runtime beside
        # torch's (harness.lm.vllm_engine.keep_one_openmp)
        assert numba.threading_layer() == "workqueue"
        assert one_at_a_time == [c.token_ids for c in off.generate(prompts, 32)]
        assert [c.token_ids for c in on.generate(prompts, 32)] == one_at_a_time  # a batch: it does not
        assert on.info["generation_engine_settings"]["engine_kwargs"]["speculative_config"]["method"] == "ngram"
        on.answer_nll(prompts[:1], ["x"])  # scoring runs on its own engine without speculation
        assert len(on.engines()) == 2 and "speculative_config" not in on.info["engine_settings"]["engine_kwargs"]
    finally:
        release(lambda lm: lm.ref == LM and lm.info["engine"] == "vllm")


GENERATING = ["compselect", "finefilter", "recomp_abs", "refiner", "edc2"]


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.parametrize("method", GENERATING)
def test_every_generating_stage_compresses_the_same_with_and_without(method, nq5):
    """Each method once with speculation off and once on (fresh LMs each time, no call cache, batch 1, where it
    speculates): the same documents and the same intermediate outputs. One NQ question (two until issue 95): every
    generating stage of the method still decodes on it with the proposer active, so a token that speculation
    changes still fails the test."""
    cfg = compose_config(overrides=[f"method={method}"])
    generator, _ = get_generator(cfg.generator)
    outs = []
    for setting in (None, cfg.models.speculative):
        speculative.configure(setting)
        m = build_method(cfg.method)
        m.bind(MethodEnv(count_tokens=generator.count_tokens, generator=generator))
        outs.append([m.compress_batch([e])[0] for e in nq5[:1]])
        release(lambda lm: lm.info.get("adapter") is not None or lm.ref != cfg.generator.model)
    speculative.configure(cfg.models.speculative)
    assert [c.documents for c in outs[0]] == [c.documents for c in outs[1]]
    strip = lambda meta: {k: v for k, v in meta.items() if "seconds" not in k and k != "timings"}  # noqa: E731
    assert [strip(c.meta) for c in outs[0]] == [strip(c.meta) for c in outs[1]]
