"""Every LM call fits its prompt to its engine (``harness.lm.fit``): prompt + new tokens within the context, the
documents cut first from their end by whole sentences, the question only when it alone overflows; what was cut
is recorded per example and counted in the summary. These tests use the embedded model's real tokenizer (no
weights); the LM runs are in ``test_fit_models.py``."""

from __future__ import annotations

import pytest

from harness.lm.fit import ByteEstimate, FittedMessages, cut_text, fit_prompt
from harness.lm.loading import load_tokenizer
from harness.lm.model import LM
from harness.prompt import get_prompt
from harness.records import summarize
from tests.conftest import LM as SMOLLM2
from tests.http_stub import JSONHandler, chat_reply, serve

SENTENCE = "The river flows past the old mill and the town of Elm. "
LONG_QUESTION = " ".join(["who"] * 30_000) + "?"  # 30,000 words
LONG_PASSAGE = "Elm\n" + SENTENCE * 4_200  # about 50,000 words


@pytest.fixture(scope="module")
def lm() -> LM:
    """The embedded model's tokenizer with no engine: fitting only tokenises."""
    info = {"weights_sha256": None, "engine": "none", "dtype": None}
    return LM(SMOLLM2, None, load_tokenizer(SMOLLM2), info, context_length=8192)


def render(documents, question):
    return get_prompt("paper").messages(question, documents)


def test_a_prompt_that_fits_is_left_as_it_is(lm):
    fit = fit_prompt(lm, render, {"documents": ["Elm\nA short one."], "question": "where?"}, 32)
    assert fit.cut == {} and fit.ids == lm.encode_chat(render(["Elm\nA short one."], "where?"))


def test_a_long_passage_is_cut_from_its_end_by_whole_sentences_and_the_question_kept(lm):
    assert len(LONG_PASSAGE.split()) > 50_000
    docs = ["Oak\nThe first document stays whole.", LONG_PASSAGE, "Ash\nA third one goes first."]
    fit = fit_prompt(lm, render, {"documents": docs, "question": "where is Elm?"}, 32)
    assert len(fit.ids) + 32 <= 8192 and fit.parts["question"] == "where is Elm?"
    kept = fit.parts["documents"]
    assert kept[0] == docs[0] and len(kept) == 2 and kept[1].endswith("town of Elm.")  # a whole sentence
    assert fit.cut == {"documents": sum(lm.count(d) for d in docs) - sum(lm.count(d) for d in kept)}


def test_the_question_is_cut_only_when_it_alone_overflows(lm):
    fit = fit_prompt(lm, render, {"documents": [LONG_PASSAGE], "question": LONG_QUESTION}, 32)
    assert len(fit.ids) + 32 <= 8192 and fit.parts["documents"] == []
    assert set(fit.cut) == {"documents", "question"} and fit.cut["documents"] == lm.count(LONG_PASSAGE)
    assert LONG_QUESTION.startswith(fit.parts["question"]) and fit.cut["question"] > 20_000
    # a question that fits with no documents keeps every token: the documents pay for it
    q = " ".join(["who"] * 6_000)
    fit = fit_prompt(lm, render, {"documents": [LONG_PASSAGE], "question": q}, 32)
    assert fit.parts["question"] == q and set(fit.cut) == {"documents"}


def test_a_text_is_cut_at_a_word_where_no_sentence_ends(lm):
    text = " ".join(["alpha"] * 100)
    head, n = cut_text(lm, text, 10)
    assert text.startswith(head) and head.endswith("alpha") and n == lm.count(text) - lm.count(head) >= 10


def test_the_byte_estimate_never_counts_fewer_tokens_than_the_tokenizer(lm):
    est = ByteEstimate("served", 8192)
    for text in (SENTENCE * 50, "Zürich, 東京 and Αθήνα. " * 40, LONG_QUESTION[:5000]):
        assert est.count(text) >= lm.count(text)
        msgs = render([text], "where?")
        assert len(est.encode_chat(msgs)) >= len(lm.encode_chat(msgs))
    fit = fit_prompt(est, render, {"documents": [LONG_PASSAGE], "question": LONG_QUESTION}, 32)
    assert len(lm.encode_chat(fit.prompt)) + 32 <= 8192 and set(fit.cut) == {"documents", "question"}


