"""CompSelect with real models: LoRA on the shared SmolLM2 leaves the generator alone, SFT lowers the loss,
the reranker trains, and the paper profile's code path runs on tiny random models of the same
architectures."""

from __future__ import annotations

import pytest

from tests.conftest import ENCODER, LM

torch = pytest.importorskip("torch")


def random_adapter(base, path, target_modules=("q_proj", "v_proj"), r=4, seed=0):
    """A LoRA adapter with random (non-zero) weights, saved where ``LoraLM`` can load it."""
    from peft import get_peft_model

    from harness.lm.lora import lora_config, save_adapter, weight_sharing_copy

    torch.manual_seed(seed)
    cfg = lora_config(r, 2 * r, 0.0, target_modules)
    cfg.init_lora_weights = False  # B != 0: the adapter really changes the outputs
    return save_adapter(get_peft_model(weight_sharing_copy(base), cfg), path, "test")


def logits(model, ids):
    with torch.inference_mode():
        return model(input_ids=ids).logits


def test_adapters_leave_the_generator_unchanged(generator, tmp_path):
    from harness.prompt import build_messages
    from methods.compselect.train_lm import LoraLM

    prompt = [build_messages("What is the capital of France?", ["Paris is the capital of France."])]
    ids = torch.tensor([generator._encode(prompt[0])])
    before_text = generator.generate(prompt)[0].text
    before_logits = logits(generator.model, ids)
    a = random_adapter(generator.model, tmp_path / "a")
    b = random_adapter(generator.model, tmp_path / "b", ("gate_proj", "down_proj"), seed=1)
    lm = LoraLM(LM, {"extractor": str(a), "truncator": str(b)})
    assert lm.base is generator.model  # the very same shared instance ...
    for adapter in ("extractor", "truncator"):
        with lm._context(adapter):
            assert not torch.allclose(logits(lm.model, ids), before_logits, atol=1e-3)  # ... adapters act ...
    with lm._context(None):
        assert torch.equal(logits(lm.model, ids), before_logits)
    assert torch.equal(logits(generator.model, ids), before_logits)  # ... and the generator is untouched
    assert generator.generate(prompt)[0].text == before_text
    assert type(generator.model.model.layers[0].self_attn.q_proj) is torch.nn.Linear


@pytest.mark.slow
def test_lora_sft_lowers_the_loss_and_round_trips(generator, tmp_path):
    from harness.lm.lora import save_adapter, train_lora
    from methods.compselect.prompts import truncator_messages, truncator_target
    from methods.compselect.train_lm import LoraLM
    from methods.compselect.train_sft import make_example

    lm = LoraLM(LM)
    ranked = ["The Eiffel Tower was completed in 1889.", "Lyon is a city in France.", "It rains a lot."]
    data = [
        make_example(
            lm,
            truncator_messages("When was the Eiffel Tower completed?", ranked),
            truncator_target(ranked, 1),
        ),
        make_example(lm, truncator_messages("Where is Lyon?", ranked[::-1]), truncator_target(ranked, 0)),
    ]
    assert data[1].target == [lm.eos_ids()[0]]  # the empty set is a bare end-of-turn
    assert all(len(e.prompt) < 200 for e in data)
    model, report = train_lora(
        generator.model,
        data,
        data,
        r=8,
        alpha=16,
        dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        lr=2e-3,
        epochs=3,
        grad_accum=1,
        warmup_ratio=0.0,
        seed=0,
    )
    assert report["optimizer_steps"] == 6
    assert report["val_loss_after"] < 0.7 * report["val_loss_before"]
    save_adapter(model, tmp_path / "t", LM)
    loaded = LoraLM(LM, {"truncator": str(tmp_path / "t")})
    ids = torch.tensor([data[0].prompt])
    with loaded._context("truncator"):
        assert torch.allclose(logits(loaded.model, ids), logits(model, ids), atol=2e-2)  # fp16 weights on disk


