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


# ------------------------------------------------------------------------------------------ dataset sample
def _spec(name: str, limit: int | None, sample: str = "first", seed: int = 0) -> DatasetSpec:
    return DatasetSpec(name, str(DATA / name / "test.jsonl.gz"), 5, "none", limit, sample=sample, seed=seed)


def test_permutation_is_seeded_and_pinned_across_python_versions():
    from harness.data import permutation

    assert sorted(permutation(1000, 0)) == list(range(1000))
    assert permutation(1000, 0) == permutation(1000, 0) and permutation(1000, 0) != permutation(1000, 1)
    # built on random.Random(seed).random() only, whose sequence Python guarantees: these never change
    assert permutation(10, 0) == [9, 4, 0, 5, 2, 7, 1, 3, 6, 8]
    assert permutation(10, 1) == [8, 0, 3, 4, 5, 2, 9, 6, 7, 1]
    assert permutation(0, 0) == [] and permutation(1, 5) == [0]


def test_shuffled_sample_is_a_deterministic_permutation_of_the_split():
    every = [e.id for e in load_dataset(_spec("nq", None))]
    shuffled = [e.id for e in load_dataset(_spec("nq", None, "shuffled", 0))]
    assert sorted(shuffled) == sorted(every) and shuffled != every
    assert [e.id for e in load_dataset(_spec("nq", 50, "shuffled", 0))] == shuffled[:50]  # limit cuts after
    assert [e.id for e in load_dataset(_spec("nq", 50, "shuffled", 1))] != shuffled[:50]
    assert [e.id for e in load_dataset(_spec("nq", 50, "first", 7))] == every[:50]  # the seed only shuffles


def test_hotpotqa_shuffled_200_holds_yes_no_comparison_questions_the_first_200_lack():
    def yes_no(exs) -> list:
        return [e for e in exs if {a.lower() for a in e.answers} & {"yes", "no"}]

    assert yes_no(load_dataset(_spec("hotpotqa", 200))) == []  # the file's first 200: none
    found = yes_no(load_dataset(_spec("hotpotqa", 200, "shuffled", 0)))
    assert len(found) == 21 and {a.lower() for e in found for a in e.answers} == {"yes", "no"}


def test_a_bad_sample_or_seed_is_a_config_error():
    from harness.validate import ConfigError

    with pytest.raises(ConfigError, match=r"dataset\.sample='random'"):
        load_dataset(_spec("nq", 5, "random"))
    with pytest.raises(ConfigError, match=r"dataset\.seed=-1"):
        load_dataset(_spec("nq", 5, "shuffled", -1))


def test_the_run_folder_names_a_sample_only_when_it_is_not_the_default():
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from harness.config import register_resolvers
    from harness.provenance import REPO_ROOT

    register_resolvers()
    base = "results/embedded/smollm2-135m-instruct-vllm-documents_first-unlabelled/nq/bm25/"
    cases = {
        (): base,  # as before samples existed
        ("dataset.sample=first", "dataset.seed=3"): base,
        ("dataset.sample=shuffled",): base + "dataset.sample=shuffled,dataset.seed=0",
        ("dataset.sample=shuffled", "dataset.seed=2", "method.top_k=2"): (
            base + "dataset.sample=shuffled,dataset.seed=2,method.top_k=2"
        ),
    }
    with initialize_config_dir(str(REPO_ROOT / "conf"), version_base="1.3"):
        for extra, want in cases.items():
            overrides = ["method=bm25", "dataset=nq", "generator=smollm2_vllm", "results_dir=results", *extra]
            cfg = compose("config", overrides=overrides, return_hydra_config=True)
            HydraConfig.instance().set_config(cfg)
            assert OmegaConf.select(cfg, "hydra.run.dir") == want
            assert "dataset.s" not in cfg.hydra.job.override_dirname  # the leaderboard's variant name


def test_the_run_key_names_a_sample_only_when_it_is_not_the_default():
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from harness.config import register_resolvers
    from harness.provenance import REPO_ROOT
    from harness.records import config_key
    from harness.runner import key_config

    register_resolvers()
    with initialize_config_dir(str(REPO_ROOT / "conf"), version_base="1.3"):
        key = lambda *extra: config_key(key_config(compose("config", overrides=["method=bm25", *extra])))  # noqa: E731
        before = compose("config", overrides=["method=bm25"])
        with open_dict(before):
            del before.dataset["sample"], before.dataset["seed"]  # the dataset config before samples existed
        assert key() == key("dataset.seed=4") == key("dataset.sample=first") == config_key(key_config(before))
        shuffled = key_config(compose("config", overrides=["method=bm25", "dataset.sample=shuffled"]))
        assert shuffled["dataset"]["sample"] == "shuffled" and shuffled["dataset"]["seed"] == 0
        assert len({key(), key("dataset.sample=shuffled"), key("dataset.sample=shuffled", "dataset.seed=1")}) == 3
