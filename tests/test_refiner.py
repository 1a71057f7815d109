"""Refiner: its markdown context, both prompts, batched greedy extraction on the real SmolLM2 stand-in, and
the LoRA path on a tiny random Llama with a tiny LoRA adapter built here (Refiner-7B cannot be downloaded)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.config import register_resolvers
from harness.lm.loading import load_hf
from harness.provenance import REPO_ROOT
from harness.types import Example, Passage
from methods.refiner import TEACHER_SYSTEM, Refiner, refiner_context

LM = "embedded:smollm2-135m-instruct"


def method_cfg(profile: str):
    register_resolvers()
    with initialize_config_dir(str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", ["method=refiner", f"profile={profile}"])
    return OmegaConf.to_container(cfg.method, resolve=True)


def test_profiles():
    paper = method_cfg("paper")
    assert (paper["model"], paper["adapter"], paper["prompt"], paper["max_new_tokens"]) == (
        "meta-llama/Llama-2-7b-chat-hf",
        "al1231/Refiner-7B",
        "monitor",
        2048,
    )
    emb = method_cfg("embedded")
    assert (emb["model"], emb["adapter"], emb["prompt"]) == (LM, None, "teacher")


def test_context_is_refiners_markdown():
    ps = (
        Passage("Alpha one.", "A"),
        Passage("Beta text.", "B"),
        Passage("Alpha two.", "A"),
        Passage("Alpha three.", "A"),
        Passage("Beta text.", "B"),
        Passage("x", "C"),
        Passage("a ; b table", "D"),
        Passage("Cat page.", "Category:Things"),
    )
    assert refiner_context(ps) == "## A\nAlpha one....Alpha two.\n---\n## B\nBeta text."
    assert refiner_context(ps, n_contexts=3).startswith("## A\nAlpha one....Alpha two....Alpha three.\n---\n")
    assert refiner_context(()) == ""


@pytest.fixture(scope="module")
def teacher(env):
    method = Refiner(LM, prompt="teacher", max_new_tokens=6, batch_size=4, dtype="float32")  # vLLM, as test_lm's
    method.bind(env)
    return method


def test_prompts(teacher, nq5):
    ex = nq5[0]
    text = teacher._lm.tokenizer.decode(teacher.encode(ex))
    assert TEACHER_SYSTEM in text and f"Question: {ex.question}\nDocument (multiple documents" in text
    assert f"## {ex.passages[0].title}\n" in text
    monitor = Refiner(LM, prompt="monitor")
    monitor._lm = teacher._lm
    raw = teacher._lm.tokenizer.decode(monitor.encode(ex))
    assert raw.endswith(f"<</SYS>>{ex.question}[/INST] ") and "[INST]<<SYS>>[MONITOR]## " in raw
    assert TEACHER_SYSTEM not in raw


def test_batched_extraction_shares_the_generator(teacher, nq5):
    from harness.lm import get_lm

    assert teacher._lm is get_lm(LM, dtype="float32")  # one SmolLM2 engine per process
    a, b = (replace(e, passages=e.passages[:1]) for e in (nq5[0], nq5[2]))  # short prompts, fast
    batch = [a, Example("empty", "who?", ("x",), ()), b]
    out = teacher.compress_batch(batch)
    assert out[1].documents == [] and out[1].meta["output_tokens"] == 0
    for comp in (out[0], out[2]):
        assert comp.units is None and len(comp.documents) <= 1
        n = comp.meta["output_tokens"]
        assert 0 <= n <= 6 and comp.meta["hit_limit"] == (n == 6)
        assert comp.meta["requested"] == {"max_new_tokens": 6, "prompt": "teacher"}
    assert teacher.compress(b).documents == out[2].documents  # batch and single agree
    info = teacher.describe()
    assert info["model"]["ref"] == LM and info["adapter"] is None


def test_lora_path_on_a_tiny_llama(env, nq5, tmp_path):
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = load_hf(LM)[1]
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    base = tmp_path / "base"
    LlamaForCausalLM(config).save_pretrained(base)
    tok.save_pretrained(base)
    lora = get_peft_model(LlamaForCausalLM.from_pretrained(base), LoraConfig(r=2, target_modules=["q_proj"]))
    for name, p in lora.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p)  # a trained-looking (non-zero) adapter
    lora.save_pretrained(tmp_path / "adapter")

    method = Refiner(
        str(base),
        adapter=str(tmp_path / "adapter"),
        prompt="monitor",
        max_new_tokens=3,
        engine="transformers",
        dtype="float32",
    )
    method.bind(env)
    merged = method._lm.engine.model  # the adapter merged into derived weights (what vLLM would serve)
    shared = load_hf(str(base))[0]
    assert merged is not shared and not isinstance(merged, PeftModel)
    assert not any("lora" in n for n, _ in shared.named_parameters())  # the shared base is never wrapped
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(merged.state_dict()[q], shared.state_dict()[q])
    out = method.compress_batch(list(nq5[:2]))
    assert all(c.meta["output_tokens"] <= 3 for c in out)
    assert method.describe()["adapter"]["source"] == "local"