@pytest.mark.slow
def test_token_loss_norm_weighs_every_target_token_alike(generator):
    """With ``loss_norm=token`` a step's loss is the mean over its target tokens, so the one-token empty
    target no longer weighs as much as a whole kept prefix; ``example`` keeps the per-example mean."""
    from harness.lm.lora import _loss, train_lora
    from methods.compselect.prompts import truncator_messages, truncator_target
    from methods.compselect.train_lm import LoraLM
    from methods.compselect.train_sft import make_example

    lm = LoraLM(LM)
    ranked = ["The Eiffel Tower was completed in 1889.", "Lyon is a city in France."]
    data = [
        make_example(lm, truncator_messages("When was it completed?", ranked), truncator_target(ranked, 2)),
        make_example(lm, truncator_messages("Where is Lyon?", ranked), truncator_target(ranked, 0)),
    ]
    with torch.no_grad():
        losses = [float(_loss(generator.model, e)) for e in data]  # LoRA starts as the identity
    sizes = [len(e.target) for e in data]
    kw = dict(
        r=4, alpha=8, dropout=0.0, target_modules=["q_proj"], lr=1e-4, epochs=1, grad_accum=2, warmup_ratio=0.0, seed=0
    )
    for norm, expected in (
        ("token", sum(x * n for x, n in zip(losses, sizes, strict=True)) / sum(sizes)),
        ("example", sum(losses) / 2),
    ):
        _, report = train_lora(generator.model, data, [], loss_norm=norm, **kw)
        assert report["loss_norm"] == norm and report["step_losses"][0] == pytest.approx(expected, abs=1e-3)
    with pytest.raises(ValueError, match="loss_norm"):
        train_lora(generator.model, data, [], loss_norm="batch", **kw)


def test_reranker_training_lowers_the_loss(tmp_path):
    from methods.compselect.reranker import ClueReranker
    from methods.compselect.train_reranker import save_reranker, train_reranker

    qs = ["who wrote hamlet", "capital of peru", "boiling point of water", "largest planet"]
    pos = [
        "Hamlet is a tragedy by William Shakespeare.",
        "Lima is the capital of Peru.",
        "Water boils at 100 degrees Celsius at sea level.",
        "Jupiter is the largest planet.",
    ]
    neg = [
        "Hamlet is a small village.",
        "Peru borders Chile.",
        "Water covers most of Earth.",
        "Planets orbit stars.",
    ]
    triplets = list(zip(qs, pos, neg, strict=True))
    st, report = train_reranker(
        ENCODER,
        triplets,
        triplets,
        lora={"r": 8, "alpha": 16},
        lr=1e-3,
        epochs=6,
        batch_size=4,
        warmup_steps=1,
        scale=20.0,
        seed=0,
        max_seq_length=64,
    )
    assert report["steps"] == 6
    assert report["step_losses"][-1] < report["step_losses"][0]
    save_reranker(st, tmp_path / "r", ENCODER, lora=True)
    scorer = ClueReranker(ENCODER, str(tmp_path / "r"))
    s = scorer.score(qs[1], [neg[1], pos[1]])
    assert s[1] > s[0]
    direct = st.encode([qs[1], pos[1]], normalize_embeddings=True)
    assert abs(float(direct[0] @ direct[1]) - s[1]) < 1e-2  # merged fp16 adapter == the trained model


