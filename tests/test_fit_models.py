"""A 30,000-word question and a 50,000-word passage go through the generator and every method's LM stages with
the real embedded model (SmolLM2-135M): no exception, an answer, and ``meta.truncated`` naming what was cut
(``harness.lm.fit``).

The rule reads ``LM.context_length``; the in-process tests narrow it to ``WINDOW`` tokens, 1/8 of SmolLM2's
8,192 (the same rule on a smaller window: 8k-token forward passes on a 2-core CPU took ~10 min a method). The
generator tests keep the full-size inputs; the vLLM test also keeps the engine's own 8,192, whose refusal was the
bug. The methods read a 1,500-word question and a 1,500-word passage, each about twice the window: EXIT,
LongLLMLingua and Selective-Context score every sentence or token they are given (the full-size passage took over
10 min each, a 6,250-word one 2-4 min, for the same kind of cut)."""

from __future__ import annotations

import pytest

from harness.records import summarize
from harness.runner import build_method, process
from harness.types import Example, Passage
from tests.conftest import LM

pytestmark = pytest.mark.slow


def long_pair(nq5, question_words: int, passage_words: int) -> list[Example]:
    """An NQ example asked with a question of ``question_words`` words, and one whose last passage has at least
    ``passage_words``."""
    base = nq5[0]
    q_words = base.question.split()
    question = " ".join(q_words[i % len(q_words)] for i in range(question_words))
    text = " ".join(p.text for p in nq5[1].passages)
    passage = Passage(" ".join([text] * (passage_words // len(text.split()) + 1)), "A very long passage")
    assert len(question.split()) == question_words and len(passage.text.split()) >= passage_words
    return [
        Example("long-question", question, base.answers, base.passages),
        Example("long-passage", nq5[1].question, nq5[1].answers, (*nq5[1].passages, passage)),
    ]


@pytest.fixture(scope="module")
def long_examples(nq5) -> list[Example]:
    """A 30,000-word question, and a 50,000-word passage."""
    return long_pair(nq5, 30_000, 50_000)


WINDOW = 1024  # 8,192 / 8


@pytest.fixture(scope="module")
def scaled_examples(nq5) -> list[Example]:
    """A question and a passage of 1,500 words each (~1,900 tokens: both beyond the window)."""
    return long_pair(nq5, 1_500, 1_500)


@pytest.fixture()
def window(monkeypatch, generator):
    """Every LM alive, and every LM built during the test, takes ``WINDOW`` tokens; the ones built during the
    test are closed after it, the others get their own context back."""
    from harness.lm import instances, live, release

    before = live()
    for lm in before:
        monkeypatch.setattr(lm, "context_length", WINDOW)
    monkeypatch.setattr(instances, "context_length", lambda *a, **k: WINDOW)
    yield
    release(lambda lm: all(lm is not old for old in before))


def assert_answered(rows: list[dict]) -> None:
    for row in rows:
        assert "error" not in row, row.get("error")
        assert isinstance(row["prediction"], str) and row["completion_tokens"] > 0


@pytest.mark.usefixtures("window")
def test_the_generator_fits_both_and_records_the_cut(generator, long_examples, nq5):
    from methods.vanilla import Full

    full = Full()
    rows, _ = process([*long_examples, nq5[2]], full, generator, on_error="fail")
    assert_answered(rows)
    long_q, long_p, plain = (r["meta"].get("truncated", {}).get("generator") for r in rows)
    assert long_q["documents"] > 0 and long_q["question"] > 25_000  # no room for any document, nor the question
    assert set(long_p) == {"documents"} and long_p["documents"] > 50_000  # the question kept whole
    assert plain is None
    assert all(r["prompt_tokens"] + 32 <= WINDOW for r in rows)
    s = summarize(rows)
    assert s["truncated_examples"] == 2 and s["truncated"]["generator"]["examples"] == 2


@pytest.mark.vllm
def test_the_vllm_generator_answers_both(long_examples):
    """The default engine: before the fit, vLLM refused a prompt of 8192 tokens plus the answer's."""
    pytest.importorskip("vllm")
    from harness.generators.lm_generator import LMGenerator
    from methods.vanilla import Full

    gen = LMGenerator(LM, "smollm2-vllm", engine="vllm", dtype="float32")
    rows, _ = process(long_examples, Full(), gen, on_error="fail")
    assert_answered(rows)
    assert all("generator" in r["meta"]["truncated"] for r in rows)


def method_config(name: str):
    from hydra import compose, initialize_config_dir

    from harness.config import register_resolvers
    from tests.conftest import REPO

    register_resolvers()
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        overrides = [f"method={name}", "models.lm_dtype=float32", "models.lm_engine=transformers"]
        return compose("config", overrides=overrides).method


# the stage under which each method records its own cut of the long question (None: it never reads it)
STAGES = {
    "compselect": "extractor",
    "finefilter": "extractor",
    "exit": "exit",
    "refiner": "refiner",
    "recomp_abs": "recomp",
    "edc2": "edc2",
    "longllmlingua": "longllmlingua",
    "selective_context": None,
}


@pytest.mark.usefixtures("window")
@pytest.mark.parametrize("name", list(STAGES))
def test_every_lm_method_compresses_both_and_the_generator_answers(name, env, generator, scaled_examples, monkeypatch):
    """On the transformers engine (the rule lives in the model layer, above either engine). LongLLMLingua scores
    with llmlingua's own copy of the model, whose window is its ``max_position_embeddings``: narrowed alike."""
    method = build_method(method_config(name))
    method.bind(env)
    if hasattr(getattr(method, "compressor", None), "max_position_embeddings"):
        monkeypatch.setattr(method.compressor, "max_position_embeddings", WINDOW)
    rows, _ = process(scaled_examples, method, generator, on_error="fail")
    assert_answered(rows)
    cuts = rows[0]["meta"].get("truncated", {})
    stage = STAGES[name]
    if stage is not None:
        assert cuts[stage]["question"] > 0, cuts
