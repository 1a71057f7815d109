"""EXIT: the verbatim prompt, P(Yes) from the real SmolLM2, the threshold, original order, the LoRA path."""

from __future__ import annotations

import pytest

from harness.lm.loading import load_hf
from harness.text import split_sentences
from harness.types import Example, Passage, Unit
from methods.exit.method import Exit

LM = "embedded:smollm2-135m-instruct"
# EXIT's classification prompt (paper Table 6; ThisIsHwang/EXIT compressors/baselines/exit/core.py)
EXIT_PROMPT = (
    "<start_of_turn>user\nQuery:\n{query}\nFull context:\n{context}\nSentence:\n{sentence}\n"
    'Is this sentence useful in answering the query? Answer only "Yes" or "No".<end_of_turn>\n'
    "<start_of_turn>model\n"
)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _bound(env, **kw) -> Exit:
    kw.setdefault("device", "cpu")
    kw.setdefault("dtype", "float32")  # vLLM fp32, the engine test_lm.py starts too
    ex = Exit(kw.pop("model", LM), **kw)
    ex.bind(env)
    return ex


@pytest.fixture(scope="module")
def small():
    """Two short passages, five sentences: the real-model tests stay fast on two CPU cores."""
    return Example(
        "t0",
        "What is the capital of France?",
        ("Paris",),
        (
            Passage(
                "Paris is the capital of France. The city has two million residents. It hosts the Louvre.",
                "Paris",
            ),
            Passage("Berlin is the capital of Germany. It is known for its art scene.", "Berlin"),
        ),
    )


@pytest.fixture(scope="module")
def scores(env, small):
    return _bound(env).compress(small).meta["scores"]


ALL = [Unit(0, 0), Unit(0, 1), Unit(0, 2), Unit(1, 0), Unit(1, 1)]


@pytest.mark.slow
def test_literal_prompt_is_exits_verbatim(env):
    ex = _bound(env, prompt="literal")
    head, tail = ex._encode("who won?", "Title\nSome text.", "Some text.")
    expected = EXIT_PROMPT.format(query="who won?", context="Title\nSome text.", sentence="Some text.")
    assert ex.tokenizer.decode(head + tail) == expected


def test_chat_prompt_wraps_the_same_user_turn(env):
    ex = _bound(env, prompt="chat")
    head, tail = ex._encode("who won?", "Some text.", "Some text.")
    text = ex.tokenizer.decode(head + tail)
    user = EXIT_PROMPT.split("<start_of_turn>user\n")[1].split("<end_of_turn>")[0]
    assert user.format(query="who won?", context="Some text.", sentence="Some text.") in text
    assert text.endswith("<|im_start|>assistant\n")


def test_engines_give_the_same_scores(env, small, scores):
    """vLLM (the default, prefix-cached heads) and transformers (padded batches) score alike."""
    hf = _bound(env, engine="transformers", batch_size=2).compress(small).meta["scores"]
    assert len(scores) == 5 and scores == pytest.approx(hf, abs=2e-3)
    assert all(0 < p < 1 for p in scores) and len(set(scores)) == 5


def test_threshold_selects_in_original_order(env, small, scores):
    cut = sum(sorted(scores)[1:3]) / 2  # between two scores: a prefix-cache hit moves a score by ~1e-4
    comp = _bound(env, threshold=cut).compress(small)
    expected = [u for u, x in zip(ALL, scores, strict=True) if x >= cut]
    assert comp.units == expected and len(expected) == 3
    sents = [split_sentences(p.text) for p in small.passages]
    by_passage = {}
    for u in expected:
        by_passage.setdefault(u.passage, []).append(sents[u.passage][u.sentence])
    assert comp.documents == [" ".join(by_passage[p]) for p in sorted(by_passage)]
    assert comp.meta["requested"] == {"threshold": cut}


def test_threshold_zero_keeps_all_and_above_one_keeps_none(env, small):
    everything = _bound(env, threshold=0.0).compress(small)
    assert everything.units == ALL and everything.documents == [p.text for p in small.passages]
    nothing = _bound(env, threshold=1.01).compress(small)
    assert nothing.documents == [] and nothing.units == []


def test_empty_inputs(env):
    ex = _bound(env)
    for example in (Example("e0", "who?", ("x",), ()), Example("e1", "who?", ("x",), (Passage(" ", "T"),))):
        comp = ex.compress(example)
        assert comp.documents == [] and comp.units == [] and comp.meta["scores"] == []