@pytest.mark.slow
def test_paper_profile_path_on_tiny_random_models(tmp_path, generator):
    """Llama-3.2-3B and distilbert are hub checkpoints: the same code on tiny random models of their
    classes."""
    from transformers import DistilBertConfig, DistilBertModel, LlamaConfig, LlamaForCausalLM

    from methods.compselect.reranker import ClueReranker
    from methods.compselect.train_lm import LoraLM
    from methods.compselect.train_reranker import save_reranker, train_reranker

    tok = generator.tokenizer
    torch.manual_seed(0)
    llama = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tok),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
    )
    llama.save_pretrained(tmp_path / "llama")
    tok.save_pretrained(tmp_path / "llama")
    adapter = random_adapter(llama, tmp_path / "lora", target_modules="all-linear", r=64)
    prompt = [{"role": "user", "content": "Question: who?"}]
    lm = LoraLM(str(tmp_path / "llama"), {"extractor": str(adapter)}, dtype="bfloat16")
    with lm._context("extractor"):  # training side: PEFT on the bf16 base
        assert torch.isfinite(logits(lm.model, torch.tensor([lm.encode(prompt)]))).all()
    # inference side: the model layer merges the adapter into derived weights (what vLLM serves on the GPU);
    # compared in fp32 with PEFT's unmerged adapter
    from harness.lm import get_lm

    fp32 = LoraLM(str(tmp_path / "llama"), {"extractor": str(adapter)})
    ids = torch.tensor([fp32.encode(prompt)])
    with fp32._context("extractor"):
        tuned = logits(fp32.model, ids)
    merged = get_lm(str(tmp_path / "llama"), engine="transformers", dtype="float32", adapter=str(adapter))
    assert torch.allclose(logits(merged.engine.model, ids), tuned, atol=1e-4)
    assert merged.generate([prompt], 5)[0].token_ids

    DistilBertModel(DistilBertConfig(vocab_size=30522, dim=32, hidden_dim=64, n_layers=2, n_heads=2)).save_pretrained(
        tmp_path / "distilbert"
    )
    from transformers import AutoTokenizer

    from harness.lm.models import resolve

    AutoTokenizer.from_pretrained(resolve(ENCODER).path).save_pretrained(tmp_path / "distilbert")
    base = str(tmp_path / "distilbert")
    trip = [("q one", "a positive", "a negative"), ("q two", "b positive", "b negative")]
    st, report = train_reranker(
        base,
        trip,
        trip,
        lora=None,
        lr=1e-3,
        epochs=1,
        batch_size=2,
        warmup_steps=1,
        scale=20.0,
        seed=0,
        max_seq_length=32,
    )
    save_reranker(st, tmp_path / "full", base, lora=False)
    scores = ClueReranker(base, str(tmp_path / "full")).score("q one", ["a positive", "b negative"])
    assert len(scores) == 2 and report["steps"] == 1


@pytest.mark.slow
def test_extractor_targets_combine_answer_sentences_knn_and_question_order(nq5):
    """``train.extractor_targets`` on real examples with the real MiniLM: at epsilon 0 the target is exactly the
    shown answer-containing sentences ordered by similarity to the question; a larger epsilon adds exactly the
    shown sentences within that cosine distance of one of them."""
    from omegaconf import OmegaConf

    from harness.lm.encoders import sentence_encoder
    from methods.compselect.method import extractor_input
    from methods.compselect.train_data import extractor_targets
    from methods.compselect.train_labels import answer_sentences
    from methods.compselect.train_lm import LoraLM

    lm = LoraLM(LM)
    enc = sentence_encoder(ENCODER)
    cfg = lambda eps: OmegaConf.create({"extractor": {"epsilon": eps, "match": "raw", "max_input_tokens": 1024}})  # noqa: E731
    exact, wide = extractor_targets(cfg(0.0), lm, enc, nq5), extractor_targets(cfg(0.6), lm, enc, nq5)
    with_answer = added = 0
    for ex, a, b in zip(nq5, exact, wide, strict=True):
        x = extractor_input(lm, ex, 1024)
        shown = x.sentences[: x.shown]
        seeds = answer_sentences(shown, ex.answers, "raw")
        assert sorted(a["target"]) == sorted(seeds) == sorted(b["answer_sentences"])
        if not seeds:
            assert a["target"] == b["target"] == []
            continue
        with_answer += 1
        emb = enc.encode([ex.question, *shown], normalize_embeddings=True, convert_to_numpy=True)
        sim_q = emb[1:] @ emb[0]
        assert [sim_q[i] for i in a["target"]] == sorted((sim_q[i] for i in seeds), reverse=True)
        near = {i for i in range(len(shown)) if min(1 - float(emb[1 + i] @ emb[1 + s]) for s in seeds) <= 0.6}
        assert set(b["target"]) == near and set(seeds) <= near
        added += len(near) - len(seeds)
        assert a["texts"] == [shown[i] for i in a["target"]]
    assert with_answer >= 2 and added > 0  # the slice exercises the rule and the expansion


