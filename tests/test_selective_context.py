"""Selective-Context: self-information under the real SmolLM2, phrase/token/sentence units, reduce ratio."""

from __future__ import annotations

import math

import pytest

from harness.text import split_sentences
from harness.types import Example, Passage, Unit
from methods.selective_context import SelectiveContext, phrase_spans, rebuild, token_spans, unit_scores

LM = "embedded:smollm2-135m-instruct"


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _texts(text: str, spans) -> list[str]:
    return [text[s:e] for s, e in spans]


def test_phrases_merge_determiners_with_content_word_runs():
    text = "The Eiffel Tower is in Paris, France; it was built by Gustave Eiffel."
    assert _texts(text, phrase_spans(text)) == [
        "The Eiffel Tower",
        "is",
        "in",
        "Paris",
        ",",
        "France",
        ";",
        "it",
        "was",
        "built",
        "by",
        "Gustave Eiffel",
        ".",
    ]


def test_token_spans_drop_whitespace_and_merge_split_characters():
    text = "ab  cé"
    # a byte-level BPE can split "é" across two tokens with the same character span
    offsets = [(0, 2), (2, 4), (4, 5), (5, 6), (5, 6)]
    assert token_spans(text, offsets) == [(0, 2), (4, 5), (5, 6)]


def test_a_token_spanning_two_units_shares_its_information():
    text = "ab cd"
    units = [(0, 2), (3, 5)]
    assert unit_scores(units, [(0, 4), (4, 5)], [2.0, 4.0], text) == [1.0, 2.5]  # unit 2: mean(2 / 2, 4)


def test_rebuild_keeps_a_space_only_where_the_original_had_one():
    text = 'He said "yes", then left.'
    spans = phrase_spans(text)
    kept = [sp for sp in spans if text[sp[0] : sp[1]] not in {'"', ","}]
    assert rebuild(text, kept) == "He said yes then left."
    assert rebuild(text, spans) == text


@pytest.fixture(scope="module")
def two(nq5):
    """Two NQ examples cut to two and one passages (a batch across examples, kept small for two CPU cores)."""
    return [Example(e.id, e.question, e.answers, e.passages[:k]) for e, k in zip(nq5[:2], (2, 1), strict=True)]


def _bound(env, **kw) -> SelectiveContext:
    sc = SelectiveContext(LM, device="cpu", dtype="float32", **kw)  # vLLM, the engine test_lm.py starts too
    sc.bind(env)
    return sc


def test_batched_self_information_equals_one_text_at_a_time(env):
    sc = _bound(env)
    texts = ["Paris is the capital of France.", "Paris is the capital of Banana.", "Hi."]
    batched = sc.self_information(texts)
    for text, (offsets, infos) in zip(texts, batched, strict=True):
        ((alone_offsets, alone),) = sc.self_information([text])
        assert offsets == alone_offsets and len(infos) == len(offsets)
        assert infos == pytest.approx(alone, abs=1e-3)
    assert sum(batched[0][1]) < sum(batched[1][1])  # the expected word carries less information


def test_long_texts_are_scored_in_windows(env):
    sc = _bound(env, max_length=8)
    text = "The first Nobel Prize in Physics was awarded in 1901 to Wilhelm Conrad Röntgen of Germany."
    ((offsets, infos),) = sc.self_information([text])
    assert len(infos) == len(offsets) > 8 and all(math.isfinite(x) and x >= 0 for x in infos)


def test_reduce_ratio_zero_keeps_every_passage_verbatim(env, two):
    out = _bound(env, reduce_ratio=0.0).compress_batch(two)
    for ex, comp in zip(two, out, strict=True):
        expected = [f"{p.title}\n{' '.join(split_sentences(p.text))}" for p in ex.passages]
        assert comp.documents == expected
        assert comp.meta["units_dropped"] == 0 and comp.units is None


def test_sentence_units_drop_the_ratio_of_units_and_keep_original_order(env, two):
    for ratio in (0.3, 0.6):
        comps = _bound(env, reduce_ratio=ratio, unit="sentence").compress_batch(two)
        for ex, comp in zip(two, comps, strict=True):
            total, dropped = comp.meta["units_total"], comp.meta["units_dropped"]
            assert abs(dropped - ratio * total) <= 1, (ratio, total, dropped)
            assert comp.units == sorted(comp.units, key=lambda u: (u.passage, u.sentence))
            for u in comp.units:
                sentence = split_sentences(ex.passages[u.passage].text)[u.sentence]
                assert any(sentence in d for d in comp.documents)
            assert comp.meta["requested"] == {"reduce_ratio": ratio, "unit": "sentence"}


def test_a_higher_reduce_ratio_keeps_fewer_tokens(env, two):
    sizes = []
    for ratio in (0.2, 0.5, 0.8):
        comps = _bound(env, reduce_ratio=ratio).compress_batch(two)
        sizes.append(sum(env.count_tokens("\n".join(c.documents)) for c in comps))
    original = sum(env.count_tokens("\n".join(p.render() for p in ex.passages)) for ex in two)
    assert original > sizes[0] > sizes[1] > sizes[2] > 0


def test_empty_inputs(env):
    sc = _bound(env)
    empty = Example("e0", "who?", ("x",), ())
    blank = Example("e1", "who?", ("x",), (Passage("  ", ""),))
    for comp in sc.compress_batch([empty, blank]):
        assert comp.documents == [] and comp.units is None
    assert _bound(env, unit="sentence").compress(empty).units == []


def test_gpt2_path_with_a_tiny_random_model(env, tmp_path, two):
    """The paper profile's GPT-2 architecture (absolute positions, 1-token start marker, short context)."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from harness.lm.models import resolve

    tok = AutoTokenizer.from_pretrained(resolve(LM).path)  # GPT-2 BPE family; the real gpt2 needs the hub
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=24, vocab_size=len(tok))
    GPT2LMHeadModel(cfg).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    sc = SelectiveContext(
        str(tmp_path),
        reduce_ratio=0.5,
        unit="sentence",
        start_marker="<|endoftext|>",
        device="cpu",
        engine="transformers",
        dtype="float32",
    )
    sc.bind(env)
    assert sc.window == 23
    comp = sc.compress(two[0])
    assert 0 < len(comp.units) < comp.meta["units_total"]
    assert all(isinstance(u, Unit) for u in comp.units)
