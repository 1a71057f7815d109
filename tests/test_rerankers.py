"""BGE-reranker adapter: RerankSelect with the bi-encoder stand-in (real MiniLM) and the cross-encoder path
(a tiny random BERT cross-encoder built here, since BAAI/bge-reranker-* cannot be downloaded)."""

from __future__ import annotations

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.config import register_resolvers
from harness.prompt import render_documents
from harness.provenance import REPO_ROOT
from harness.runner import build_method
from harness.text import rank_desc, sentence_units
from harness.types import Example
from methods.rerank import RerankSelect
from methods.scorers import BiEncoderScorer, CrossEncoderScorer, relevance_scorer

ENCODER = "embedded:all-minilm-l6-v2"


def method_cfg(method: str, profile: str, dataset: str = "nq"):
    register_resolvers()
    with initialize_config_dir(str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", [f"method={method}", f"profile={profile}", f"dataset={dataset}"])
    return cfg.method


def test_profiles_pick_the_scorer():
    emb = OmegaConf.to_container(method_cfg("bge_reranker", "embedded"), resolve=True)
    assert emb["scorer"]["kind"] == "bi-encoder" and emb["scorer"]["model"] == ENCODER
    assert emb["top_k"] == 1 and emb["granularity"] == "passage"
    paper = OmegaConf.to_container(method_cfg("bge_reranker", "paper"), resolve=True)
    assert paper["scorer"] == {
        "_target_": "methods.scorers.relevance_scorer",
        "kind": "cross-encoder",
        "model": "BAAI/bge-reranker-base",
    }
    v2 = OmegaConf.to_container(method_cfg("bge_reranker_v2_m3", "paper"), resolve=True)
    assert v2["scorer"]["model"] == "BAAI/bge-reranker-v2-m3"
    with pytest.raises(ValueError, match="scorer kind"):
        relevance_scorer("colbert", model=ENCODER)


def test_bi_encoder_ranks_the_relevant_sentence_first():
    scorer = BiEncoderScorer(ENCODER)
    scorer.load()
    texts = [
        "Bananas are rich in potassium.",
        "Paris is the capital and largest city of France.",
        "The match ended in a draw.",
    ]
    scores = scorer.score("What is the capital of France?", texts)
    assert len(scores) == 3 and int(np.argmax(scores)) == 1
    assert all(-1.0 <= s <= 1.0 for s in scores)  # cosine
    assert scorer.score("anything", []) == []


def test_bge_reranker_embedded_keeps_the_top_passage(env, nq5):
    method = build_method(method_cfg("bge_reranker", "embedded"))
    method.bind(env)
    info = method.describe()
    assert info["name"] == "bge_reranker" and info["scorer"] == "bi-encoder"
    assert info["model"]["ref"] == ENCODER and info["model"]["sha256"]
    for ex in nq5:
        comp = method.compress(ex)
        best = int(np.argmax(comp.meta["scores"]))
        assert [(u.passage, u.sentence) for u in comp.units] == [(best, None)]
        assert comp.documents == [ex.passages[best].render()]
        assert comp.meta["requested"] == {"top_k": 1, "rate": None}
        orig = env.count_tokens(render_documents([p.render() for p in ex.passages]))
        assert orig / env.count_tokens(render_documents(comp.documents)) > 2


def test_sentence_variant_honours_the_rate_in_original_order(env, nq5):
    method = build_method(method_cfg("bge_reranker_sentences_rate0.25", "embedded"))
    method.bind(env)
    for ex in nq5:
        comp = method.compress(ex)
        keys = [(u.passage, u.sentence) for u in comp.units]
        assert keys == sorted(keys) and all(s is not None for _, s in keys)
        units, texts = sentence_units(ex.passages)
        tokens = {(u.passage, u.sentence): env.count_tokens(t) for u, t in zip(units, texts, strict=True)}
        assert 0 < sum(tokens[k] for k in keys) <= 0.25 * sum(tokens.values())


def test_empty_passage_list(env):
    method = build_method(method_cfg("bge_reranker", "embedded"))
    method.bind(env)
    comp = method.compress(Example("e0", "who wrote hamlet", ("Shakespeare",), ()))
    assert comp.documents == [] and comp.units == []


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory):
    """A randomly initialised 2-layer BERT with a 1-logit head, saved like a hub cross-encoder."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from harness.lm.models import resolve

    path = tmp_path_factory.mktemp("tiny_ce")
    tok = AutoTokenizer.from_pretrained(resolve(ENCODER).path)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=1,
    )
    BertForSequenceClassification(config).eval().save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_cross_encoder_scores_are_the_raw_logits(tiny_cross_encoder):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    q, texts = "who wrote hamlet", ["Hamlet is a tragedy by William Shakespeare.", "Bananas are yellow.", "x"]
    scorer = relevance_scorer("cross-encoder", model=tiny_cross_encoder, device="cpu")
    assert isinstance(scorer, CrossEncoderScorer)
    scorer.load()
    scores = scorer.score(q, texts)
    tok = AutoTokenizer.from_pretrained(tiny_cross_encoder)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_cross_encoder).eval()
    enc = tok([q] * 3, texts, padding=True, truncation=True, max_length=512, return_tensors="pt")
    with torch.inference_mode():
        logits = model(**enc).logits[:, 0].tolist()
    assert scores == pytest.approx(logits, abs=1e-4)  # no sigmoid: FlagReranker's raw scores
    assert scorer.describe()["model"]["source"] == "local"


def test_cross_encoder_inside_rerank_select(env, nq5, tiny_cross_encoder):
    method = RerankSelect(scorer=CrossEncoderScorer(tiny_cross_encoder, device="cpu"), top_k=2)
    method.bind(env)
    ex = nq5[0]
    comp = method.compress(ex)
    scores = method.scorer.score(ex.question, [p.render() for p in ex.passages])
    assert [u.passage for u in comp.units] == sorted(rank_desc(scores)[:2])
    assert method.describe()["scorer"] == "cross-encoder"