@pytest.mark.slow
def test_extractor_sft_on_a_real_slice_lowers_the_loss(generator, nq5):
    """The extractor stage's data path on real NQ questions (targets from ``extractor_targets``, examples built
    as ``train.py`` builds them, prompts cut at 512 tokens, the pipeline test's 256 doubled): a few LoRA steps lower
    the loss on them."""
    from omegaconf import OmegaConf

    from harness.lm.encoders import sentence_encoder
    from harness.lm.lora import train_lora
    from methods.compselect.method import extractor_input
    from methods.compselect.prompts import sentence_lines
    from methods.compselect.train_data import extractor_targets
    from methods.compselect.train_lm import LoraLM
    from methods.compselect.train_sft import make_example

    lm = LoraLM(LM)
    cfg = OmegaConf.create({"extractor": {"epsilon": 0.0, "match": "raw", "max_input_tokens": 512}})
    rows = extractor_targets(cfg, lm, sentence_encoder(ENCODER), nq5)
    data = [
        make_example(lm, extractor_input(lm, ex, 512).messages, sentence_lines(r["texts"]))
        for ex, r in zip(nq5, rows, strict=True)
        if r["target"]
    ][:2]
    assert len(data) == 2 and all(len(e.prompt) > 300 and len(e.target) > 5 for e in data)
    _, report = train_lora(
        generator.model,
        data,
        data,
        r=8,
        alpha=16,
        dropout=0.0,
        target_modules=["q_proj", "v_proj"],
        lr=2e-3,
        epochs=3,
        grad_accum=1,
        warmup_ratio=0.0,
        seed=0,
    )
    assert report["optimizer_steps"] == 6
    assert report["val_loss_after"] < 0.8 * report["val_loss_before"]


RESUME_SCRIPT = """
import os, signal, sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
from harness.lm.lora import SFTExample, train_lora

def tiny():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2))

def data():
    g = torch.Generator().manual_seed(1)
    ids = lambda n: torch.randint(0, 64, (n,), generator=g).tolist()
    ex = lambda: SFTExample(ids(12), ids(4))
    return [ex() for _ in range(8)], [ex() for _ in range(3)]

def run(ckpt, kill_at=None):
    train, val = data()
    def on_step(step):
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    model, report = train_lora(tiny(), train, val, r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"],
                               lr=5e-3, epochs=3, grad_accum=2, warmup_ratio=0.1, seed=0, checkpoint=ckpt,
                               save_every=2, eval_every=2, select_best=True, on_step=on_step)
    return {k: v for k, v in model.named_parameters() if v.requires_grad}, report

if __name__ == "__main__":
    run(sys.argv[1], int(sys.argv[2]))
"""


