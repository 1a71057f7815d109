"""The robustness views (``leaderboard.views.retrieval``) on the real archived records and the real data files: which
questions' passages hold no gold answer, the tables built on them, and how a run at more passages is keyed."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil

import pandas as pd
import pytest

from harness.config import run_overrides
from harness.data import DatasetSpec, load_dataset
from harness.prompt import render_documents
from leaderboard.collect import collect, read_records
from leaderboard.publish import publish
from leaderboard.views import retrieval
from tests.conftest import DATA, REPO

HEAD = REPO / "leaderboard" / "runs" / "embedded" / "smollm2-135m-instruct-vllm-documents_first-unlabelled"
SHUFFLED = "dataset.sample=shuffled,dataset.seed=0"


def _raw(dataset: str) -> dict[str, dict]:
    with gzip.open(DATA / dataset / "test.jsonl.gz", "rt", encoding="utf-8") as f:
        return {r["id"]: r for r in map(json.loads, f)}


def test_no_gold_counts_of_the_shipped_test_splits():
    """NQ and TriviaQA read their file order: 93 of 800 and 165 of 400 questions hold no gold answer in their top 5,
    as the raw files' ``has_answer`` says. HotpotQA's runs read the top 5 after BM25 (``dataset.rank=bm25``): 85 of
    400 there, against 166 of 400 in the file's unranked order."""
    for ds, rank, n, expected in (("nq", "none", 800, 93), ("triviaqa", "none", 400, 165)):
        gold = retrieval.gold_in_top_k(ds, "test", 5, rank)
        raw = _raw(ds)
        assert len(gold) == n and sum(not g for g in gold.values()) == expected
        assert gold == {i: any(c["has_answer"] for c in r["ctxs"][:5]) for i, r in raw.items()}
    ranked, file_order = (retrieval.gold_in_top_k("hotpotqa", "test", 5, r) for r in ("bm25", "none"))
    assert sum(not g for g in ranked.values()) == 85 and sum(not g for g in file_order.values()) == 166
    # all ten paragraphs: the same for either order; mostly yes/no questions, whose answer is in no passage
    assert sum(not g for g in retrieval.gold_in_top_k("hotpotqa", "test", 10, "bm25").values()) == 39


def test_the_subset_is_of_the_passages_the_run_read():
    """The archived ``full`` HotpotQA run's contexts (their hashes) are exactly the top-5 passages after BM25 that
    ``run_gold`` judges, question by question."""
    folder = HEAD / "hotpotqa" / "full" / SHUFFLED
    recs = read_records(folder)
    gold = retrieval.run_gold(folder)
    assert {r["id"] for r in recs} <= gold.keys() and sum(not gold[r["id"]] for r in recs) == 85
    spec = DatasetSpec("hotpotqa", str(DATA / "hotpotqa" / "test.jsonl.gz"), top_k=5, rank="bm25")
    examples = {ex.id: ex for ex in load_dataset(spec)}
    for r in recs:
        ex = examples[r["id"]]
        context = render_documents([p.render() for p in ex.passages])
        assert hashlib.sha1(context.encode()).hexdigest()[:12] == r["context_sha1"], r["id"]
        assert gold[r["id"]] == any(p.meta["has_answer"] for p in ex.passages)


@pytest.fixture(scope="module")
def head_rows() -> pd.DataFrame:
    runs = collect(HEAD)
    keep = ("full", "compselect", "compselect_no_truncator", "bm25")
    return runs[runs.variant.isin(keep)].reset_index(drop=True)


@pytest.mark.slow
def test_unreliable_splits_every_row_and_pairs_it_with_full(head_rows):
    t = retrieval.unreliable(head_rows, "embedded", HEAD.name, resamples=200)
    nq = t[t.dataset == "nq"].set_index(["variant", "subset"])
    assert nq.loc[("full", retrieval.NO_GOLD), "n"] == 93 and nq.loc[("full", retrieval.GOLD), "n"] == 707
    # Table 7's "Ours w/o truncator" is shown where it ran (every NQ test question): the same no-gold subset
    assert nq.loc[("compselect_no_truncator", retrieval.NO_GOLD), "n_run"] == 800
    assert nq.loc[("compselect_no_truncator", retrieval.NO_GOLD), "n"] == 93
    # the two subsets' F1 weigh back to the run's F1; the paired difference is the mean of per-question ones
    for v in ("full", "compselect"):
        row = head_rows[(head_rows.variant == v) & (head_rows.dataset == "nq")].iloc[0]
        no, yes = nq.loc[(v, retrieval.NO_GOLD)], nq.loc[(v, retrieval.GOLD)]
        assert (no.f1 * no.n + yes.f1 * yes.n) / (no.n + yes.n) == pytest.approx(row.f1)
    recs = {v: {r["id"]: r for r in read_records(HEAD / "nq" / v / SHUFFLED)} for v in ("full", "compselect")}
    gold = retrieval.run_gold(HEAD / "nq" / "full" / SHUFFLED)
    no_gold = [i for i in recs["full"] if not gold[i]]
    diff = sum(recs["compselect"][i]["f1"] - recs["full"][i]["f1"] for i in no_gold) / len(no_gold)
    assert nq.loc[("compselect", retrieval.NO_GOLD), "d_f1"] == pytest.approx(100 * diff)
    assert pd.isna(nq.loc[("full", retrieval.NO_GOLD), "d_f1"])
    hqa = t[(t.dataset == "hotpotqa") & (t.variant == "full") & (t.subset == retrieval.NO_GOLD)].iloc[0]
    assert hqa.n == 85 and hqa.yes_no == 46
    # the truncator that may keep nothing never did on NQ's no-gold questions (and kept 1 of 707 others empty)
    assert nq.loc[("compselect", retrieval.NO_GOLD), "kept_nothing"] == 0
    assert nq.loc[("compselect", retrieval.GOLD), "kept_nothing"] == pytest.approx(1 / 707)
    words = retrieval.findings(t)
    assert "NQ (93 of 800 questions): F1 significantly different from `full`: none; kept nothing on them: " in words
    assert "HQA (85 of 400, 46 of them yes/no questions)" in words


