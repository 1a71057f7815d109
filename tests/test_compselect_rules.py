"""CompSelect's rules without a model: clue parsing and mapping, KNN targets, truncation labels, cascade
flags."""

from __future__ import annotations

import json

import numpy as np
import pytest

from methods.compselect.cascade import cascade
from methods.compselect.parsing import map_clues, parse_lines, parse_truncation
from methods.compselect.prompts import truncator_target
from methods.compselect.train_data import clues_from_labels
from methods.compselect.train_labels import (
    answer_sentences,
    knn_expand,
    likelihood_label,
    order_by_similarity,
    pad_target,
    reranker_pairs,
    reranker_positives,
    target_triplets,
    truncation_label,
)
from methods.compselect.train_verdicts import likelihood_fallback, truncation_labels

SOURCES = [
    "Paris is the capital and most populous city of France.",
    "The Eiffel Tower was completed in 1889.",
    "It is named after the engineer Gustave Eiffel.",
    "Lyon is the third-largest city of France.",
]


def test_parse_lines_reads_numbers_and_strips_prefixes():
    out = "Sentence 1: Alpha beta.\n\nsentence 2 : Gamma.\n- Delta.\n3. Epsilon.\nDocument 4: Zeta."
    assert parse_lines(out) == [
        (1, "Alpha beta."),
        (2, "Gamma."),
        (None, "Delta."),
        (None, "Epsilon."),
        (None, "Zeta."),
    ]


def test_clues_map_back_to_sources_despite_small_edits():
    out = (
        "Sentence 1: The Eiffel Tower was completed in 1889.\n"  # exact copy
        "Sentence 2: Paris is the capital and most populous city in France\n"  # one word changed, no period
        "Sentence 3: Berlin is the capital of Germany.\n"  # not in the documents
        "Sentence 4: The Eiffel Tower was completed in 1889."  # a repeat
    )
    clues, dropped = map_clues(out, SOURCES)
    assert [c.source for c in clues] == [1, 0]
    assert clues[0].score == 1.0 and 0.8 <= clues[1].score < 1.0
    assert clues[1].text == SOURCES[0]  # the generator sees the source sentence, not the edited copy
    assert dropped == ["Berlin is the capital of Germany."]


def test_merged_line_is_split_and_each_sentence_mapped():
    out = "Sentence 1: It is named after the engineer Gustave Eiffel. Lyon is the third-largest city of France."
    clues, dropped = map_clues(out, SOURCES)
    assert [c.source for c in clues] == [2, 3] and dropped == []


def test_mapping_threshold_is_configurable():
    line = "Sentence 1: Paris is the capital of France."
    assert map_clues(line, SOURCES, threshold=0.8)[0] == []
    assert [c.source for c in map_clues(line, SOURCES, threshold=0.6)[0]] == [0]


def test_truncator_text_output_gives_prefix_length():
    ranked = SOURCES[:3]
    assert parse_truncation("Sentence 1: " + ranked[0] + "\nSentence 2: " + ranked[1], ranked) == 2
    assert parse_truncation("Sentence 1: " + ranked[2], ranked) == 3  # reproduces rank 3: keep up to it
    assert parse_truncation(truncator_target(ranked, 3), ranked) == 3


def test_empty_truncation():
    ranked = SOURCES[:3]
    assert truncator_target(ranked, 0) == ""
    assert parse_truncation("", ranked) == 0
    assert parse_truncation("I cannot tell.", ranked) == 0
    assert parse_truncation("0", ranked, mode="index") == 0 and truncator_target(ranked, 0, "index") == "0"
    assert parse_truncation("K = 7", ranked, mode="index") == 3  # clamped to n


def test_answer_sentences_use_the_authors_raw_match():
    sents = ["He was born in Paris.", "PARIS is big.", "Nothing here."]
    assert answer_sentences(sents, ["Paris"]) == [0]
    assert answer_sentences(sents, ["Paris"], match="normalized") == [0, 1]