TINY_LORA = dict(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"])  # RESUME_SCRIPT's adapter
TINY_SCHEDULE = dict(epochs=3, grad_accum=2, warmup_ratio=0.1, seed=0)


@pytest.fixture()
def tiny_case(tmp_path) -> dict:
    """RESUME_SCRIPT's namespace: ``tiny()`` (a random tiny Llama), ``data()`` (train, val) and ``run``."""
    import runpy

    script = tmp_path / "resume_case.py"
    script.write_text(RESUME_SCRIPT)
    return runpy.run_path(str(script))


@pytest.mark.slow
def test_interrupted_training_resumes_to_the_uninterrupted_adapter(tmp_path):
    """``kill -9`` in the middle of LoRA SFT (after the step-4 checkpoint, during step 5), then the same call:
    it resumes at step 4 and ends with exactly the adapter, losses and selected step of an uninterrupted run."""
    from tests.conftest import killed_training

    case, ckpt = killed_training(tmp_path, RESUME_SCRIPT, 5)  # died by SIGKILL, leaving the step-4 checkpoint
    from harness.lm.lora import eval_loss, from_checkpoint

    stopped = {w: from_checkpoint(case["tiny"](), ckpt, which=w, **TINY_LORA) for w in ("best", "last")}
    resumed, r_report = case["run"](ckpt)
    whole, w_report = case["run"](None)
    # the adapter of the stopped run: its step-4 state (last) or its best validated step so far (best)
    _, val = case["data"]()
    seen = w_report["val_history"][:2]  # steps 2 and 4
    assert stopped["last"][1]["stopped_at_step"] == 4 and stopped["last"][1]["selected_step"] == 4
    assert eval_loss(stopped["last"][0], val) == pytest.approx(seen[1][1], rel=1e-5)
    best_seen = min(seen, key=lambda x: x[1])
    assert stopped["best"][1]["selected_step"] == best_seen[0] and stopped["best"][1]["val_history"] == seen
    assert eval_loss(stopped["best"][0], val) == pytest.approx(best_seen[1], rel=1e-5)
    assert r_report["resumed_at_step"] == 4 and w_report["resumed_at_step"] is None
    assert r_report["optimizer_steps"] == w_report["optimizer_steps"] == 12
    assert r_report["step_losses"] == w_report["step_losses"]
    assert r_report["val_history"] == w_report["val_history"] and len(w_report["val_history"]) == 6
    assert r_report["selected_step"] == w_report["selected_step"]
    best = min(w_report["val_history"], key=lambda x: x[1])
    assert w_report["selected_step"] == best[0] and w_report["val_loss_after"] == pytest.approx(best[1])
    assert resumed.keys() == whole.keys()
    assert all(torch.equal(resumed[k], whole[k]) for k in whole)
    assert not ckpt.exists()  # a completed run removes its checkpoint
    # a checkpoint of other settings is refused, not mixed in
    killed_training(tmp_path, RESUME_SCRIPT, 3)
    train, val = case["data"]()
    from harness.lm.lora import train_lora

    with pytest.raises(ValueError, match="other settings or data"):
        train_lora(case["tiny"](), train, val, lr=1e-3, checkpoint=ckpt, save_every=2, **TINY_LORA, **TINY_SCHEDULE)


def test_bf16_autocast_keeps_fp32_master_weights_and_tracks_the_fp32_losses(tiny_case):
    """``compute_dtype="bfloat16"`` (mixed precision): the LoRA stays fp32, the losses follow the fp32 run's
    closely (bf16 rounding only) and both runs lower the loss; the report says which was used."""
    from harness.lm.lora import train_lora

    case = tiny_case
    train, val = case["data"]()
    kw = dict(lr=5e-3, **TINY_LORA, **TINY_SCHEDULE)
    _, r32 = train_lora(case["tiny"](), train, val, **kw)
    m16, r16 = train_lora(case["tiny"](), train, val, compute_dtype="bfloat16", **kw)
    assert r32["compute_dtype"] is None and r16["compute_dtype"] == "bfloat16"
    assert all(p.dtype == torch.float32 for p in m16.parameters() if p.requires_grad)
    assert r16["step_losses"] != r32["step_losses"]  # bf16 did run
    assert r16["step_losses"] == pytest.approx(r32["step_losses"], rel=0.03)
    assert r16["val_loss_after"] < r16["val_loss_before"] and r32["val_loss_after"] < r32["val_loss_before"]


def test_auto_compute_dtype_is_bf16_only_where_the_cpu_has_it(tiny_case):
    """``compute_dtype: auto`` (the embedded training config) runs bf16 autocast only on a CPU with native bf16
    (emulated bf16 is several times slower than fp32 elsewhere) and the report records what ran, not ``auto``."""
    from harness.lm.hardware import native_bf16
    from harness.lm.lora import resolve_compute_dtype, train_lora

    train, val = tiny_case["data"]()
    schedule = {**TINY_SCHEDULE, "epochs": 1}
    _, report = train_lora(tiny_case["tiny"](), train, val, lr=5e-3, compute_dtype="auto", **TINY_LORA, **schedule)
    assert report["compute_dtype"] == ("bfloat16" if native_bf16() else None)
    assert resolve_compute_dtype("bfloat16") == "bfloat16"
    assert resolve_compute_dtype(None) is None and resolve_compute_dtype("float32") is None
