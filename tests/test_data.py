"""Dataset loading: the shared files, the DPR retriever-results format, and every malformed-input case."""

import gzip
import json

import pytest

from harness.data import DatasetError, DatasetSpec, load_dataset, rank_passages, read_examples
from tests.conftest import DATA, load_slice

GOOD = {
    "id": "q1",
    "question": "who wrote hamlet",
    "answers": ["Shakespeare"],
    "ctxs": [{"title": "Hamlet", "text": "Hamlet is a tragedy by William Shakespeare."}],
}


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_shared_files_load_with_top_k():
    for name in ("nq", "triviaqa", "hotpotqa"):
        exs = load_slice(name, 7)
        assert len(exs) == 7
        assert all(len(e.passages) == 5 and e.answers and e.question for e in exs)
    assert len(read_examples(DATA / "nq" / "test.jsonl.gz")) == 800


def test_hotpotqa_top5_is_bm25_ranked():
    raw = read_examples(DATA / "hotpotqa" / "test.jsonl.gz")[0]
    ranked = rank_passages(raw, "bm25")
    assert len(ranked.passages) == len(raw.passages) == 10
    scores = [p.score for p in ranked.passages]
    assert scores == sorted(scores, reverse=True)
    assert {p.text for p in ranked.passages} == {p.text for p in raw.passages}
    [ex] = load_dataset(DatasetSpec("hotpotqa", str(DATA / "hotpotqa" / "test.jsonl.gz"), 5, "bm25", 1))
    assert [p.text for p in ex.passages] == [p.text for p in ranked.passages[:5]]


def test_dpr_retriever_results_format(tmp_path):
    dpr = [
        {
            "question": "q one",
            "answers": ["x"],  # not "a": an article normalises to "" and is no answer
            "ctxs": [{"id": "1", "title": "T", "text": "x a", "score": "3.5", "has_answer": True}],
        },
        {"question": "q two", "answers": ["b"], "ctxs": []},
    ]
    path = tmp_path / "nq-test.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(dpr, f)
    exs = read_examples(path)
    assert [e.id for e in exs] == ["nq-test-0", "nq-test-1"]
    assert exs[0].passages[0].score == 3.5 and exs[0].passages[0].meta["has_answer"] is True
    assert exs[1].passages == ()  # empty ctxs is valid


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({**GOOD, "question": ""}, "question"),
        ({k: v for k, v in GOOD.items() if k != "question"}, "question"),
        ({**GOOD, "answers": []}, "answers"),
        ({**GOOD, "answers": "Shakespeare"}, "answers"),
        ({**GOOD, "answers": ["ok", 3]}, "answers"),
        ({**GOOD, "ctxs": "text"}, "ctxs"),
        ({k: v for k, v in GOOD.items() if k != "ctxs"}, "ctxs"),
        ({**GOOD, "ctxs": [{"title": "no text"}]}, "ctxs[0]"),
        ({**GOOD, "ctxs": ["plain string"]}, "ctxs[0]"),
    ],
)
def test_malformed_field_names_file_line_and_field(tmp_path, row, field):
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD | {"id": "q0"}, row])
    with pytest.raises(DatasetError) as e:
        read_examples(path)
    assert str(path) in str(e.value) and "line 2" in str(e.value) and f"field '{field}'" in str(e.value)


def test_bad_json_names_line(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD, '{"question": "unterminated'])
    with pytest.raises(DatasetError, match=r"bad\.jsonl: line 2: not valid JSON"):
        read_examples(path)


def test_duplicate_ids_name_both_lines(tmp_path):
    path = write_jsonl(tmp_path / "dup.jsonl", [GOOD, GOOD])
    with pytest.raises(DatasetError, match=r"line 2: field 'id': duplicate id 'q1' \(first at line 1\)"):
        read_examples(path)


def test_empty_ctxs_is_valid(tmp_path):
    path = write_jsonl(tmp_path / "ok.jsonl", [{**GOOD, "ctxs": []}])
    [ex] = read_examples(path)
    assert ex.passages == ()


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(DatasetError, match="no such file"):
        read_examples(tmp_path / "nope.jsonl")
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(DatasetError, match="unknown format"):
        read_examples(tmp_path / "x.csv")