def test_knn_expansion_on_hand_made_embeddings():
    def unit(deg):
        r = np.deg2rad(deg)
        return [np.cos(r), np.sin(r)]

    # angles from the seed (row 0): cosine distance 1 - cos(theta)
    emb = np.array([unit(0), unit(10), unit(25), unit(35), unit(90)])  # distances 0, .015, .094, .181, 1
    assert knn_expand(emb, [0], 0.0) == [0]
    assert knn_expand(emb, [0], 0.05) == [0, 1]
    assert knn_expand(emb, [0], 0.1) == [0, 1, 2]
    assert knn_expand(emb, [0], 0.15) == [0, 1, 2]
    assert knn_expand(emb, [0, 4], 0.05) == [0, 1, 4]  # near any seed
    assert knn_expand(emb, [], 0.15) == []
    query = np.array(unit(30))
    assert order_by_similarity([0, 1, 2], emb, query) == [2, 1, 0]
    # padding keeps the target first, then the other rows closest to the query (25 and 35 degrees tie at 5 from
    # 30: index order; then 10, then 0)
    assert pad_target([4], emb, query, 3) == [4, 2, 3]
    assert pad_target([4, 0], emb, query, 3) == [4, 0, 2]
    assert pad_target([4, 0], emb, query, 2) == [4, 0]
    assert pad_target([4], emb, query, None) == [4]
    assert pad_target([4], emb, query, 9) == [4, 2, 3, 1, 0]  # no more rows than there are


def fake_generator_verdict(docs: list[str]) -> bool:
    """A deterministic 'generator': right when the answer clue is shown among at most 4 clues."""
    return any("ANSWER" in d for d in docs) and len(docs) <= 4


def test_truncation_label_is_the_papers_argmin():
    ranked = ["c1", "c2", "ANSWER c3", "c4", "c5", "c6"]
    calls = []

    def correct(k):
        calls.append(k)
        return fake_generator_verdict(ranked[:k])

    assert truncation_label(len(ranked), correct) == 3
    assert calls == [1, 2, 3]  # scans upwards and stops at the first correct prefix
    assert truncation_label(len(ranked), correct, scan="authors_code") == 4  # the released code's largest k
    assert truncation_label(len(ranked), lambda k: False) == 0  # no prefix suffices: the empty set
    assert truncation_label(0, correct) == 0
    with pytest.raises(ValueError):
        truncation_label(3, correct, scan="middle")


def test_truncation_labels_batched_scan_matches_the_rule():
    class Labeller:
        def __init__(self):
            self.batches = []

        def correct(self, items):
            self.batches.append(len(items))
            return [fake_generator_verdict(docs) for _, docs, _ in items]

    questions = [
        ("q1", ["ANSWER a", "b"], ["x"]),
        ("q2", ["a", "b", "ANSWER c"], ["x"]),
        ("q3", ["a", "b"], ["x"]),
        ("q4", ["a", "b", "c", "d", "ANSWER e"], ["x"]),
    ]
    lab = Labeller()
    assert truncation_labels(lab, questions, "argmin") == [1, 3, 0, 0]
    assert lab.batches == [4, 3, 2, 1, 1]  # lock-step rounds; a question leaves at its first correct prefix


def test_reranker_pairs_drop_all_or_none_positive():
    assert reranker_pairs(["a", "b", "c"], [True, False, False]) == [("a", "b"), ("a", "c")]
    assert reranker_pairs(["a", "b"], [True, True]) == []
    assert reranker_pairs(["a", "b"], [False, False]) == []


def test_reranker_positives_rules():
    correct, has_answer = [True, False, False], [False, True, False]
    assert reranker_positives(correct, has_answer, "generator") == [True, False, False]  # the paper's
    assert reranker_positives(correct, has_answer, "answer") == [False, True, False]
    assert reranker_positives(correct, has_answer, "either") == [True, True, False]
    with pytest.raises(ValueError, match="valid: generator, answer, either"):
        reranker_positives(correct, has_answer, "gold")


def test_target_triplets_pair_answer_sentences_with_the_rest_of_the_target():
    # the target lists a KNN addition (7) before the answer sentence (3); padding (9, 1) after
    row = {"id": "q1", "target": [7, 3, 9, 1], "answer_sentences": [3], "texts": ["k", "ans", "p1", "p2"]}
    no_answer = {"id": "q2", "target": [], "answer_sentences": []}
    only_answers = {"id": "q3", "target": [0, 2], "answer_sentences": [0, 2], "texts": ["a", "b"]}
    questions = {"q1": "Q1?", "q2": "Q2?", "q3": "Q3?"}
    every = target_triplets([row, no_answer, only_answers], questions, 5, seed=0)
    assert sorted(every) == [("Q1?", "ans", "k"), ("Q1?", "ans", "p1"), ("Q1?", "ans", "p2")]
    two = target_triplets([row], questions, 2, seed=0)
    assert len(two) == 2 and set(two) <= set(every)
    assert two == target_triplets([row], questions, 2, seed=0)  # seeded
    assert target_triplets([row], questions, 0, seed=0) == []  # off: the paper's labelling questions only


