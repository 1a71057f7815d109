"""Token accounting (``harness.lm.meter``): what each stage's model calls read and wrote, on the embedded models."""

from __future__ import annotations

import pytest

from harness.prompt import build_messages
from tests.conftest import LM

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def hf_lm():
    from harness.lm import get_lm

    return get_lm(LM, engine="transformers", dtype="float32")


@pytest.fixture(scope="module")
def prompts(nq5):
    return [build_messages(e.question, [p.render() for p in e.passages[:2]]) for e in nq5[:2]]


def test_groups_sum_per_model_and_op_and_share_a_batch():
    from harness.lm.meter import groups

    entries = [
        {"model": "m", "adapter": None, "op": "generate", "each": [[100, 5], [80, 7]]},
        {"model": "e", "adapter": "r", "op": "forward", "each": [[4, 30, 0]]},
        {"model": "m", "adapter": None, "op": "generate", "each": [[60, 1]]},
    ]
    one = groups(entries)
    assert [(g["model"], g["op"], g["n"], g["read"], g["written"]) for g in one] == [
        ("m", "generate", 3, 240, 13),
        ("e", "forward", 1, 120, 0),  # B x T
    ]
    assert one[0]["each"] == [[100, 5], [80, 7], [60, 1]] and one[1]["each"] == [[4, 30, 0]]
    shared = groups(entries, share=4)  # a batch of four examples: each gets a quarter, no per-sequence sizes
    assert [(g["n"], g["read"], g["written"]) for g in shared] == [(0.75, 60.0, 3.25), (0.25, 30.0, 0.0)]
    assert all("each" not in g for g in shared)


@pytest.mark.slow
def test_an_lm_call_counts_its_prompt_and_what_it_wrote_replayed_or_not(tmp_path, hf_lm, prompts):
    from harness.lm import cache
    from harness.lm.meter import groups, metered

    cache.configure(True, str(tmp_path / "c.sqlite"))
    try:
        with metered() as computed:
            outs = hf_lm.generate(prompts, 6)
            hf_lm.token_logprobs(prompts[:1], [hf_lm.stop_ids[0]])
        with metered() as replayed:
            again = hf_lm.generate(prompts, 6)
    finally:
        cache.configure(None, None)
    assert all(c.replayed for c in again)
    ids = [hf_lm.encode_chat(p) for p in prompts]
    wrote = [len(c.token_ids) + (0 if c.hit_limit else 1) for c in outs]  # the stop token was written too
    assert all(1 <= w <= 6 for w in wrote)
    gen, scored = groups(computed.entries)
    assert (gen["op"], gen["each"]) == ("generate", [[len(i), w] for i, w in zip(ids, wrote, strict=True)])
    assert (scored["op"], scored["each"]) == ("token_logprobs", [[len(ids[0]), 0]])
    assert groups(replayed.entries) == [gen]  # a replayed call read and wrote the same tokens


def test_a_watched_encoder_counts_batch_rows_and_tokens_and_is_muted_inside_an_lm_call():
    from harness.lm.encoders import sentence_encoder
    from harness.lm.meter import groups, metered, muted

    st = sentence_encoder("embedded:all-minilm-l6-v2")
    texts = ["a short one", "a somewhat longer sentence with more words in it", "mid length text"]
    width = max(len(st.tokenizer(t)["input_ids"]) for t in texts)  # padded to the longest, special tokens in
    with metered() as m:
        st.encode(texts, batch_size=2)
        with muted():
            st.encode(texts[:1])
    (g,) = groups(m.entries)
    assert g["op"] == "forward" and g["model"] == "embedded:all-minilm-l6-v2"
    assert [b for b, _, _ in g["each"]] == [2, 1] and max(t for _, t, _ in g["each"]) == width
    assert all(past == 0 for _, _, past in g["each"]) and g["read"] == sum(b * t for b, t, _ in g["each"])


@pytest.mark.slow
def test_a_record_says_what_each_stage_read_and_wrote(generator, env, nq5):
    from omegaconf import OmegaConf

    from harness.runner import build_method, process

    scorer = {
        "_target_": "methods.scorers.relevance_scorer",
        "kind": "bi-encoder",
        "model": "embedded:all-minilm-l6-v2",
    }
    spec = {"_target_": "methods.rerank.RerankSelect", "name": "bge_reranker", "granularity": "passage", "top_k": 1}
    bge = build_method(OmegaConf.create({**spec, "scorer": scorer}))
    bge.bind(env)
    (one,), _ = process([nq5[0]], bge, generator)
    pair, _ = process(list(nq5[:2]), bge, generator)
    tokens = one["tokens"]
    (gen,) = tokens["generate"]
    assert gen["each"] == [[one["prompt_tokens"], gen["each"][0][1]]]
    assert gen["each"][0][1] in (one["completion_tokens"], one["completion_tokens"] + 1)
    (enc,) = tokens["compress"]  # the bi-encoder read the question and the five passages
    assert enc["op"] == "forward" and enc["read"] > 0 and "each" in enc
    assert all("each" not in g for r in pair for stage in r["tokens"].values() for g in stage)
    assert pair[0]["tokens"] == pair[1]["tokens"]  # the batch's totals, shared out evenly
    assert sum(r["tokens"]["generate"][0]["read"] for r in pair) == pytest.approx(sum(r["prompt_tokens"] for r in pair))