def test_lora_path_with_a_tiny_random_gemma(env, tmp_path, small):
    """The paper profile's path: a Gemma base + peft LoRA, EXIT's literal prompt; shared base untouched."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoTokenizer, GemmaConfig, GemmaForCausalLM

    from harness.lm.models import resolve

    tok = AutoTokenizer.from_pretrained(resolve(LM).path)  # Gemma's tokenizer needs the hub
    cfg = GemmaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    base_dir, lora_dir = tmp_path / "base", tmp_path / "lora"
    GemmaForCausalLM(cfg).save_pretrained(base_dir)
    tok.save_pretrained(base_dir)
    lora = get_peft_model(
        GemmaForCausalLM.from_pretrained(base_dir),
        LoraConfig(r=4, lora_alpha=32, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    lora.save_pretrained(lora_dir)

    kw = {"model": str(base_dir), "prompt": "literal", "engine": "transformers"}
    plain = _bound(env, **kw)
    tuned = _bound(env, adapter=str(lora_dir), **kw)
    assert plain.lm.engine.model is load_hf(str(base_dir))[0]
    for m in (plain.lm.engine.model, tuned.lm.engine.model):  # merged weights: nobody's instance is wrapped
        assert not isinstance(m, PeftModel) and not any("lora" in n for n, _ in m.named_modules())
    a, b = plain.compress(small).meta["scores"], tuned.compress(small).meta["scores"]
    assert len(a) == len(b) == 5 and a != pytest.approx(b, abs=1e-4)
    # the merged weights score what the unmerged PEFT adapter scores
    peft = PeftModel.from_pretrained(GemmaForCausalLM.from_pretrained(base_dir), str(lora_dir)).eval()
    h, t = tuned._encode(small.question, f"Paris\n{small.passages[0].text}", split_sentences(small.passages[0].text)[0])
    with torch.inference_mode():
        logits = peft(input_ids=torch.tensor([h + t])).logits[0, -1]
    want = torch.softmax(logits[[tuned.yes_id, tuned.no_id]].float(), 0)[0].item()
    assert b[0] == pytest.approx(want, abs=1e-4)


def test_threshold_curve_from_records_reproduces_the_adapters_selection(env, small, scores, tmp_path):
    import json

    from harness.prompt import render_documents
    from research.exit.curve import curve

    data = tmp_path / "d.jsonl"
    ctxs = [{"title": p.title, "text": p.text} for p in small.passages]
    data.write_text(json.dumps({"id": small.id, "question": small.question, "answers": ["Paris"], "ctxs": ctxs}))
    original = env.count_tokens(render_documents([p.render() for p in small.passages]))
    run = tmp_path / "run"
    run.mkdir()
    dataset = {"name": "d", "path": str(data), "top_k": 5, "rank": "none"}
    (run / "summary.json").write_text(json.dumps({"config": {"dataset": dataset}}))
    record = {"id": small.id, "original_tokens": original, "meta": {"scores": scores}}
    (run / "predictions.jsonl").write_text(json.dumps(record) + "\n")
    cut = sum(sorted(scores)[1:3]) / 2  # between two scores: a prefix-cache hit moves a score by ~1e-4
    rows = curve(run, (0.0, cut, 1.01), count_tokens=env.count_tokens)
    kept = _bound(env, threshold=cut).compress(small).documents
    assert rows[1]["cr"] == pytest.approx(original / env.count_tokens(render_documents(kept)))
    everything = render_documents([p.text for p in small.passages])
    assert rows[0]["cr"] == pytest.approx(original / env.count_tokens(everything))
    assert (rows[2]["cr"], rows[2]["empty"], rows[1]["empty"]) == (None, 1, 0)


def test_the_embedded_exit_config_is_the_trained_cross_encoder_and_keeps_the_answer_sentence(env, small):
    """``method=exit`` on the embedded profile: the committed MiniLM classifier at the paper's 0.5 keeps the
    sentence that answers the question, in original order, and not the other passage's capital. (It still
    judges mostly by passage: the three Paris sentences score alike, see methods/exit/README.md.)"""
    from hydra import compose, initialize_config_dir

    from harness.config import register_resolvers
    from harness.runner import build_method
    from tests.conftest import REPO

    register_resolvers()

    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["method=exit", "dataset=nq"])
    assert cfg.method.kind == "cross_encoder" and cfg.method.threshold == 0.5
    ex = build_method(cfg.method)
    ex.bind(env)
    out = ex.compress(small)
    scores = out.meta["scores"]
    assert len(scores) == len(ALL) and all(0.0 < x < 1.0 for x in scores)
    assert Unit(0, 0) in out.units and Unit(1, 0) not in out.units
    assert min(scores[:3]) > max(scores[3:])  # the answering passage's sentences above the other passage's
    assert out.units == sorted(out.units, key=lambda u: (u.passage, u.sentence))
    assert ex.describe()["classifier"]["adapter_sha256"]