def test_cascade_flags():
    passages = ["The tower opened in 1889 in Paris."]
    c = cascade(passages, ["Opened in 1889.", "Other."], ["Other.", "Opened in 1889."], ["Other."], ["1889"])
    assert c == {"eligible": True, "recall1": 1.0, "hit2_at1": 0.0, "recall3": 0.0}
    # the reranker puts the gold clue first and the truncator keeps it: every stage holds the answer
    c = cascade(passages, ["Other.", "Opened in 1889."], ["Opened in 1889.", "Other."], ["Opened in 1889."], ["1889"])
    assert c == {"eligible": True, "recall1": 1.0, "hit2_at1": 1.0, "recall3": 1.0}
    # the extractor loses the answer: nothing later can recover it (SQuAD-normalised matching)
    c = cascade(passages, ["Other."], ["Other."], ["Other."], ["the 1889"])
    assert c == {"eligible": True, "recall1": 0.0, "hit2_at1": 0.0, "recall3": 0.0}
    c = cascade(passages, [], [], [], ["1890"])
    assert c["eligible"] is False and c["recall1"] is None


def test_empty_truncation_means_closed_book():
    from harness.types import Example, Passage, Unit
    from methods.compselect.method import CompSelect, ExtractorInput
    from methods.compselect.parsing import Clue

    ex = Example("x", "When was the tower completed?", ("1889",), (Passage(" ".join(SOURCES)),))
    x = ExtractorInput([], [Unit(0, i) for i in range(4)], SOURCES, 4)
    clues = [Clue(1, SOURCES[1], SOURCES[1], 1.0), Clue(0, SOURCES[0], SOURCES[0], 1.0)]
    empty = CompSelect._result(ex, x, clues, [], clues, [0.9, 0.1], 0, "", {"extract": 1.0})
    assert empty.documents == [] and empty.units == [] and empty.meta["kept"] == []
    assert empty.meta["diagnostics"] == {"eligible": True, "recall1": 1.0, "hit2_at1": 1.0, "recall3": 0.0}
    one = CompSelect._result(ex, x, clues, [], clues, [0.9, 0.1], 1, "Sentence 1: ...", {"extract": 1.0})
    assert one.documents == [SOURCES[1]] and one.units == [Unit(0, 1)] and one.meta["k"] == 1


def test_clue_context_widens_what_is_shown_of_the_same_kept_clues():
    """Two passages; clues kept in ranked order: passage 1's sentence 0, then passage 0's sentences 2 and 0."""
    from harness.types import Passage, Unit
    from methods.compselect.context import clue_documents

    tower = Passage(" ".join(SOURCES), title="Paris")
    other = Passage("Rome is in Italy. It has the Colosseum.", title="Rome")
    kept = [Unit(1, 0), Unit(0, 2), Unit(0, 0)]
    docs, units = clue_documents([tower, other], kept, "sentence")
    assert docs == ["Rome is in Italy.", SOURCES[2], SOURCES[0]] and units == kept
    docs, units = clue_documents([tower, other], kept, "titled")
    assert docs == ["Rome\nRome is in Italy.", f"Paris\n{SOURCES[0]} {SOURCES[2]}"]
    assert units == [Unit(1, 0), Unit(0, 0), Unit(0, 2)]
    docs, units = clue_documents([tower, other], kept, "window")
    assert docs == [f"Rome\n{other.text}", f"Paris\n{tower.text}"]
    assert units == [Unit(1, 0), Unit(1, 1), *(Unit(0, s) for s in range(4))]
    docs, units = clue_documents([tower, other], kept[:1], "passage")
    assert docs == [other.render()] and units == [Unit(1, None)]
    assert clue_documents([tower], [], "window") == ([], [])
    with pytest.raises(ValueError, match="clue_context='paragraph'"):
        clue_documents([tower], kept, "paragraph")


