"""Naive, Full, oracle sentences and BM25 selection on real examples, plus the shared text utilities."""

from __future__ import annotations

import pytest

from harness.text import assemble, bm25_scores, sentence_units, split_sentences
from harness.types import Example, Passage, Unit
from methods.oracle_sentences import OracleSentences, contains_answer
from methods.rerank import RerankSelect, select_units
from methods.scorers import BM25Scorer
from methods.vanilla import Full, Naive, TopPassages

EMPTY = Example("e", "who?", ("x",), ())


def test_sentence_splitter_is_real():
    assert split_sentences("Mr. Smith went to Washington D.C. in 1999. He liked it! Did he?") == [
        "Mr. Smith went to Washington D.C. in 1999.",
        "He liked it!",
        "Did he?",
    ]
    assert split_sentences("   ") == []


def test_naive_and_full(nq5):
    ex = nq5[0]
    assert Naive().compress(ex).documents == []
    full = Full().compress(ex)
    assert full.documents == [p.render() for p in ex.passages]
    assert full.units == [Unit(i) for i in range(5)]


def test_top1_keeps_the_first_passage_as_read_and_nothing_else(nq5, hotpot3):
    ex = nq5[0]
    c = TopPassages(k=1).compress(ex)
    assert c.documents == [ex.passages[0].render()] and c.units == [Unit(0)]
    assert TopPassages(k=2).compress(ex).documents == [p.render() for p in ex.passages[:2]]
    h = hotpot3[0]  # whatever order the run reads (BM25 on HotpotQA in a run): its first passage
    assert TopPassages().compress(h).documents == [h.passages[0].render()]
    with pytest.raises(ValueError, match="at least one"):
        TopPassages(k=0)


def test_oracle_keeps_exactly_answer_sentences_in_order(nq5):
    for ex in nq5:
        comp = OracleSentences().compress(ex)
        units, texts = sentence_units(ex.passages)
        expected = [u for u, t in zip(units, texts, strict=True) if any(a in t for a in ex.answers)]
        assert comp.units == expected
        assert comp.units == sorted(comp.units, key=lambda u: (u.passage, u.sentence))
        assert comp.documents == assemble(ex.passages, expected)
    assert OracleSentences().compress(EMPTY).documents == []


def test_oracle_match_rules():
    assert contains_answer("Paris is big", ["Paris"])
    assert not contains_answer("paris is big", ["Paris"])  # the authors' raw, case-sensitive test
    assert contains_answer("paris, is big", ["Paris"], "normalized")
    assert not contains_answer("Parisian food", ["Paris"], "normalized")  # whole tokens only


def test_bm25_scores_prefer_lexical_match():
    s = bm25_scores("capital of france", ["Berlin is in Germany.", "Paris is the capital of France."])
    assert s[1] > s[0] == 0
    assert list(bm25_scores("zzz", ["a b c"])) == [0.0]


def test_select_units_by_top_k_and_budget():
    assert select_units([2, 0, 1], [5, 5, 5], top_k=2, budget=None) == [2, 0]
    assert select_units([2, 0, 1], [5, 6, 4], top_k=None, budget=10) == [2, 0]  # 4 + 5, then 6 does not fit
    assert select_units([0, 1, 2], [5, 6, 4], top_k=None, budget=10) == [0]  # stops at the first misfit
    assert select_units([2, 0, 1], [5, 5, 5], top_k=None, budget=4) == []


def test_bm25_passage_top1_is_the_best_passage(nq5, env):
    m = RerankSelect(BM25Scorer(), granularity="passage", top_k=1)
    m.bind(env)
    for ex in nq5:
        comp = m.compress(ex)
        scores = bm25_scores(ex.question, [p.render() for p in ex.passages])
        assert comp.units == [Unit(int(scores.argmax()))]
        assert comp.documents == [ex.passages[int(scores.argmax())].render()]
    assert m.compress(EMPTY).documents == []


def test_bm25_sentences_honour_the_rate_and_original_order(nq5, env):
    m = RerankSelect(BM25Scorer(), granularity="sentence", rate=0.25)
    m.bind(env)
    for ex in nq5:
        comp = m.compress(ex)
        _, texts = sentence_units(ex.passages)
        total = sum(env.count_tokens(t) for t in texts)
        kept = sum(env.count_tokens(split_sentences(ex.passages[u.passage].text)[u.sentence]) for u in comp.units)
        assert kept <= 0.25 * total
        assert comp.units == sorted(comp.units, key=lambda u: (u.passage, u.sentence))


def test_rerank_rejects_bad_settings():
    with pytest.raises(ValueError, match="granularity"):
        RerankSelect(BM25Scorer(), granularity="token", top_k=1)
    with pytest.raises(ValueError, match="top_k, rate"):
        RerankSelect(BM25Scorer())


def test_generator_answers_with_context(generator):
    from harness.prompt import build_messages

    [g] = generator.generate(
        [build_messages("What is the capital of France?", [Passage("Paris is the capital of France.").render()])]
    )
    assert "paris" in g.answer.lower()
    assert generator.count_tokens("") == 0 < generator.count_tokens("Paris")


def test_bm25_scoring_logs_nothing_below_warning(caplog):
    """bm25s sets its logger to DEBUG on import (a line per index built, screens of them per run)."""
    import logging

    from harness.text import bm25_scores

    with caplog.at_level(logging.DEBUG):
        scores = bm25_scores("capital of France", ["Paris is the capital of France.", "Rome is in Italy."])
    assert scores[0] > scores[1] == 0
    assert not [r for r in caplog.records if r.name.startswith("bm25s")]
