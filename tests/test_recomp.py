"""RECOMP: the extractive dual encoder (real MiniLM through RECOMP's mean pooling and dot product) and the
abstractive compressor (real SmolLM2 stand-in; the T5 path on a tiny random T5 built here)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.config import register_resolvers
from harness.provenance import REPO_ROOT
from harness.runner import build_method
from harness.text import rank_desc, sentence_units
from harness.types import Example, Passage
from methods.recomp import RecompAbstractive, recomp_input
from methods.scorers import BiEncoderScorer

ENCODER = "embedded:all-minilm-l6-v2"
LM = "embedded:smollm2-135m-instruct"


def method_cfg(method: str, profile: str, dataset: str = "nq"):
    register_resolvers()
    with initialize_config_dir(str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", [f"method={method}", f"profile={profile}", f"dataset={dataset}"])
    return cfg.method


@pytest.mark.parametrize(
    "dataset,extr,abs_",
    [
        ("nq", "fangyuan/nq_extractive_compressor", "fangyuan/nq_abstractive_compressor"),
        ("triviaqa", "fangyuan/tqa_extractive_compressor", "fangyuan/tqa_abstractive_compressor"),
        ("hotpotqa", "fangyuan/hotpotqa_extractive_compressor", "fangyuan/hotpotqa_abstractive"),
    ],
)
def test_paper_profile_maps_dataset_to_checkpoint(dataset, extr, abs_):
    e = OmegaConf.to_container(method_cfg("recomp_extr", "paper", dataset), resolve=True)
    sc = e["scorer"]
    assert (sc["model"], sc["pooling"], sc["similarity"], e["top_k"]) == (extr, "mean", "dot", 2)
    a = OmegaConf.to_container(method_cfg("recomp_abs", "paper", dataset), resolve=True)
    assert (a["kind"], a["model"], a["max_new_tokens"]) == ("seq2seq", abs_, 512)
    emb = OmegaConf.to_container(method_cfg("recomp_abs", "embedded", dataset), resolve=True)
    assert (emb["kind"], emb["model"]) == ("causal-lm", LM)


def test_mean_pooling_dot_product_is_recomps_scorer():
    """Scores equal RECOMP's run_extractive_compressor.py: masked mean of last hidden states, dot product."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from harness.lm.models import resolve

    q = "when was the eiffel tower built"
    texts = ["The Eiffel Tower was constructed from 1887 to 1889.", "It is 330 metres tall.", "Cats purr."]
    scorer = BiEncoderScorer(ENCODER, pooling="mean", similarity="dot", device="cpu")
    scorer.load()
    scores = scorer.score(q, texts)
    tok = AutoTokenizer.from_pretrained(resolve(ENCODER).path)
    model = AutoModel.from_pretrained(resolve(ENCODER).path).eval()
    enc = tok([q, *texts], padding=True, truncation=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**enc)[0]
    mask = enc["attention_mask"][..., None].bool()
    emb = hidden.masked_fill(~mask, 0.0).sum(1) / enc["attention_mask"].sum(1)[..., None]
    expected = [(emb[0] @ emb[i + 1]).item() for i in range(3)]
    assert scores == pytest.approx(expected, rel=1e-4)
    assert max(scores) > 1.5  # unnormalised: a dot product, not a cosine
    assert rank_desc(scores)[0] == 0


@pytest.mark.slow
def test_recomp_extr_keeps_the_two_best_sentences_in_order(env, nq5):
    method = build_method(method_cfg("recomp_extr", "embedded"))
    method.bind(env)
    assert method.describe()["model"]["ref"] == ENCODER
    for ex in nq5:
        comp = method.compress(ex)
        units, texts = sentence_units(ex.passages)
        best = sorted(rank_desc(method.scorer.score(ex.question, texts))[:2])
        assert comp.units == [units[i] for i in best]
        assert comp.meta["requested"] == {"top_k": 2, "rate": None}
    assert method.compress(Example("e", "q", ("a",), ())).documents == []


def test_recomp_input_format():
    ex = Example("e", "who?", ("x",), (Passage("first text", "T1"), Passage("second text", "T2")))
    assert recomp_input(ex) == "Question: who?\n Document: first text\nsecond text\n Summary: "


@pytest.mark.slow
def test_prompted_stand_in_is_batched_and_shares_the_generator(env, generator, nq5):
    from harness.lm import get_lm

    method = RecompAbstractive(LM, kind="causal-lm", max_new_tokens=6, batch_size=4)  # vLLM fp32, as test_lm's
    method.bind(env)
    assert method._lm is get_lm(LM, dtype="float32")  # one SmolLM2 engine per process
    a, b = (replace(e, passages=e.passages[:1]) for e in nq5[:2])  # one passage each: short prompts, fast
    assert method._lm.count(recomp_input(a)) != method._lm.count(recomp_input(b))  # padding is exercised
    batch = [a, Example("empty", "who?", ("x",), ()), b]
    out = method.compress_batch(batch)
    assert out[1].documents == [] and out[1].meta["summary_tokens"] == 0
    for comp in (out[0], out[2]):
        assert 0 < comp.meta["summary_tokens"] <= 6 and comp.units is None
        assert comp.meta["requested"] == {"max_new_tokens": 6, "max_input_tokens": 1024}
    # left-padded batch decoding gives the same greedy summaries as one example at a time
    singles = [method.compress(a).documents, method.compress(b).documents]
    assert singles == [out[0].documents, out[2].documents]
    assert method.describe()["compressor"] == "prompted-causal-lm"


def _tiny_t5(path, tok, eos_first: bool):
    import torch
    from transformers import GenerationConfig, T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    config = T5Config(
        vocab_size=tok.vocab_size,
        d_model=16,
        d_kv=4,
        d_ff=32,
        num_layers=1,
        num_heads=2,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.pad_token_id,
    )
    model = T5ForConditionalGeneration(config).eval()
    bias = [[[tok.eos_token_id], 100.0]] if eos_first else None  # a model that always says nothing
    model.generation_config = GenerationConfig(
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.pad_token_id,
        sequence_bias=bias,
    )
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def t5_tokenizer():
    from transformers import AutoTokenizer

    from harness.lm.models import resolve

    tok = AutoTokenizer.from_pretrained(resolve(ENCODER).path)
    tok.eos_token = "[SEP]"
    return tok


def test_t5_path_generates_bounded_summaries(env, nq5, tmp_path, t5_tokenizer):
    path = _tiny_t5(tmp_path / "t5", t5_tokenizer, eos_first=False)
    method = RecompAbstractive(path, kind="seq2seq", max_new_tokens=5, max_input_tokens=64, batch_size=2)
    method.bind(env)
    out = method.compress_batch(list(nq5[:3]))
    assert len(out) == 3
    for comp in out:
        assert len(comp.documents) == 1 and comp.documents[0]
        assert 0 < comp.meta["summary_tokens"] <= 5
    assert method.describe()["compressor"] == "t5-seq2seq"


def test_t5_empty_summary_is_an_empty_context(env, nq5, tmp_path, t5_tokenizer):
    path = _tiny_t5(tmp_path / "t5_empty", t5_tokenizer, eos_first=True)
    method = RecompAbstractive(path, kind="seq2seq", max_new_tokens=5)
    method.bind(env)
    comp = method.compress(nq5[0])
    assert comp.documents == [] and comp.meta["empty"] and comp.meta["summary_tokens"] == 0