def test_the_summary_counts_truncated_examples_per_stage_and_part():
    base = {"subem": 1, "em": 1, "f1": 1.0, "original_tokens": 10, "compressed_tokens": 5, "compress_s": 0.1}
    base |= {"generate_s": 0.1, "prediction": "x", "context": "c", "question": "q"}
    rows = [
        {**base, "id": "a", "meta": {"truncated": {"generator": {"documents": 7}}}},
        {**base, "id": "b", "meta": {"truncated": {"generator": {"question": 3}, "extractor": {"documents": 5}}}},
        {**base, "id": "c", "meta": {}},
    ]
    s = summarize(rows)
    assert s["truncated_examples"] == 2
    assert s["truncated"] == {
        "generator": {"examples": 2, "documents": 7, "question": 3},
        "extractor": {"examples": 1, "documents": 5},
    }


# -- the server generator: a stub server that echoes the prompt's last message -----------------------------------
@pytest.mark.parametrize("tokenizer", [SMOLLM2, "server"])
def test_the_server_generator_fits_its_prompts_and_records_the_cut(stub_server, tokenizer):
    from harness.generators.openai_server import OpenAIServerGenerator

    gen = OpenAIServerGenerator("s", "m", stub_server, tokenizer, api_key_env=None, retries=0)
    asked = [
        gen.messages(LONG_QUESTION, [LONG_PASSAGE]),
        gen.messages("where is Elm?", ["Oak\nShort.", LONG_PASSAGE]),
        gen.messages("where is Elm?", ["Oak\nShort."]),
    ]
    assert all(isinstance(m, FittedMessages) for m in asked)
    out = gen.generate(asked)
    assert [sorted(g.truncated) for g in out] == [["documents", "question"], ["documents"], []]
    tok = load_tokenizer(SMOLLM2)
    for m in asked:  # what reached the server fits its context with the answer's room
        assert len(tok.apply_chat_template(list(m), add_generation_prompt=True)) + 32 <= 8192
    assert out[2].text == "Question: where is Elm?\nDocuments:\nDoc1: Oak\nShort."


class _Echo(JSONHandler):
    def do_POST(self):
        self.send_json(chat_reply(self.read_json()["messages"][-1]["content"]))


@pytest.fixture()
def stub_server():
    with serve(_Echo) as url:
        yield url


def test_an_id_prompt_that_still_overflows_keeps_its_head_and_tail_in_the_model_layer(lm, caplog):
    ids = list(range(9_000))
    with caplog.at_level("WARNING"):
        kept = lm._ids(ids, 8192 - 32)
    assert len(kept) == 8160 and kept[:100] == ids[:100] and kept[-32:] == ids[-32:]
    assert "cut to 8160" in caplog.text
    assert lm._ids(ids[:50], 8160) == ids[:50]


def test_fitted_ids_serve_only_their_own_tokenizer(lm):
    """A generator's fitted prompt carries its tokenizer's ids; another LM (a CI scorer of other weights, or a
    server generator whose byte estimate gives no real ids) encodes the messages again."""
    from harness.lm.fit import fit_messages

    own = fit_messages(lm, get_prompt("paper"), "where is Elm?", ["Elm\nA town."], 32)
    assert own.tokenizer is lm.tokenizer and lm._ids(own) == own.ids == lm.encode_chat(own)
    by_bytes = fit_messages(ByteEstimate(SMOLLM2, 8192), get_prompt("paper"), "where is Elm?", ["Elm\nA town."], 32)
    assert set(by_bytes.ids) == {0}  # a count, not a tokenization
    assert lm._ids(by_bytes) == lm.encode_chat(by_bytes) != by_bytes.ids
