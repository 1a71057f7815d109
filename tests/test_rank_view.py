"""The "Where the answer sits" view (``leaderboard.views.ranks``) on a hand-made record set: questions grouped by the
rank of their first answer-bearing passage as read, each row's SubEM per group beside `full`'s on the same questions."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd

from harness.types import Passage
from leaderboard.views import ranks


def _p(holds: bool | None, text: str = "some text") -> Passage:
    return Passage(text, "t", meta={} if holds is None else {"has_answer": holds})


def test_the_first_answer_bearing_passage_sets_the_group():
    assert ranks.first_gold_rank([_p(False), _p(True), _p(True)], ["x"]) == 2
    assert ranks.first_gold_rank([_p(False), _p(False)], ["x"]) is None
    # no has_answer field: the SubEM test of the passage's text
    assert ranks.first_gold_rank([_p(None, "nothing here"), _p(None, "Paris is the capital")], ["Paris"]) == 2
    assert [ranks.group_of(r) for r in (1, 2, 3, 4, 5, 7, None)] == ["1", "2", "3", "4-5", "4-5", "4-5", "none"]


def test_ranks_are_read_from_the_data_file_as_the_run_read_it(tmp_path: Path, monkeypatch):
    rows = [
        {"id": "a", "question": "q?", "answers": ["x"],
         "ctxs": [{"title": "t", "text": "p", "has_answer": h} for h in (True, False, False, False, False)]},
        {"id": "b", "question": "q?", "answers": ["x"],
         "ctxs": [{"title": "t", "text": "p", "has_answer": h} for h in (False, False, False, True, True)]},
        {"id": "c", "question": "q?", "answers": ["x"],
         "ctxs": [{"title": "t", "text": "p", "has_answer": False} for _ in range(5)]},
    ]  # fmt: skip
    (tmp_path / "toy").mkdir()
    with gzip.open(tmp_path / "toy" / "test.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    monkeypatch.setenv("RAG_HARNESS_DATA", str(tmp_path))
    ranks.ranks_of.cache_clear()
    assert ranks.ranks_of("toy", "test", 5, "none") == {"a": 1, "b": 4, "c": None}
    assert ranks.ranks_of("toy", "test", 3, "none") == {"a": 1, "b": None, "c": None}  # top-3: b's answer unread


def test_each_group_scores_its_own_questions_against_full_on_the_same_ones():
    ids = [f"q{i}" for i in range(12)]
    rank = dict(zip(ids, [1, 1, 1, 1, 2, 2, 3, 3, 4, 5, None, None], strict=True))
    full = pd.DataFrame({"id": ids, "subem": [1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0]})
    sel = pd.DataFrame({"id": ids, "subem": [1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 0]})
    t = ranks.by_group({"full": full, "bm25": sel}, rank, resamples=200)
    got = t.set_index(["variant", "group"])
    assert [int(got.loc[("full", g), "n"]) for g in ranks.GROUPS] == [4, 2, 2, 2, 2]
    assert got.loc[("full", "1"), "subem"] == 75.0 and got.loc[("bm25", "1"), "subem"] == 100.0
    assert got.loc[("bm25", "4-5"), "d_subem"] == 50.0 and got.loc[("bm25", "none"), "d_subem"] == 0.0
    assert pd.isna(got.loc[("full", "1"), "d_subem"])  # full is the reference
    words = ranks.findings(t.assign(dataset="nq"), "nq", "reader-a")
    assert words.startswith("Under `reader-a` on NQ, `full`'s SubEM by rank is 1: 75, 2: 50, 3: 0, 4-5: 0")
    assert "falls 75 points from rank 1 to 4-5" in words
    assert "`top1`" not in words  # no top1 row: no clause
    alone = pd.DataFrame({"id": ids, "subem": [1, 1, 1, 1] + [0] * 8})
    t = ranks.by_group({"full": full, "bm25": sel, "top1": alone}, rank, resamples=200)
    words = ranks.findings(t.assign(dataset="nq"), "nq", "reader-a")
    assert "the first passage (`top1`) scores 100 (+25.0, not significant)" in words
