"""Metrics against hand-worked cases, including the SQuAD normalisation corner cases."""

import pytest

from harness import metrics as M


@pytest.mark.parametrize(
    ("text", "norm"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  an  apple, a pear ", "apple pear"),
        ("Theatre of the Absurd", "theatre of absurd"),  # 'the' only as a whole word
        ("U.S.A.", "usa"),
        ("Röntgen", "röntgen"),  # accents are kept, as in SQuAD
        ("", ""),
    ],
)
def test_normalize_follows_squad(text, norm):
    assert M.normalize(text) == norm


def test_postprocess_strips_space_and_trailing_periods():
    assert M.postprocess("  Paris.\n") == "Paris"
    assert M.postprocess("Washington D.C..") == "Washington D.C"


def test_em_and_subem_take_best_gold():
    golds = ["Wilhelm Conrad Röntgen", "Röntgen"]
    assert M.em("röntgen", golds) == 1.0
    assert M.em("Wilhelm Röntgen", golds) == 0.0
    assert M.subem("The first prize went to Wilhelm Conrad Röntgen.", golds) == 1.0
    assert M.subem("Marie Curie", golds) == 0.0


def test_f1_hand_worked():
    # pred tokens: [conrad, röntgen] ; gold: [wilhelm, conrad, röntgen] -> P=1, R=2/3, F1=0.8
    assert M.f1("Conrad Röntgen", ["Wilhelm Conrad Röntgen"]) == pytest.approx(0.8)
    # multiset: pred [a, a] vs gold [a] (after normalisation 'a' is an article, so use another token)
    assert M.f1("paris paris", ["paris"]) == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert M.f1("London", ["Paris", "London city"]) == pytest.approx(2 * 1 * 0.5 / 1.5)
    assert M.f1("", ["Paris"]) == 0.0


def test_f1_yes_no_noanswer_rule():
    assert M.f1("yes", ["no"]) == 0.0
    assert M.f1("no", ["no"]) == 1.0
    # 'yes it is' vs gold 'yes': the normalised pred is not in the special set but the gold is -> 0
    assert M.f1("yes it is", ["yes"]) == 0.0
    assert M.f1("noanswer", ["no answer"]) == 0.0


def test_compression_ratio_edge_cases():
    assert M.compression_ratio(100, 25) == 4.0
    assert M.compression_ratio(100, 0) == 100.0  # kept nothing: original / 1
    assert M.compression_ratio(0, 0) is None  # no passages at all
    ratio_of_sums, mean = M.corpus_cr([100, 60, 0], [25, 0, 0])
    assert ratio_of_sums == pytest.approx(160 / 25)
    assert mean == pytest.approx((4.0 + 60.0) / 2)
    assert M.corpus_cr([10, 20], [0, 0]) == (None, None)  # naive: no CR at all


def test_diagnostics_average_over_reporting_examples():
    from harness.records import aggregate_diagnostics

    rows = [
        {"meta": {"diagnostics": {"recall_1": 1, "llm_calls": 2}}},
        {"meta": {"diagnostics": {"recall_1": None, "llm_calls": 4}}},
        {"meta": {"diagnostics": {"recall_1": 0}}},
        {"meta": {}},
    ]
    assert aggregate_diagnostics(rows) == {
        "llm_calls": {"mean": 3.0, "n": 2},
        "recall_1": {"mean": 0.5, "n": 2},
    }
