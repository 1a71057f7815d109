"""The "At the same budget" view (``leaderboard.views.budget``) on hand-made records, the per-dataset knob of a budget
variant, and a budget variant's CR beside CompSelect's on a real slice (issue 84)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from leaderboard.views import budget

REPO = Path(__file__).resolve().parent.parent
HEADLINE = REPO / "leaderboard" / "runs" / "embedded" / "smollm2-135m-instruct-vllm-documents_first-unlabelled"


def _recs(subem: list[int], compressed: list[int], original: int = 100) -> pd.DataFrame:
    ids = [f"q{i}" for i in range(len(subem))]
    return pd.DataFrame({"id": ids, "subem": subem, "original_tokens": original, "compressed_tokens": compressed})


def test_rows_are_compared_with_compselect_on_the_same_questions():
    n = 40
    target = _recs([1] * 20 + [0] * 20, [12] * n)  # CR 8.3
    near = _recs([1] * 10 + [0] * 30, [13] * n)  # CR 7.7: within 15%, 25 points lower
    far = _recs([1] * 20 + [0] * 20, [25] * n)  # CR 4.0: off budget
    extra = _recs([1] * (n + 5), [12] * (n + 5))  # 5 questions the others lack: left out
    t = budget.compare({"compselect": target, "a_budget": near, "b_budget": far, "c": extra}, resamples=300)
    got = t.set_index("variant")
    assert t.variant.iloc[0] == "compselect" and set(got.n) == {n}
    assert got.loc["a_budget", "within"] and not got.loc["b_budget", "within"]
    assert got.loc["a_budget", "cr_ratio"] == pytest.approx(12 / 13)
    assert got.loc["a_budget", "d_subem"] == pytest.approx(-25.0) and got.loc["a_budget", "sig"]
    assert got.loc["c", "subem"] == 100.0  # on the shared 40 only
    words = budget.verdict(t.assign(dataset="nq"), "nq", "reader-a")
    assert "CompSelect is behind" in words and "`c` beats it" in words
    assert "off budget: `b_budget` reaches 4.0x" in words
    t2 = budget.compare({"compselect": target, "a_budget": near}, resamples=300)
    words = budget.verdict(t2.assign(dataset="nq"), "nq", "reader-a")
    assert "CompSelect is ahead at its own budget" in words and "beats 1 of the 1 matched rows" in words
    same = _recs([1] * 19 + [0] * 21, [12] * n)  # one point lower: not significant
    t3 = budget.compare({"compselect": target, "a_budget": near, "d_budget": same}, resamples=300)
    words = budget.verdict(t3.assign(dataset="nq"), "nq", "reader-a")
    assert "CompSelect is level at its own budget" in words and "beats 1 of the 2 matched rows" in words


def test_budget_rows_are_split_from_the_others_and_name_their_knob():
    df = pd.DataFrame({"variant": ["bm25", "bm25_sentences_budget", "compselect", "exit_budget"]})
    rest, at = budget.split_budget(df)
    assert list(rest.variant) == ["bm25", "compselect"] and list(at.variant) == ["bm25_sentences_budget", "exit_budget"]
    cfg = {"method": {"name": "exit_budget", "threshold": 0.9, "batch_size": 16, "per_dataset": {"nq": 0.9}}}
    assert budget.knob(cfg, "nq") == ("threshold", 0.9)


def test_a_budget_variant_reads_its_knob_by_dataset(tmp_path: Path):
    from hydra import compose, initialize_config_dir

    from harness.runner import build_method

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        for ds in ("nq", "triviaqa", "hotpotqa"):
            cfg = compose("config", overrides=["method=bm25_sentences_budget", f"dataset={ds}"])
            m = build_method(cfg.method)
            assert m.rate == cfg.method.per_dataset[ds] and m.name == "bm25_sentences_budget"


def _compselect_crs(ids: list[str]) -> tuple[int, int]:
    """CompSelect's archived original and compressed tokens over ``ids`` (the headline's NQ run)."""
    [path] = HEADLINE.glob("nq/compselect/*/predictions.jsonl*")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        recs = {r["id"]: r for r in map(json.loads, f) if r["id"] in ids}
    return sum(recs[i]["original_tokens"] for i in ids), sum(recs[i]["compressed_tokens"] for i in ids)


def test_a_budget_variant_lands_within_15_percent_of_compselect_on_a_slice(env):
    """``bm25_sentences_budget`` on the first 24 shuffled NQ test questions, with the generator's tokenizer, against
    CompSelect's own CR on the same questions (its archived records)."""
    from hydra import compose, initialize_config_dir

    from harness.data import DatasetSpec, load_dataset
    from harness.prompt import render_documents
    from harness.runner import build_method
    from tests.conftest import DATA

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        cfg = compose("config", overrides=["method=bm25_sentences_budget", "dataset=nq"])
    method = build_method(cfg.method)
    method.bind(env)
    spec = DatasetSpec("nq", str(DATA / "nq" / "test.jsonl.gz"), limit=24, sample="shuffled", seed=0)
    examples = load_dataset(spec)
    orig = comp = 0
    for ex in examples:
        orig += env.count_tokens(render_documents([p.render() for p in ex.passages]))
        comp += env.count_tokens(render_documents(method.compress(ex).documents))
    o, c = _compselect_crs([ex.id for ex in examples])
    assert o == orig  # the same questions, counted with the same tokenizer
    assert abs((orig / comp) / (o / c) - 1) <= budget.TOLERANCE, (orig / comp, o / c)


