"""Answers that choose (issue 76): the hedge flag on real predictions of the published headline block, its
recount in summaries and the leaderboard, and SubEM with hedged and echoed answers scored 0."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from harness import metrics as M
from harness.data import read_examples
from harness.records import hedged, strict_subem, summarize
from leaderboard import stats, tables
from leaderboard.collect import collect, read_records
from tests.conftest import DATA

ROOT = Path(__file__).resolve().parents[1]
BLOCK = ROOT / "leaderboard/runs/embedded/smollm2-135m-instruct-vllm-documents_first-unlabelled"


def _run(dataset: str, variant: str) -> Path:
    runs = (p.parent for p in (BLOCK / dataset / variant).glob("*/predictions.jsonl"))
    return next(r for r in runs if "top_k" not in r.name)  # a run at more passages is another variant


def _by_question(dataset: str, variant: str, question: str) -> dict:
    """A real archived record of the headline block (test split), found by its question."""
    return next(r for r in read_records(_run(dataset, variant)) if r["question"] == question)


@pytest.mark.parametrize(
    ("variant", "question", "prediction"),
    [
        ("naive", "Who was born first Am Rong or Ava DuVernay ?", "Am Rong or Ava DuVernay"),
        ("naive", "Who is older, Ferdi Taygan or Mahesh Bhupathi?", "Mahesh Bhupathi is older than Ferdi Taygan"),
        (
            "compselect",
            "Which was published more frequently, Popular Science or Girlfriends?",
            "Popular Science or Girlfriends?",
        ),
        (
            "full",
            "Which band is from England, Fireflight or Dirty Pretty Things?",
            "The band Dirty Pretty Things is from England, while Fireflight is from England",
        ),
        (
            "compselect",
            "Which band formed first, Awolnation or Foo Fighters?",
            "The band formed first, Awolnation, and not Foo Fighters",
        ),
    ],
)
def test_a_real_comparison_answer_that_names_both_options_without_picking_the_gold_is_a_hedge(
    variant, question, prediction
):
    r = _by_question("hotpotqa", variant, question)
    assert r["prediction"] == prediction and r["subem"] == 1.0  # SubEM credits it whichever option is gold
    assert M.hedge(r["prediction"], r["question"], r["answers"]) and hedged(r)
    assert strict_subem(r) == 0.0


@pytest.mark.parametrize(
    ("variant", "question", "prediction"),
    [
        ("naive", "Who is older, Annie Morton or Terry Richardson?", "The answer to this question is Terry Richardson"),
        (
            "naive",
            "Which band is from England, Fireflight or Dirty Pretty Things?",
            "Dirty Pretty Things is a band from England",
        ),
        # both named, the gold one picked in the answer position: "A is <comparative> than B"
        (
            "full",
            "Who is older, Ferdi Taygan or Mahesh Bhupathi?",
            "Ferdi Taygan is older than Mahesh Bhupathi. Ferdi Taygan is 19 years older than Mahesh Bhupathi",
        ),
        (
            "full",
            "Which band, Letters to Cleo or Screaming Trees, had more members?",
            "The band Letters to Cleo had more members than Screaming Trees",
        ),
    ],
)
def test_a_real_answer_that_names_one_option_or_picks_the_gold_is_no_hedge(variant, question, prediction):
    r = _by_question("hotpotqa", variant, question)
    assert r["prediction"] == prediction and r["subem"] == 1.0
    assert not M.hedge(r["prediction"], r["question"], r["answers"])
    assert strict_subem(r) == 1.0


def test_yes_no_questions_offer_both_and_an_answer_saying_both_hedges():
    r = _by_question("hotpotqa", "full", "Are Phlebodium and Pieris both species of ferns?")
    assert [o.names[0] for o in M.options(r["question"], r["answers"])] == ["yes", "no"]
    assert not M.hedge(r["prediction"], r["question"], r["answers"])  # "No, Phlebodium and Pieris are not ..."
    assert M.hedge("Yes and no: " + r["prediction"], r["question"], r["answers"])


def test_nq_questions_without_options_are_never_flagged():
    """Every NQ record of the headline block (31 variants): a question that offers no options is never a hedge,
    and the few that do offer them hold an "or" between two options, one of them gold."""
    offering, flagged, seen = set(), 0, 0
    for folder in sorted(p.parent for p in (BLOCK / "nq").rglob("predictions.jsonl")):
        for r in read_records(folder):
            seen += 1
            offered = M.options(r["question"], r["answers"])
            if offered:
                offering.add(r["question"])
                assert " or " in r["question"] and any(o.gold for o in offered)
            flag = M.hedge(r["prediction"], r["question"], r["answers"])
            assert not (flag and not offered), r
            flagged += flag
    assert seen > 10_000 and len(offering) < 10 and flagged < seen / 500


def test_hotpotqa_type_is_kept_by_the_loader_and_decides_where_the_data_has_it():
    """HotpotQA's train file carries ``type``: the loader keeps it in ``meta``; a bridge question offers no
    options even with an "or", and a comparison question also offers "A and B" options."""
    examples = {ex.question: ex for ex in read_examples(DATA / "hotpotqa" / "train.jsonl.gz")}
    bridge = examples["Who directed the film that was shot in or around Leland, North Carolina in 1986"]
    assert bridge.meta["type"] == "bridge" and M.options(bridge.question, bridge.answers, bridge.meta["type"]) == []
    between = examples["Between Iain Banks and Irwin Shaw, which writer has had a more diverse career?"]
    assert M.options(between.question, between.answers) == []
    offered = M.options(between.question, between.answers, between.meta["type"])
    assert [(o.names[0], o.gold) for o in offered] == [("Iain Banks", False), ("Irwin Shaw", True)]
    comparisons = [ex for ex in examples.values() if ex.meta["type"] == "comparison"]
    found = sum(bool(M.options(ex.question, ex.answers, "comparison")) for ex in comparisons)
    assert found >= len(comparisons) * 3 // 4  # the rest ask what two things share ("which label", "in common")
    assert not any(
        M.options(ex.question, ex.answers, ex.meta["type"]) for ex in examples.values() if ex.meta["type"] == "bridge"
    )


# The hedges of the headline block's `full` HotpotQA run, read one by one (all name both options without picking
# the gold one; the six that name both and pick the gold, "A is older than B", are not among them).
FULL_HOTPOTQA_HEDGES = {
    "5a738225554299623ed4abc3",
    "5a78b209554299148911f93e",
    "5a8f9b8c5542997ba9cb32e6",
    "5ab1d7ac554299449642c7e6",
    "5a8ec7cc5542995a26add518",
    "5ac1f4495542991316484bd2",
    "5a867089554299211dda2b30",
    "5add67555542992ae4cec54e",
    "5a834ed95542990548d0b1ca",
    "5ac1b8ee5542994d76dccedc",
    "5a90bd7b55429916514e7547",
    "5ac45b58554299076e296dad",
    "5ac289ff5542996366519a02",
    "5a7332935542991f9a20c67d",
    "5a8fa4d95542995b4424207b",
    "5ab6369655429953192ad2a1",
    "5a879ba55542993e715abfc3",
}


def test_summary_and_leaderboard_recount_match_a_count_by_hand_on_a_real_archived_run():
    folder = _run("hotpotqa", "full")
    recs = read_records(folder)
    assert not any("hedge" in r for r in recs)  # archived before the flag: recounted from the predictions
    assert {r["id"] for r in recs if hedged(r)} == FULL_HOTPOTQA_HEDGES
    n = len(recs)
    by_hand_points = sum(r["subem"] for r in recs if r["id"] in FULL_HOTPOTQA_HEDGES)
    strict = sum(r["subem"] for r in recs if r["id"] not in FULL_HOTPOTQA_HEDGES and not r["echo"])
    s = summarize(recs)
    assert s["hedge"] == pytest.approx(100 * len(FULL_HOTPOTQA_HEDGES) / n)
    assert s["subem_from_hedge"] == pytest.approx(100 * by_hand_points / n)
    assert s["subem_strict"] == pytest.approx(100 * strict / n) and s["subem_strict"] < s["subem"]
    row = collect(folder).iloc[0]
    assert (row.hedge, row.subem_from_hedge, row.subem_strict) == pytest.approx(
        (s["hedge"], s["subem_from_hedge"], s["subem_strict"])
    )


def test_the_paired_test_runs_on_the_strict_column_and_the_table_shows_it():
    runs = pd.concat([collect(_run("hotpotqa", v)) for v in ("full", "naive")], ignore_index=True)
    u = stats.add_uncertainty(runs, resamples=300)
    naive, full = u[u.variant == "naive"].iloc[0], u[u.variant == "full"].iloc[0]
    assert naive.d_subem_strict == pytest.approx(naive.subem_strict - full.subem_strict)
    assert naive.subem_strict_lo < naive.subem_strict < naive.subem_strict_hi
    assert naive.d_subem_strict_lo < naive.d_subem_strict < naive.d_subem_strict_hi
    assert naive.sig_subem_strict and naive.p_subem_strict < 0.05
    frame = tables.answers_that_choose(u, naive.profile, naive.generator)
    shown = frame.set_index("Method").loc["naive"]
    assert shown["SubEM (answers that choose)"] == f"{naive.subem_strict:.2f}"
    assert shown["Hedge %"] == f"{naive.hedge:.2f}" and shown["Verdict vs full: SubEM → answers that choose"] == "below"


def test_hotpotqa_test_rows_have_no_type_and_are_parsed():
    with gzip.open(DATA / "hotpotqa" / "test.jsonl.gz", "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    assert not any("type" in r for r in rows)
    offered = [M.options(r["question"], r["answers"]) for r in rows]
    assert all(sum(o.gold for o in x) == 1 for x in offered if x)  # exactly one gold option where any
    assert 100 < sum(map(bool, offered)) < 150


def test_a_negated_comparative_picks_neither_option():
    r = _by_question("hotpotqa", "full", "Who is older, Ferdi Taygan or Mahesh Bhupathi?")
    assert not M.hedge("Ferdi Taygan is older than Mahesh Bhupathi", r["question"], r["answers"])
    assert M.hedge("Ferdi Taygan is not older than Mahesh Bhupathi", r["question"], r["answers"])
    assert M.hedge("Mahesh Bhupathi, not Ferdi Taygan", r["question"], r["answers"])  # picks the other one