def test_result_reads_each_cascade_flag_from_its_own_stage():
    """Extracted, ranked and kept clues differ: the answer clue is extracted, ranked second, and cut."""
    from harness.types import Example, Passage, Unit
    from methods.compselect.method import CompSelect, ExtractorInput
    from methods.compselect.parsing import Clue

    ex = Example("x", "When was the tower completed?", ("1889",), (Passage(" ".join(SOURCES)),))
    x = ExtractorInput([], [Unit(0, i) for i in range(4)], SOURCES, 4)
    answer, other = Clue(1, SOURCES[1], SOURCES[1], 1.0), Clue(2, SOURCES[2], SOURCES[2], 1.0)
    r = CompSelect._result(ex, x, [answer, other], [], [other, answer], [0.9, 0.1], 1, "", {})
    assert r.meta["diagnostics"] == {"eligible": True, "recall1": 1.0, "hit2_at1": 0.0, "recall3": 0.0}
    assert [e["unit"] for e in r.meta["extracted"]] == [[0, 1], [0, 2]]
    assert [e["unit"] for e in r.meta["ranked"]] == [[0, 2], [0, 1]] and r.meta["kept"] == [[0, 2]]
    assert r.documents == [SOURCES[2]]


def test_balance_empty_keeps_every_nonempty_label_and_caps_the_empty_ones():
    from methods.compselect.train_labels import balance_empty

    ids = [f"q{i}" for i in range(20)]
    k = {i: (2 if n % 5 == 0 else 0) for n, i in enumerate(ids)}  # 4 non-empty, 16 empty
    assert balance_empty(ids, k, None, 0) == ids
    kept = balance_empty(ids, k, 1.0, 0)
    assert [i for i in kept if k[i] > 0] == ["q0", "q5", "q10", "q15"] and len(kept) == 8
    assert kept == [i for i in ids if i in set(kept)]  # original order
    assert kept == balance_empty(ids, k, 1.0, 0) and kept != balance_empty(ids, k, 1.0, 1)
    assert len(balance_empty(ids, k, 10.0, 0)) == 20  # a cap above the count keeps all


def test_likelihood_label_is_the_most_likely_prefix_smallest_on_ties():
    assert likelihood_label([2.0, 0.5, 0.9]) == 1
    assert likelihood_label([0.4, 0.5, 0.9]) == 0  # no clue helps: empty
    assert likelihood_label([2.0, 0.5, 0.5]) == 1
    with pytest.raises(ValueError):
        likelihood_label([])


def test_likelihood_fallback_replaces_only_the_empty_labels():
    """A deterministic NLL: the gold answer gets likelier with each clue that contains it, a little less
    likely with a distractor."""

    class Nll:
        def __init__(self):
            self.asked = []

        def nll(self, items):
            self.asked += [len(docs) for _, docs, _ in items]
            return [3.0 - sum(2.0 if "ANSWER" in d else -0.1 for d in docs) for _, docs, _ in items]

    questions = [
        ("q1", ["ANSWER a", "b"], ["x"]),  # the paper's label stands
        ("q2", ["half ANSWER", "b", "c"], ["x"]),  # not correct anywhere, but the first clue helps
        ("q3", ["a", "b"], ["x"]),  # nothing helps
    ]
    nll = Nll()
    ks, nlls = likelihood_fallback(nll, questions, [1, 0, 0])
    assert ks == [1, 1, 0]
    assert nlls[0] is None and nlls[1] == [3.0, 1.0, 1.1, 1.2] and nlls[2] == [3.0, 3.1, 3.2]
    assert nll.asked == [0, 1, 2, 3, 0, 1, 2]  # every prefix of the empty-labelled questions, the empty one too


def test_retraining_one_stage_keeps_the_other_reports_and_the_earlier_runs(tmp_path):
    """A run that trains only a (possibly renamed) truncator keeps every earlier stage report and the record
    of how the earlier runs were made, oldest first."""
    import json

    from methods.compselect.train_manifest import earlier_runs, previous_reports

    assert previous_reports(tmp_path) == {} and earlier_runs(tmp_path) == []
    first = {
        "created": "t1",
        "total": {"wall_s": 1086.5},
        "extractor": {"train": {"val_loss_after": 0.2}},
        "truncator": {"labels": {"output": "text"}, "train": {}},
        "labels_only": {"truncator_labels": {}},
    }
    (tmp_path / "manifest.json").write_text(json.dumps(first))
    assert set(previous_reports(tmp_path)) == {"extractor", "truncator"}
    assert earlier_runs(tmp_path) == [{"created": "t1", "total": {"wall_s": 1086.5}}]
    second = {**first, "created": "t2", "truncator_index": {"train": {}}, "earlier_runs": earlier_runs(tmp_path)}
    (tmp_path / "manifest.json").write_text(json.dumps(second))
    assert set(previous_reports(tmp_path)) == {"extractor", "truncator", "truncator_index"}
    assert [r["created"] for r in earlier_runs(tmp_path)] == ["t1", "t2"]