def test_paper_table7_under_ours_names_each_label(head_rows):
    t = retrieval.unreliable(head_rows, "embedded", HEAD.name, resamples=50)
    from leaderboard.reference import load_reference

    head, rows = retrieval.paper_rows(load_reference(), t)
    by_label = {r[0]: r for r in rows}
    assert by_label["Ours w/ truncator"][1:4] == ["compselect", "15.36", "16.87"]
    assert by_label["Ours w/o truncator"][1] == "compselect_no_truncator"
    assert by_label["BottleNeck"][1] == "— (no adapter)"
    assert head[2].startswith("NQ F1 paper (LLaMA3-8B-Instruct")


def test_a_run_at_more_passages_is_keyed_apart():
    """``dataset.top_k=10`` stays in Hydra's override string, so the run has its own folder and variant; the view
    finds the default-k variant it pairs with."""
    assert run_overrides("dataset.top_k=10", "shuffled", 0) == f"{SHUFFLED},dataset.top_k=10"
    assert retrieval.more_k("full[dataset.top_k=10]") == ("full", 10)
    assert retrieval.more_k("bm25[dataset.top_k=10,method.top_k=2]") == ("bm25[method.top_k=2]", 10)
    assert retrieval.more_k("bm25[method.top_k=2]") is None and retrieval.more_k("full") is None


def test_more_passages_pairs_on_shared_questions_and_says_why_a_dataset_has_none(head_rows):
    """The pairing arithmetic on real records: the archived ``bm25`` HotpotQA row standing in the place of a k = 10
    row of ``full`` gives back Table 2's SubEM difference and both CRs."""
    hqa = head_rows[head_rows.dataset == "hotpotqa"]
    more = hqa[hqa.variant == "bm25"].assign(variant="full[dataset.top_k=10]")
    t = retrieval.more_passages(hqa, more, "embedded", HEAD.name, resamples=200)
    full, bm25 = (hqa[hqa.variant == v].iloc[0] for v in ("full", "bm25"))
    r = t.iloc[0]
    assert (r.variant, r.k, r.n) == ("full", 10, 400)
    assert r.d_subem == pytest.approx(bm25.subem - full.subem) and r.cr_k == pytest.approx(bm25.cr)
    assert r.cr_5 == pytest.approx(1.0) and r.d_cr_lo <= r.d_cr <= r.d_cr_hi
    words = retrieval.more_words(t.iloc[0:0], ["nq", "triviaqa", "hotpotqa"])
    assert "NQ: cannot give more passages (its data ship 5 per question" in words
    assert "TQA: cannot give more passages" in words
    assert "HQA: ships up to 10 passages per question, no run at more than 5 yet" in words


def test_publish_shows_both_views(tmp_path):
    """Three archived runs published: the page and leaderboard.md carry both sections, the CSV is written."""
    for v in ("full", "compselect", "bm25"):
        shutil.copytree(HEAD / "hotpotqa" / v / SHUFFLED, tmp_path / "runs" / v)
    written = publish(tmp_path / "runs", tmp_path / "out", resamples=50)
    md = (tmp_path / "out" / "leaderboard.md").read_text(encoding="utf-8")
    page = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    for text in (md, page):
        assert retrieval.FAILS in text and retrieval.MORE in text and "Ours w/ truncator" in text
    assert "| HQA | compselect | 85 / 400 |" in md
    [csv] = (tmp_path / "out").glob("unreliable_embedded_*.csv")
    assert csv in written and len(pd.read_csv(csv)) == 3 * 2  # three rows, two subsets each


@pytest.mark.slow
def test_a_row_without_a_cr_prints_a_dash_and_the_words_name_significant_losses():
    """The archived ``naive`` at k = 10 (HotpotQA): it keeps no token at either k, so its CR cells are '-' (never
    'nan'); the sentence names the rows significantly lower or higher at 10 (here none: naive reads no passage)."""
    base, more = retrieval.split_more(collect(HEAD))
    t = retrieval.more_passages(base, more[more.variant == "naive[dataset.top_k=10]"], "embedded", HEAD.name, 200)
    assert len(t) == 1 and t.iloc[0].n == 200 and t.iloc[0].d_subem == 0
    _, rows = retrieval.more_rows(t)
    assert rows[0][-3:] == ["-", "-", "-"] and "nan" not in " ".join(rows[0])
    words = retrieval.more_words(t, ["hotpotqa"])
    assert "`naive` +0.0; significantly lower at 10: none; significantly higher: none" in words