def test_publish_shows_budget_rows_in_their_view_only(tmp_path: Path):
    from leaderboard.publish import publish
    from tests.test_leaderboard import grid, write_run

    res = tmp_path / "res"
    grid(res, n=30, datasets=("nq",))
    right = lambda k: [("Paris" if i < k else "London", ["Paris"]) for i in range(30)]  # noqa: E731
    write_run(res, "compselect", "nq", right(15), tokens=(100, 12))
    write_run(res, "bm25_sentences_budget", "nq", right(9), tokens=(100, 13))
    files = publish(res, tmp_path / "out", resamples=200, min_n=10)
    assert tmp_path / "out" / "budget_embedded_gen-a.csv" in files
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    section = md.split("## At the same budget")[1].split("\n## ")[0]
    assert "`bm25_sentences_budget`" in section and "`bm25`" in section  # bm25: a passage selector at its limit
    assert "CompSelect is ahead at its own budget" in section and "off budget: `bm25` reaches 4.0x" in section
    table2 = pd.read_csv(tmp_path / "out" / "table2_embedded_gen-a.csv")
    assert "bm25_sentences_budget" not in set(table2.variant)  # a 200-question budget row stays out of Table 2
    assert "bm25_sentences_budget" in set(pd.read_csv(tmp_path / "out" / "runs.csv").variant)


def test_the_knob_is_chosen_by_cr_on_train_runs_only_and_written_back(tmp_path: Path, monkeypatch):
    from tools import choose_budget as cb

    assert cb.knob_of("exit_budget") == "threshold" and cb.knob_of("recomp_extr_budget") == "top_k"
    assert cb.knob_of("bm25") is None and "longllmlingua_budget" in cb.budget_variants()
    t = pd.DataFrame(
        {
            "variant": ["v_budget"] * 4,
            "dataset": ["nq", "nq", "nq", "hotpotqa"],
            "split": ["train", "train", "test", "train"],
            "knob": ["rate"] * 4,
            "value": [0.1, 0.2, 0.15, 0.3],
            "n": [100] * 4,
            "cr": [11.0, 6.0, 8.0, 7.5],
            "kept_nothing": [0.0] * 4,
        }
    )
    c = cb.choose(t, {"nq": 8.0, "hotpotqa": 7.0})
    assert "test" not in set(c.split)  # a test run never takes part
    chosen = {(r.dataset, r.value) for r in c[c.chosen].itertuples()}
    assert chosen == {("nq", 0.2), ("hotpotqa", 0.3)}  # |log(6/8)| < |log(11/8)|
    conf = tmp_path / "method"
    conf.mkdir()
    (conf / "v_budget.yaml").write_text("name: v_budget\nrate: ${.per_dataset.${dataset.name}}\n"
                                        "per_dataset: {nq: 0.5, triviaqa: 0.4, hotpotqa: 0.5}\n")  # fmt: skip
    monkeypatch.setattr(cb, "CONF", conf)
    cb.apply(c)
    assert "per_dataset: {nq: 0.2, triviaqa: 0.4, hotpotqa: 0.3}" in (conf / "v_budget.yaml").read_text()