def test_finefilter_is_compselect_with_an_index_truncator():
    from hydra import compose, initialize_config_dir

    from harness.config import register_resolvers
    from tests.conftest import REPO

    register_resolvers()
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        ff = compose("config", overrides=["method=finefilter"]).method
        cs = compose("config", overrides=["method=compselect"]).method
    assert ff.truncator_output == "index" and cs.truncator_output == "text"
    assert ff.truncator.endswith("/truncator_index") and ff.extractor == cs.extractor
    assert ff.reranker == cs.reranker
    assert parse_truncation("2", ["a", "b", "c"], "index") == 2 and parse_truncation("0", ["a"], "index") == 0


def test_the_paper_profile_keeps_the_greedy_truncator_and_the_embedded_one_a_validated_threshold():
    from hydra import compose, initialize_config_dir

    from harness.config import register_resolvers
    from tests.conftest import REPO

    register_resolvers()
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        paper = {
            m: compose("config", overrides=[f"method={m}", "profile=paper"]).method
            for m in ("compselect", "finefilter")
        }
        emb = {m: compose("config", overrides=[f"method={m}"]).method for m in ("compselect", "finefilter")}
    assert all(c.empty_threshold is None and c.max_input_tokens == 2048 for c in paper.values())
    assert all(0 < c.empty_threshold <= 1 and c.max_input_tokens == 1024 for c in emb.values())


def test_extractor_probe_recall_counts_only_eligible_questions():
    from research.compselect.extractor_probe import _recall

    flags = [
        {"eligible": True, "recall1": 1.0},
        {"eligible": True, "recall1": 0.0},
        {"eligible": False, "recall1": None},
    ]
    assert _recall(flags, [["a", "b"], ["c"], []]) == {
        "questions": 3,
        "eligible": 2,
        "recall1": 50.0,
        "clues": {0: 1, 1: 1, 2: 1},
    }


def test_reranker_cv_hit_at_1_counts_questions_with_a_flagged_clue():
    from research.compselect.reranker_cv import _pooled, hit_at_1

    rows = [
        {
            "id": "a",
            "clues": [{"text": "x", "answer": False, "correct": False}, {"text": "y", "answer": True, "correct": True}],
        },
        {
            "id": "b",
            "clues": [
                {"text": "z", "answer": True, "correct": False},
                {"text": "w", "answer": False, "correct": False},
            ],
        },
    ]
    questions = {"a": "qa", "b": "qb"}
    # the extractor's order (first clue first): b's first clue holds the answer, a's does not
    first = hit_at_1(rows, questions, lambda q, t: [-j for j in range(len(t))])
    assert first == {"answer": [50.0, 2], "correct": [0.0, 1]}
    last = hit_at_1(rows, questions, lambda q, t: list(range(len(t))))
    assert last == {"answer": [50.0, 2], "correct": [100.0, 1]}
    assert _pooled([first, last]) == {"answer": [50.0, 4], "correct": [50.0, 2]}


def test_carried_stage_reports_are_marked_stale_when_their_weights_changed():
    """A stage not re-run keeps its earlier report, unless its adapter was replaced since (copied in by hand)."""
    from methods.compselect.train_manifest import carried_reports

    prev = {
        "artifacts": {"reranker": "aaa", "truncator": "bbb"},
        "seed": 42,
        "reranker": {"train": {"steps": 56}},
        "truncator": {"train": {"steps": 129}},
        "labels_only": {"x": 1},
    }
    got = carried_reports(prev, {"reranker": "ccc", "truncator": "bbb"})
    assert set(got) == {"reranker", "truncator"}
    assert "stale" in got["reranker"] and got["reranker"]["train"] == {"steps": 56}
    assert "stale" not in got["truncator"] and got["truncator"] == prev["truncator"]


def test_reranker_labels_from_an_earlier_run_give_its_clues_and_verdicts(tmp_path):
    labels = tmp_path / "reranker_labels.jsonl"
    rows = [
        {"id": "a", "part": "train", "clues": [{"text": "x", "correct": False}, {"text": "y", "correct": True}]},
        {"id": "b", "part": "val", "clues": []},
    ]
    labels.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    clues, ok = clues_from_labels(labels, ["b", "a"])
    assert [c.text for c in clues["a"]] == ["x", "y"] and clues["b"] == []
    assert [ok[("a", c.source)] for c in clues["a"]] == [False, True]
    with pytest.raises(ValueError, match=r"1 labelling questions missing \(first: c\)"):
        clues_from_labels(labels, ["a", "c"])


def test_reranker_labels_from_refuses_a_run_that_retrains_the_extractor(tmp_path):
    from hydra import compose, initialize_config_dir

    from harness.config import register_resolvers
    from methods.compselect import train
    from tests.conftest import REPO

    register_resolvers()
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            "train/compselect",
            overrides=[
                f"out_dir={tmp_path}",
                "stages=[extractor,reranker]",
                f"reranker.labels_from={tmp_path / 'r.jsonl'}",
            ],
        )
    with pytest.raises(ValueError, match="re-uses an earlier extractor's clues"):
        train.run(cfg)  # before any model or data is loaded


def test_val_split_holds_only_the_held_out_train_questions(tmp_path):
    """The questions that chose ``clue_context``: CompSelect's validation parts, none it trained on or tests on."""
    import gzip

    from research.compselect.val_split import ARTIFACTS, write_val_split

    counts = write_val_split(tmp_path)
    splits = json.loads((ARTIFACTS / "splits.json").read_text())
    trained = {i for part in splits.values() for i in part["train"]}
    ids = []
    for d in counts:
        with gzip.open(tmp_path / d / "val.jsonl.gz", "rt") as f:
            ids += [json.loads(x)["id"] for x in f]
    assert len(ids) == sum(counts.values()) == sum(len(p["val"]) for p in splits.values())
    assert counts["nq"] > 0 and counts["triviaqa"] > 0 and counts["hotpotqa"] > 0
    assert not trained & set(ids)


def test_titled_reranker_input_scores_each_clue_under_its_passage_title():
    """``reranker_input: titled``: the reranker (the real un-tuned MiniLM here) reads "title\\nclue"; ``clue`` (000)
    reads the clue alone. The titles come from the passages the clues' units point into."""
    from harness.types import Example, Passage, Unit
    from methods.compselect.method import CompSelect, ExtractorInput
    from methods.compselect.parsing import Clue
    from methods.compselect.reranker import ClueReranker

    scorer = ClueReranker("embedded:all-minilm-l6-v2")
    q = "Who designed the tower in Paris?"
    towers = (
        Passage("It was designed by a committee.", title="Blackpool Tower"),
        Passage("It was designed by Eiffel's firm.", title="Eiffel Tower"),
    )
    ex = Example("x", q, ("Eiffel",), towers)
    x = ExtractorInput([], [Unit(0, 0), Unit(1, 0)], [p.text for p in towers], 2)
    clues = [Clue(0, towers[0].text, towers[0].text, 1.0), Clue(1, towers[1].text, towers[1].text, 1.0)]
    titled = CompSelect(
        lm="embedded:smollm2-135m-instruct", reranker=scorer, truncation="none", reranker_input="titled"
    )
    titles = titled._titles(ex, x, clues)
    assert titles == ["Blackpool Tower", "Eiffel Tower"]
    ranked, scores = titled.rerank(q, clues, titles)
    expected = scorer.score(q, [f"{t}\n{c.text}" for t, c in zip(titles, clues, strict=True)])
    assert sorted(scores, reverse=True) == sorted(expected, reverse=True)
    assert ranked[0] is clues[1]  # the title says which tower
    _, plain = titled.rerank(q, clues)
    assert sorted(plain, reverse=True) == sorted(scorer.score(q, [c.text for c in clues]), reverse=True)
    with pytest.raises(ValueError, match="reranker_input='passage'"):
        CompSelect(lm="embedded:smollm2-135m-instruct", truncation="none", reranker_input="passage")
