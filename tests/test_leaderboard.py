"""The leaderboard: reference numbers against papers.md, bootstrap statistics, collecting run folders, and
publishing every output, on hand-made run folders (written with the harness's own scoring and summary code)
and on one real tiny run of the embedded generator."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.metrics import score
from harness.provenance import REPO_ROOT
from harness.records import summarize
from leaderboard import reference, stats, tables
from leaderboard.archive import archive
from leaderboard.collect import collect, latency_fields, model_ids, read_predictions, read_records, timed_at
from leaderboard.matched import matched
from leaderboard.publish import publish

# The papers' transcription lives beside the repository (../shared/reference); RAG_HARNESS_REFERENCE points at
# that folder from a clone elsewhere.
PAPERS = (
    Path(os.environ.get("RAG_HARNESS_REFERENCE", Path(__file__).resolve().parents[2] / "shared" / "reference"))
    / "papers.md"
)


# ------------------------------------------------------------------------------------------ hand-made runs
def write_run(
    root: Path,
    method: str,
    dataset: str,
    answers: list[tuple[str, list[str]]],
    *,
    generator="gen-a",
    profile="embedded",
    overrides: str = "",
    finished="2026-11-20T10:00:00+0000",
    tokens=(100, 25),
    times=(0.01, 0.5),
    oracle=False,
    commit="abc123",
    latency_n=5,
    backbone: dict | None = None,
) -> Path:
    """A run folder in the harness's layout; records scored by ``harness.metrics.score`` and summarised by
    ``harness.records.summarize``, so the files have exactly the harness's shape."""
    folder = root / profile / generator / dataset / method / overrides
    (folder / ".hydra").mkdir(parents=True, exist_ok=True)
    preds = []
    for i, (pred, golds) in enumerate(answers):
        preds.append(
            {
                "id": f"{dataset}-{i}",
                "question": f"q{i}",
                "answers": golds,
                "prediction": pred,
                "raw_output": f"{pred}\nmore",
                "context": "ctx",
                "original_tokens": tokens[0],
                "compressed_tokens": tokens[1],
                "compress_s": times[0],
                "generate_s": times[1],
                **score(pred, golds),
            }
        )
    (folder / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    lat = [{"id": p["id"], "compress_s": times[0], "generate_s": times[1], "threads": 2} for p in preds[:latency_n]]
    (folder / "latency.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lat))
    (folder / "run.json").write_text(json.dumps({"key": f"key-{method}-{dataset}", "config": {}}))
    (folder / ".hydra" / "hydra.yaml").write_text(f"hydra:\n  job:\n    override_dirname: '{overrides}'\n")
    summary = {
        "method": method,
        "dataset": dataset,
        "split": "test",
        "generator": generator,
        "profile": profile,
        **summarize(preds, lat),
        "config_key": f"key-{method}-{dataset}",
        "method_info": {
            "name": method,
            "oracle": oracle,
            "encoder": {"ref": "embedded:all-minilm-l6-v2", "sha256": "f" * 64},
        },
        "generator_info": {
            "name": generator,
            "backend": "transformers",
            "model": {"ref": "embedded:smollm2-135m-instruct", "sha256": "b179c9523d0e99"},
        },
        "git": {"commit": commit, "dirty": False},
        "packages": {"numpy": "2"},
        "finished_at": finished,
        **({"backbone": backbone} if backbone else {}),
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def grid(root: Path, n: int = 40, generator: str = "gen-a", datasets=("nq", "triviaqa")) -> None:
    """full right on 60% of n, bm25 on 30% (CR 4), naive on 10% (no context), oracle on 90%."""
    for ds in datasets:
        for method, right, tokens, oracle in (
            ("full", 0.6, (100, 100), False),
            ("bm25", 0.3, (100, 25), False),
            ("naive", 0.1, (100, 0), False),
            ("oracle_sentences", 0.9, (100, 10), True),
        ):
            k = int(right * n)
            answers = [("Paris" if i < k else "London", ["Paris"]) for i in range(n)]
            write_run(
                root,
                method,
                ds,
                answers,
                generator=generator,
                tokens=tokens,
                oracle=oracle,
                times=(0.0 if method in ("full", "naive") else 0.05, 0.4 * tokens[1] / 100 + 0.1),
            )


# ------------------------------------------------------------------------------------------ reference rows
def _papers_row(heading: str, first_cell: str, text: str, occurrence: int = 0) -> list[str]:
    """The cells of the table row whose label (first non-empty cells) is ``first_cell`` under ``heading``."""
    part = text[text.index(heading) :]
    rows = [ln for ln in part.splitlines() if ln.startswith("|")]
    hits = [
        [c.strip() for c in ln.strip("|").split("|")]
        for ln in rows
        if first_cell in [c.strip().strip("*") for c in ln.strip("|").split("|")][:2]
    ]
    return hits[occurrence]


@pytest.mark.skipif(not PAPERS.is_file(), reason=f"papers.md not found at {PAPERS}")
def test_committed_reference_csv_is_what_transcribe_reads_from_papers_md():
    """Every number of reference.csv, with its source table, setting and condition, is re-read from the
    tables of papers.md: a hand edit of the CSV or a changed papers.md shows up here."""
    import csv

    from leaderboard.transcribe import transcribe

    fresh = transcribe(PAPERS.read_text(encoding="utf-8"))
    with (Path(reference.__file__).parent / "data" / "reference.csv").open(encoding="utf-8") as f:
        committed = list(csv.DictReader(f))
    key = lambda r: tuple(str(r[c]) for c in committed[0])  # noqa: E731
    assert len(fresh) == len(committed) > 900
    assert sorted(map(key, fresh)) == sorted(map(key, committed))
    assert {r["table"] for r in committed} >= {"Table 1", "Table 2", "Table 3", "Table 5", "Table 12"}


@pytest.mark.skipif(not PAPERS.is_file(), reason=f"papers.md not found at {PAPERS}")
def test_reference_numbers_match_the_text_of_papers_md():
    text = PAPERS.read_text(encoding="utf-8")
    ref = reference.load_reference()

    def ours(**kw) -> str:
        sel = ref
        for k, v in kw.items():
            sel = sel[sel[k] == v]
        assert len(sel) == 1, kw
        return sel.value_text.iloc[0]

    # CompSelect Table 2, both generators (Generator, Method, NQ SubEM, NQ F1, NQ CR, TQA ..., HQA ...)
    row = _papers_row("### 5.2 Table 2", "Full Content", text, 0)
    assert (
        row[2]
        == ours(
            source="000 CompSelect",
            table="Table 2",
            generator="LLaMA3-8B-Instruct",
            method="Full Content",
            dataset="nq",
            metric="subem",
        )
        == "45.87"
    )
    row = _papers_row("### 5.2 Table 2", "CompSelect (ε=0)", text, 1)  # the Qwen3-14B block
    assert (
        row[4].strip("*×")
        == ours(table="Table 2", generator="Qwen3-14B", method="CompSelect (ε=0)", dataset="nq", metric="cr")
        == "16.75"
    )
    row = _papers_row("**Table 12 — LLaMA3.3-70B", "BottleNeck", text)
    assert row[8] == ours(table="Table 12", method="BottleNeck", dataset="hotpotqa", metric="f1") == "37.76"
    row = _papers_row("### 3.8 Results — Table 1", "FineFilter", text, 1)  # Mistral-7B backbone block
    assert (
        row[7].strip("*×")
        == ours(
            source="003 FineFilter",
            table="Table 1",
            method="FineFilter",
            condition="backbone Mistral-7B-Instruct",
            dataset="triviaqa",
            metric="cr",
        )
        == "16.49"
    )
    row = _papers_row("**Qwen2.5-7B(-Instruct) generator**", "CSM-st", text)
    assert (
        row[5]
        == ours(
            source="002 CI/CSM",
            generator="Qwen2.5-7B-Instruct",
            method="CSM-st",
            dataset="2wiki",
            metric="f1",
        )
        == "48.67"
    )
    row = _papers_row("**Table 1 — noise robustness, top-k = 100", "Ours", text, 1)  # the WebQ block
    assert (
        row[7].split()[0]
        == ours(
            source="004 EDC2-RAG",
            table="Table 1",
            method="EDC2-RAG (Ours)",
            dataset="webq",
            condition="top-100, noise 100%",
        )
        == "84.23"
    )


@pytest.mark.skipif(not PAPERS.is_file(), reason=f"papers.md not found at {PAPERS}")
def test_every_reference_number_is_printed_in_papers_md_and_fully_tagged():
    text = PAPERS.read_text(encoding="utf-8")
    ref = reference.load_reference()
    assert len(ref) > 900
    for col in ("source", "table", "setting", "generator", "method", "dataset", "metric"):
        assert (ref[col] != "").all(), col
    numbers = set(re.findall(r"\d+(?:\.\d+)?", text))
    assert set(ref.value_text) <= numbers
    assert set(ref.setting) <= set(reference.settings())
    # BottleNeck has no adapter, but its rows are there for both Table 2 generators and Table 12
    bn = ref[(ref.method == "BottleNeck") & (ref.setting == "compselect")]
    assert set(bn.generator) == {"LLaMA3-8B-Instruct", "Qwen3-14B", "LLaMA3.3-70B-Instruct"}
    # metric names keep incomparable definitions apart: only CompSelect has SubEM, only FineFilter char-F1
    assert set(ref[ref.metric == "subem"].setting) == {"compselect"}
    assert set(ref[ref.metric == "f1_char"].setting) == {"finefilter"}
    assert set(ref[ref.metric == "f1_rewritten"].setting) == {"edc2"}


# ------------------------------------------------------------------------------------------ statistics
def test_bootstrap_interval_brackets_the_mean_and_is_seeded():
    x = np.array([1] * 30 + [0] * 70)
    a, b = stats.bootstrap_ci(x, seed=1), stats.bootstrap_ci(x, seed=1)
    assert a == b and a.lo < 30 < a.hi and a.mean == pytest.approx(30)
    assert 14 < a.hi - a.lo < 22  # about 2 x 1.96 x sqrt(.3 x .7 / 100) = 18 points
    c = stats.bootstrap_ci(np.ones(20))
    assert (c.lo, c.mean, c.hi) == (100, 100, 100)


def test_paired_bootstrap_no_change_is_not_significant_and_a_clear_drop_is():
    a = np.array([1, 0, 1, 1, 0] * 8)
    same = stats.paired_bootstrap(a, a)
    assert (same.delta, same.lo, same.hi, same.p, same.significant) == (0, 0, 0, 1.0, False)
    b = a.copy()
    b[:12] = 0  # 7 of these 12 were right: a 7-example drop on 40
    drop = stats.paired_bootstrap(b, a)
    assert drop.delta == pytest.approx(-17.5) and drop.hi < 0 and drop.significant and drop.p < 0.05
    one = b.copy()
    one[:12] = a[:12]
    one[0] = 0  # a single flipped example is within the noise
    assert not stats.paired_bootstrap(one, a).significant


def test_detectable_difference_is_found_by_the_paired_test_with_about_its_power():
    """Simulated pairs that disagree on 20% of 200 questions, with a true difference of exactly the detectable
    one: the paired bootstrap finds it in about 80% of the draws, half of it far less often, none at about 5%."""
    mde = stats.detectable_difference(0.2, 200)
    assert mde == pytest.approx(100 * (1.959964 + 0.841621) * (0.2 / 200) ** 0.5, rel=1e-5)
    assert stats.detectable_difference(0.2, 800) == pytest.approx(mde / 2)
    rng = np.random.default_rng(0)

    def found(delta: float, draws: int = 200) -> float:
        hits = 0
        for _ in range(draws):  # a disagreement is a win of A with probability 1/2 + delta / 0.4
            wins = rng.random(200) < 0.5 + delta / 100 / 0.4
            disagree = rng.random(200) < 0.2
            a = np.where(disagree, wins, 0).astype(int)
            b = np.where(disagree, ~wins, 0).astype(int)
            hits += stats.paired_bootstrap(a, b, resamples=400, seed=1).significant
        return hits / draws

    assert 0.7 < found(mde) < 0.95 and found(mde / 2) < 0.4 and found(0) < 0.1
    with pytest.raises(ValueError, match="n > 0"):
        stats.detectable_difference(0.2, 0)


# ------------------------------------------------------------------------------------------ collecting
def test_collect_keeps_the_newest_run_of_each_key_with_its_provenance(tmp_path):
    old = [("Paris", ["Paris"])] * 2 + [("no", ["Paris"])] * 2
    new = [("Paris", ["Paris"])] * 4
    write_run(tmp_path / "a", "bm25", "nq", old, finished="2026-11-20T10:00:00+0000", commit="old")
    write_run(tmp_path / "b", "bm25", "nq", new, finished="2026-11-21T10:00:00+0000", commit="new")
    write_run(tmp_path / "b", "bm25", "nq", old, overrides="method.top_k=2")
    df = collect([tmp_path / "a", tmp_path / "b"])
    assert list(df.variant) == ["bm25", "bm25[method.top_k=2]"]
    top = df.set_index("variant").loc["bm25"]
    assert (top.subem, top.commit, top.runs_seen, top.n) == (100.0, "new", 2, 4)
    assert top.generator_model == "embedded:smollm2-135m-instruct@b179c9523d0e"
    assert top.method_models == "embedded:all-minilm-l6-v2@ffffffffffff"
    assert top.config_key == "key-bm25-nq"


def test_archive_keeps_slim_runs_that_publish_the_same_figures_and_accumulates_newest(tmp_path):
    grid(tmp_path / "res", n=20, datasets=("nq",))
    write_run(tmp_path / "res", "bm25", "nq", [("Paris", ["Paris"])] * 3, overrides="method.top_k=2")
    written = archive(tmp_path / "res", tmp_path / "runs")
    assert len(written) == 5
    rec = json.loads((written[0] / "predictions.jsonl").read_text().splitlines()[0])
    assert "context" not in rec and len(rec["context_sha1"]) == 12
    assert rec["question"] == "q0"  # kept, with the echo flag, so the archive's echo is counted as a new run's
    assert rec["raw_output"] == f"{rec['prediction']}\nmore"  # the raw reply: re-scorable under another rule
    cols = ["variant", "n", "subem", "f1", "echo", "subem_from_echo", "cr", "compress_s", "commit", "config_key"]
    before = stats.add_uncertainty(collect(tmp_path / "res"))
    after = stats.add_uncertainty(collect(tmp_path / "runs"))
    assert after[cols].equals(before[cols]) and after.recomputed.all()
    assert after[["subem_lo", "d_f1", "p_subem"]].equals(before[["subem_lo", "d_f1", "p_subem"]])
    assert "bm25[method.top_k=2]" in set(after.variant)
    # what a summary recomputed from archived records reads (a resumed run, merged shards) survives the slimming
    f = tmp_path / "res" / "embedded" / "gen-a" / "nq" / "full" / "predictions.jsonl"
    recs = [json.loads(x) for x in f.read_text().splitlines()]
    recs[0]["meta"] = {"truncated": {"generator": {"context": 40}}, "diagnostics": {"recall1": 1.0}, "ci": [0.1]}
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    s = json.loads((f.parent / "summary.json").read_text())
    (f.parent / "summary.json").write_text(json.dumps({**s, "finished_at": "2026-11-21T10:00:00+0000"}))
    archive(tmp_path / "res", tmp_path / "runs")
    slim = read_records(tmp_path / "runs" / "embedded" / "gen-a" / "nq" / "full")
    assert summarize(slim)["truncated"] == summarize(recs)["truncated"] == {"generator": {"examples": 1, "context": 40}}
    assert slim[0]["meta"] == {"truncated": {"generator": {"context": 40}}, "diagnostics": {"recall1": 1.0}}
    # a later session: a newer bm25 run replaces the archived one, an older full run does not
    write_run(tmp_path / "s2", "bm25", "nq", [("Paris", ["Paris"])] * 4, finished="2026-11-23T10:00:00+0000")
    write_run(tmp_path / "s2", "full", "nq", [("x", ["Paris"])] * 4, finished="2026-11-01T10:00:00+0000")
    assert [p.name for p in archive(tmp_path / "s2", tmp_path / "runs")] == ["bm25"]
    now = collect(tmp_path / "runs").set_index("variant")
    assert (now.loc["bm25", "n"], now.loc["full", "n"], len(now)) == (4, 20, 5)
    (tmp_path / "runs" / "NOTES.md").write_text("## Notes on this snapshot\n\nmade by hand\n")
    publish(tmp_path / "runs", tmp_path / "out", resamples=50)
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "[NOTES.md](../runs/NOTES.md)" in md and "made by hand" not in md  # linked, never pasted


def test_read_predictions_takes_the_examples_of_the_summary(tmp_path):
    f = write_run(tmp_path, "full", "nq", [("Paris", ["Paris"]), ("x", ["Paris"]), ("Paris", ["Paris"])])
    with (f / "predictions.jsonl").open("a") as h:  # a later resume with a larger limit, then a torn line
        h.write(json.dumps({"id": "nq-3", "subem": 1, "em": 1, "f1": 1}) + '\n{"id": ')
    assert list(read_predictions(f, 3).id) == ["nq-0", "nq-1", "nq-2"]
    assert len(read_predictions(f)) == 4


def test_model_ids_finds_nested_model_references():
    info = {
        "name": "x",
        "scorer": {"model": {"ref": "embedded:a", "revision": "r1"}, "encoder_ref": "b"},
        "checkpoint": "fangyuan/nq_extractive_compressor",
    }
    assert model_ids(info) == ["embedded:a@r1", "b", "fangyuan/nq_extractive_compressor"]


def test_uncertainty_marks_differences_from_full_that_are_not_significant(tmp_path):
    grid(tmp_path, n=40)
    # a run indistinguishable from full: one answer changed
    write_run(tmp_path, "bm25_close", "nq", [("Paris" if i < 23 else "London", ["Paris"]) for i in range(40)])
    df = stats.add_uncertainty(collect(tmp_path)).set_index(["dataset", "variant"])
    assert df.recomputed.all()
    assert df.loc[("nq", "bm25"), "d_subem"] == pytest.approx(-30) and df.loc[("nq", "bm25"), "sig_subem"]
    assert df.loc[("nq", "bm25_close"), "d_subem"] == pytest.approx(-2.5)
    assert df.loc[("nq", "bm25_close"), "disagree_subem"] == pytest.approx(1 / 40)  # the one changed answer
    assert not df.loc[("nq", "bm25_close"), "sig_subem"]
    assert pd.isna(df.loc[("nq", "full"), "d_subem"])
    lo, hi = df.loc[("nq", "full"), ["subem_lo", "subem_hi"]]
    assert lo < 60 < hi
    t2 = tables.table2(df.reset_index(), "embedded", "gen-a")
    assert bool(t2.nonsig.loc["bm25_close", ("nq", "subem")]) and not t2.nonsig.loc["bm25", ("nq", "subem")]
    # best: the oracle (90%) is excluded, so full's 60 is bold; CR best is bm25's 4x
    assert t2.best.loc["full", ("nq", "subem")] and not t2.best.loc["oracle_sentences", ("nq", "subem")]
    assert t2.best.loc["bm25", ("nq", "cr")]


def test_latency_break_even_against_full(tmp_path):
    grid(tmp_path, n=10, datasets=("nq",))
    lat = tables.latency(collect(tmp_path)).set_index("variant")
    # bm25: generation 0.2 s vs full's 0.5 s saves 0.3 s for 0.05 s of compression
    assert lat.loc["bm25", "generation_saved_s"] == pytest.approx(0.3)
    assert lat.loc["bm25", "break_even"] == pytest.approx(0.05 / 0.3)
    assert lat.loc["bm25", "pays_off"] and pd.isna(lat.loc["full", "break_even"])


def test_shared_questions_table_rescores_every_row_on_the_ids_they_share(tmp_path):
    """full at n=40 is right on its first 24; bm25 at n=20 on its first 12 (CR 4 on the first 10, 2 after);
    naive at n=5 is too short: on the shared 20 questions full is 100%, bm25 60%, and naive is left out."""
    right = lambda n, k: [("Paris" if i < k else "London", ["Paris"]) for i in range(n)]  # noqa: E731
    write_run(tmp_path, "full", "nq", right(40, 24), tokens=(100, 100))
    bm25 = write_run(tmp_path, "bm25", "nq", right(20, 12), tokens=(100, 25))
    recs = [json.loads(x) for x in (bm25 / "predictions.jsonl").read_text().splitlines()]
    for r in recs[10:]:
        r["compressed_tokens"] = 50
    (bm25 / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    write_run(tmp_path, "naive", "nq", right(5, 1), tokens=(100, 0))
    shared, short = matched(collect(tmp_path), min_n=10)
    shared = stats.add_uncertainty(shared, "full", 200, 0).set_index("variant")
    assert list(short.variant) == ["naive"]
    assert shared.loc["full", "n"] == shared.loc["bm25", "n"] == 20 and shared.loc["full", "n_run"] == 40
    assert shared.loc["full", "subem"] == 100.0 and shared.loc["bm25", "subem"] == 60.0
    assert shared.loc["bm25", "cr"] == pytest.approx(2000 / 750)  # ratio of sums over the 20 shared records
    assert shared.loc["bm25", "n_paired"] == 20 and shared.loc["bm25", "d_subem"] == pytest.approx(-40.0)
    assert shared.recomputed.all()


def test_diagnostics_tables_show_each_methods_averaged_flags_in_pipeline_order(tmp_path):
    folder = write_run(tmp_path, "compselect", "nq", [("Paris", ["Paris"])] * 4)
    s = json.loads((folder / "summary.json").read_text())
    s["diagnostics"] = {
        "recall3": {"mean": 0.0, "n": 3},
        "recall1": {"mean": 2 / 3, "n": 3},
        "eligible": {"mean": 0.75, "n": 4},
        "hit2_at1": {"mean": 1 / 3, "n": 3},
    }
    (folder / "summary.json").write_text(json.dumps(s))
    write_run(tmp_path, "full", "nq", [("London", ["Paris"])] * 4)  # (the same answers would make an alias)
    [(head, rows)] = tables.diagnostics(collect(tmp_path))
    assert head == [
        "Method",
        "Dataset",
        "answer in passages % (n)",
        "Recall-1 % (n)",
        "Hit-2@1 % (n)",
        "Recall-3 % (n)",
    ]
    assert rows == [["compselect", "NQ", "75.00 (4)", "66.67 (3)", "33.33 (3)", "0.00 (3)"]]
    # a second method's keys make a second table, which the Markdown page keeps apart (a blank line between)
    edc2 = write_run(tmp_path, "edc2", "nq", [("Lyon", ["Paris"])] * 4)  # not the same answers as full's
    s = json.loads((edc2 / "summary.json").read_text())
    (edc2 / "summary.json").write_text(json.dumps({**s, "diagnostics": {"llm_calls": {"mean": 2.0, "n": 4}}}))
    assert len(tables.diagnostics(collect(tmp_path))) == 2
    publish(tmp_path, tmp_path / "out", resamples=20)
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    second = md.index("| Method | Dataset | LLM calls (n) |")
    assert md[second - 2 : second] == "\n\n"


def test_latency_table_says_how_each_row_was_timed(tmp_path):
    grid(tmp_path, n=10, datasets=("nq",))
    lat = tables.latency(collect(tmp_path)).set_index("variant")
    assert lat.loc["bm25", "timed_at"] == "b?x10 / t?x10"  # records made before batch and threads were kept
    rec = {"original_tokens": 10, "compressed_tokens": 5, "compress_s": 0.1, "generate_s": 0.2, **score("x", ["x"])}
    mixed = [{**rec, "batch": 8, "threads": 1}] * 2 + [{**rec, "batch": 1, "threads": 2}]
    assert timed_at(summarize(mixed)) == "b8x2 b1x1 / t1x2 t2x1"


def test_latency_and_throughput_never_mix_protocols(tmp_path):
    """Latency only from a batch-1 sample, throughput only from an accuracy pass timed at one batch size and
    thread count; break-even only against a baseline timed the same way."""
    rec = {"original_tokens": 10, "compressed_tokens": 5, "compress_s": 0.1, "generate_s": 0.2, **score("x", ["x"])}
    one = latency_fields(summarize([{**rec, "batch": 8, "threads": 2}] * 3, [{**rec, "threads": 2}]))
    assert one["latency_protocol"] == "batch1" and one["total_latency_s"] == pytest.approx(0.3)
    assert one["batched_at"] == "8" and one["batched_compress_s"] == pytest.approx(0.1)
    mixed = latency_fields(summarize([{**rec, "batch": 8, "threads": 2}, {**rec, "batch": 1, "threads": 2}]))
    assert mixed["total_latency_s"] is None and mixed["latency_protocol"] is None  # no batch-1 sample
    assert mixed["batched_compress_s"] is None  # two batch sizes: no throughput either
    # a summary from before the protocols were kept apart: its batched means are not latency
    old = {
        "latency_protocol": "batched",
        "compress_s": 0.1,
        "generate_s": 0.2,
        "total_latency_s": 0.3,
        "batched": {"compress_s": 0.1, "generate_s": 0.2},
        "timed_at": {"batch": {"1": 4}, "threads": {"1": 4}},
    }
    old = latency_fields(old)
    assert old["total_latency_s"] is None and old["batched_compress_s"] == pytest.approx(0.1)
    # full timed at batch 1 on 2 threads, bm25 on 1 thread: no break-even between them
    write_run(tmp_path, "full", "nq", [("Paris", ["Paris"])] * 4, times=(0.0, 0.5))
    folder = write_run(tmp_path, "bm25", "nq", [("Paris", ["Paris"])] * 4, times=(0.05, 0.2))
    s = json.loads((folder / "summary.json").read_text())
    (folder / "summary.json").write_text(json.dumps({**s, "latency_threads": [1]}))
    lat = tables.latency(collect(tmp_path)).set_index("variant")
    assert lat.loc["bm25", "total_s"] == pytest.approx(0.25) and pd.isna(lat.loc["bm25", "break_even"])


def test_throughput_sum_adds_each_variants_mean_over_datasets_and_names_the_ones_without():
    lat = pd.DataFrame(
        {
            "variant": ["full", "full", "bm25", "bm25", "edc2", "edc2"],
            "dataset": ["nq", "hotpotqa"] * 3,
            "batched_s": [1.0, 2.0, 0.5, None, None, None],
        }
    )
    cost, summed, missing = tables.throughput_sum(lat)
    assert cost == pytest.approx(1.5 + 0.5) and summed == 2 and missing == ["edc2"]


def _with_contexts(folder: Path, texts: list[str]) -> None:
    """Give a ``write_run`` folder rendered contexts (one per record, in order) and a context key."""
    f = folder / "predictions.jsonl"
    recs = [json.loads(x) for x in f.read_text().splitlines()]
    rows = [{**r, "context": t, "units": [[0, i]]} for i, (r, t) in enumerate(zip(recs, texts, strict=True))]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = json.loads((folder / "run.json").read_text())
    (folder / "run.json").write_text(json.dumps({**run, "contexts": {"key": f"ck-{folder.name}"}}))


def test_the_archive_keeps_each_context_text_once_and_a_clone_exports_them(tmp_path):
    from leaderboard import context_store
    from leaderboard.contexts import ExportError, export_contexts

    answers = [("Paris", ["Paris"])] * 4
    full = write_run(tmp_path / "res", "full", "nq", answers)
    bm25 = write_run(tmp_path / "res", "bm25", "nq", [*answers[:3], ("London", ["Paris"])])
    texts = [f"Doc1: T{i}\nabout {i}\nDoc2: U\nmore" for i in range(4)]
    _with_contexts(full, texts)
    _with_contexts(bm25, [texts[0], texts[1], "Doc1: T9\nkept", ""])  # two shared with full, one empty
    assert archive(tmp_path / "res", tmp_path / "runs", generators=["gen-b"]) == []  # only these blocks' runs
    archive(tmp_path / "res", tmp_path / "runs")
    store = context_store.held(tmp_path / "runs", "nq")
    assert sorted(x["context"] for x in store.values()) == sorted({*texts, "Doc1: T9\nkept", ""})  # once each
    path = context_store.store_file(tmp_path / "runs", "nq")
    size = path.stat().st_size
    assert context_store.add(tmp_path / "runs", "nq", read_records(full)) == 0 and path.stat().st_size == size
    assert (tmp_path / "runs" / "embedded" / "gen-a" / "nq" / "bm25" / "latency.jsonl").is_file()
    # the archive's records hold hashes only; an export from it gives the run folders' own contexts back
    kw = {"variants": ["full", "bm25"], "sample": "first", "datasets": ["nq"]}
    made = export_contexts(tmp_path / "res", tmp_path / "made.jsonl.gz", **kw)
    clone = export_contexts(tmp_path / "runs", tmp_path / "clone.jsonl.gz", **kw)
    from harness.reuse import read_contexts_file

    (m1, lines1), (m2, lines2) = read_contexts_file(made), read_contexts_file(clone)
    assert lines1 == lines2 and [x["documents"] for x in lines2[:2]] == [
        [f"T{i}\nabout {i}", "U\nmore"] for i in (0, 1)
    ]
    assert m1["rows"] == m2["rows"]
    from leaderboard.compare import compare, report

    shown = "\n".join(report(compare(tmp_path / "runs", "full", "bm25", "nq")))  # the one differing question's
    assert "about 3" in shown and "(empty)" in shown and "not kept" not in shown
    # a store that lost a text: one line naming the records' file and the store
    path.unlink()
    with pytest.raises(ExportError, match=r"records keep no context text and .*contexts/nq.jsonl.gz") as e:
        export_contexts(tmp_path / "runs", tmp_path / "x.jsonl.gz", **kw)
    assert "\n" not in str(e.value)


def test_backfill_gives_archived_runs_the_texts_of_runs_remade_with_the_same_hashes(tmp_path):
    """Runs archived before run folders held a context key (the headline block's) get their texts and a key from
    remade runs whose contexts hash alike; a remade run that differs anywhere backs nothing."""
    from leaderboard import context_store
    from leaderboard.__main__ import main
    from leaderboard.contexts import ExportError, export_contexts

    answers = [("Paris", ["Paris"])] * 4
    texts = [f"Doc1: T{i}\nabout {i}" for i in range(4)]
    for method in ("bm25", "full"):  # archived as the old archive did: hashes only, no context key
        folder = write_run(tmp_path / "old", method, "nq", answers)
        _with_contexts(folder, texts)
        run = json.loads((folder / "run.json").read_text())
        (folder / "run.json").write_text(json.dumps({k: v for k, v in run.items() if k != "contexts"}))
    archive(tmp_path / "old", tmp_path / "runs")
    shutil.rmtree(tmp_path / "runs" / "contexts")
    kept = tmp_path / "runs" / "embedded" / "gen-a" / "nq"
    before = {p: p.read_bytes() for p in kept.rglob("*") if p.is_file() and p.name != "run.json"}
    # remade on the first 3 questions: bm25 alike, full with its third context changed
    new = [("Paris", ["Paris"])] * 3
    _with_contexts(write_run(tmp_path / "new", "bm25", "nq", new, commit="remade"), texts[:3])
    _with_contexts(write_run(tmp_path / "new", "full", "nq", new, commit="remade"), [*texts[:2], "Doc1: other"])
    assert main(["backfill-contexts", str(tmp_path / "new"), str(tmp_path / "runs")]) == 0
    bm25 = json.loads((kept / "bm25" / "run.json").read_text())
    assert bm25["contexts"]["key"] == "ck-bm25" and bm25["contexts"]["backfilled"] == {
        "commit": "remade",
        "questions": 3,
        "same_predictions": 3,
    }
    assert "contexts" not in json.loads((kept / "full" / "run.json").read_text())  # differs on nq-2: not backed
    assert {x["context"] for x in context_store.held(tmp_path / "runs", "nq").values()} == set(texts[:3])
    assert before == {p: p.read_bytes() for p in kept.rglob("*") if p.is_file() and p.name != "run.json"}
    kw = {"variants": ["bm25"], "sample": "first", "datasets": ["nq"]}
    out = export_contexts(tmp_path / "runs", tmp_path / "c.jsonl.gz", limit=3, **kw)
    from harness.reuse import read_contexts_file

    assert [x["documents"] for x in read_contexts_file(out)[1]] == [[f"T{i}\nabout {i}"] for i in range(3)]
    with pytest.raises(ExportError, match="1 of 4 records keep no context text"):  # the 4th was never remade
        export_contexts(tmp_path / "runs", tmp_path / "d.jsonl.gz", **kw)


def test_a_resumed_run_counts_a_batch_size_once_through_the_archive(tmp_path):
    """Records made before batch and threads were kept leave gaps, so pandas reads those columns as floats; the
    archive writes them back whole, and a summary that counted ``1.0`` apart from ``1`` still reads as one."""
    folder = write_run(tmp_path / "res", "bm25", "nq", [("Paris", ["Paris"])] * 4)
    recs = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    for r in recs[1:]:
        r.update(batch=1, threads=1)
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    [out] = archive(tmp_path / "res", tmp_path / "runs")
    kept = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [(r.get("batch"), type(r.get("threads"))) for r in kept] == [(None, type(None))] + [(1, int)] * 3
    assert summarize([*kept, {**kept[1], "batch": 1.0, "threads": 1.0}])["timed_at"] == {
        "batch": {"unknown": 1, "1": 4},
        "threads": {"unknown": 1, "1": 4},
    }
    old = {"timed_at": {"batch": {"unknown": 50, "1.0": 57, "1": 93}, "threads": {"unknown": 50, "1.0": 57}}}
    assert timed_at(old) == "b?x50 b1x150 / t?x50 t1x57"


def test_comparison_puts_the_papers_rows_beside_ours_with_the_difference(tmp_path):
    grid(tmp_path, n=10, generator="llama3-8b-instruct", datasets=("nq",))
    df = collect(tmp_path)
    cmp = reference.comparison(df, reference.load_reference(), "embedded", "llama3-8b-instruct")
    full = cmp[cmp.paper_method == "Full Content"].iloc[0]
    assert full.variant == "full" and full.same_generator
    assert (full.nq_subem_ours, full.nq_subem_paper) == (60.0, 45.87)
    assert full.nq_subem_diff == pytest.approx(60 - 45.87)
    bottleneck = cmp[cmp.paper_method == "BottleNeck"].iloc[0]
    assert pd.isna(bottleneck.variant) and bottleneck.nq_cr_paper == 14.32 and pd.isna(bottleneck.nq_cr_ours)
    # an embedded generator is compared with the anchor generator, flagged as a different one
    assert reference.paper_generator("smollm2-135m-instruct") == ("LLaMA3-8B-Instruct", False)


def test_publish_writes_every_output_from_hand_made_runs(tmp_path):
    grid(tmp_path / "res", n=20)
    files = publish(tmp_path / "res", tmp_path / "out", resamples=200, min_n=10)
    names = {f.name for f in files}
    assert {
        "leaderboard.md",
        "index.html",
        "runs.csv",
        "latency.csv",
        "table2_embedded_gen-a.csv",
        "table2_embedded_gen-a.tex",
        "table2_shared_embedded_gen-a.csv",
        "subem_vs_cr_embedded_gen-a.png",
        "latency_embedded_gen-a.png",
    } <= names
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "| full | **60.00** |" in md  # best non-oracle SubEM on NQ in bold
    assert "### Table 2 on shared questions (NQ 20, TQA 20)" in md
    assert "oracle_sentences (oracle) | 90.00 |" in md
    assert re.search(r"detected with power 0\.8 .*: NQ \d+\.\d points at n = 20 \(median disagreement \d+%\)", md)
    assert "DIFFERENT generator" in md and "BottleNeck" in md and "setting `finefilter`" in md
    # hand-made records carry no batch size: no throughput figure, so the block's cost names them all as missing
    assert "sum over its 0 variants with a batched figure" in md and "`bm25`, `full`, `naive`" in md
    # run folders are named relative to the published folder: no machine's path, the same bytes from any checkout
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert all((tmp_path / "out" / f / "summary.json").is_file() for f in runs.folder)
    assert str(tmp_path) not in (tmp_path / "out" / "runs.csv").read_text()
    assert "<dd>../res/embedded/gen-a/nq/full</dd>" in (tmp_path / "out" / "index.html").read_text()
    tex = (tmp_path / "out" / "table2_embedded_gen-a.tex").read_text()
    assert "\\textbf{60.00}" in tex and "\\begin{tabular}{l" + "r" * 10 + "}" in tex
    for f in files:
        if f.suffix == ".png":
            assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f.stat().st_size > 10_000


@pytest.mark.slow
def test_publish_on_real_runs_of_the_embedded_generator(tmp_path):
    """One real tiny run per method (nq, 3 examples) through the harness's run loop, then publish."""
    from hydra import compose, initialize_config_dir

    from harness.config import register_resolvers
    from harness.provenance import REPO_ROOT
    from harness.runner import run

    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        for m in ("naive", "full", "bm25"):
            # one batch-1 latency example, no warm-up: the latency columns come from real timings at a fifth of
            # the default pass's cost (3 + 2 answers again per run)
            over = [f"method={m}", "dataset=nq", "limit=3", "progress=false", "latency.samples=1", "latency.warmup=0"]
            cfg = compose("config", overrides=over)
            run(cfg, tmp_path / "res" / "embedded" / cfg.generator.name / "nq" / m)
    publish(tmp_path / "res", tmp_path / "out", resamples=100)
    runs = pd.read_csv(tmp_path / "out" / "runs.csv").set_index("variant")
    assert set(runs.index) == {"naive", "full", "bm25"} and runs.recomputed.all()
    [summary_file] = (tmp_path / "res").rglob("bm25/summary.json")
    summary = json.loads(summary_file.read_text())
    assert runs.loc["bm25", "cr"] == pytest.approx(summary["cr"]) and summary["cr"] > 2
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    assert f"{summary['subem']:.2f}" in md and f"{summary['cr']:.2f}×" in md


def test_pareto_front_keeps_the_runs_no_other_run_beats_on_both_subem_and_cr():
    from leaderboard.plots import pareto_front

    pts = [
        ("full", 1, 60),
        ("bm25", 4, 30),
        ("weak", 2, 20),
        ("bm25_k2", 4, 25),
        ("tiny", 8, 30),
        ("mid", 3, 45),
    ]
    assert pareto_front(pts) == ["full", "mid", "tiny"]


def test_a_row_that_kept_nothing_on_most_questions_is_never_bold_for_cr_and_is_marked(tmp_path):
    """Emptied contexts inflate CR (a ratio of sums) without compressing anything the generator reads."""
    grid(tmp_path, n=8, datasets=("nq",))
    folder = write_run(tmp_path, "hollow", "nq", [("Paris", ["Paris"])] * 8, tokens=(100, 2))
    preds = [json.loads(x) for x in (folder / "predictions.jsonl").read_text().splitlines()]
    for p in preds[:6]:  # 6 of 8 contexts emptied: CR 800 / 4 = 200x, above bm25's 4x
        p["compressed_tokens"] = 0
    (folder / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    summary = json.loads((folder / "summary.json").read_text())
    summary.update(summarize(preds))
    del summary["kept_nothing"]  # as in summaries written before the field: recounted from the records
    (folder / "summary.json").write_text(json.dumps(summary))
    runs = collect(tmp_path).set_index("variant")
    assert runs.loc["hollow", "kept_nothing"] == 0.75 and runs.loc["bm25", "kept_nothing"] == 0
    t = tables.table2(runs.reset_index(), "embedded", "gen-a")
    assert t.values.loc["hollow", ("nq", "cr")] > t.values.loc["bm25", ("nq", "cr")]
    assert not t.best.loc["hollow", ("nq", "cr")] and t.best.loc["bm25", ("nq", "cr")]
    _, rows = tables.table2_rows(t)
    cr = {r[0]: r[1 + tables.T2_METRICS.index("cr")] for r in rows}
    assert cr["hollow"].endswith(tables.EMPTY) and cr["bm25"] == "**4.00×**"
    assert tables.table2_csv(t).set_index("variant").loc["hollow", "nq_kept_nothing"] == 0.75


def _empty_some(folder: Path, tokens: list[tuple[int, int]], drop: tuple[str, ...] = ()) -> dict:
    """Give the records of a hand-made run these (original, compressed) token counts, resummarised; ``drop``
    takes fields out of the summary, as in summaries written before them."""
    preds = [json.loads(x) for x in (folder / "predictions.jsonl").read_text().splitlines()]
    for p, (o, c) in zip(preds, tokens, strict=True):
        p["original_tokens"], p["compressed_tokens"] = o, c
    (folder / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    summary = json.loads((folder / "summary.json").read_text())
    summary.update(summarize(preds))
    for k in drop:
        del summary[k]
    (folder / "summary.json").write_text(json.dumps(summary))
    return summary


# 6 of 8 contexts emptied; the other two 100 -> 10 and 120 -> 30 tokens
HOLLOW = [(100, 0)] * 6 + [(100, 10), (120, 30)]


def test_cr_over_non_empty_contexts_is_a_ratio_of_sums_over_those_only(tmp_path):
    folder = write_run(tmp_path, "hollow", "nq", [("Paris", ["Paris"])] * 8)
    s = _empty_some(folder, HOLLOW)
    assert s["cr"] == 820 / 40 and s["cr_nonempty"] == 220 / 40 and s["kept_nothing"] == 0.75
    assert (
        summarize([{**r, "compressed_tokens": 0} for r in read_predictions(folder).to_dict("records")])["cr_nonempty"]
        is None
    )
    none_empty = write_run(tmp_path, "bm25", "nq", [("Paris", ["Paris"])] * 4, tokens=(100, 25))
    assert json.loads((none_empty / "summary.json").read_text())["cr_nonempty"] == 4.0


def test_collect_recounts_cr_nonempty_for_old_summaries_from_their_first_n_records(tmp_path):
    folder = write_run(tmp_path, "hollow", "nq", [("Paris", ["Paris"])] * 8)
    _empty_some(folder, HOLLOW, drop=("cr_nonempty", "kept_nothing"))
    extra = json.loads((folder / "predictions.jsonl").read_text().splitlines()[0])
    with (folder / "predictions.jsonl").open("a") as f:  # records past the summary's n: not counted
        for i in range(4):
            f.write(json.dumps({**extra, "id": f"late-{i}", "original_tokens": 500, "compressed_tokens": 1}) + "\n")
    row = collect(tmp_path).set_index("variant").loc["hollow"]
    assert row.cr_nonempty == 5.5 and row.kept_nothing == 0.75 and row.cr == 20.5


def test_empty_contexts_table_shows_the_share_emptied_and_the_cr_over_the_rest(tmp_path):
    grid(tmp_path, n=8, datasets=("nq",))
    _empty_some(write_run(tmp_path, "hollow", "nq", [("Paris", ["Paris"])] * 8), HOLLOW)
    _empty_some(write_run(tmp_path, "hollow", "triviaqa", [("Paris", ["Paris"])] * 4), [(50, 0), (50, 5)] * 2)
    runs = collect(tmp_path)
    t = tables.empty_contexts(runs, "embedded", "gen-a")
    assert t.loc["hollow", ("nq", "empty")] == 75.0 and t.loc["hollow", ("nq", "cr_nonempty")] == 5.5
    assert t.loc["hollow", ("triviaqa", "empty")] == 50.0 and t.loc["hollow", ("triviaqa", "cr_nonempty")] == 10
    assert t.loc["naive", ("nq", "empty")] == 100.0 and np.isnan(t.loc["naive", ("nq", "cr_nonempty")])
    assert t.loc["bm25", ("nq", "empty")] == 0.0 and t.loc["bm25", ("nq", "cr_nonempty")] == 4.0
    head, rows = tables.empty_contexts_rows(t)
    assert head == ["Method", "NQ empty %", "NQ CR non-empty", "TQA empty %", "TQA CR non-empty"]
    by = {r[0]: r[1:] for r in rows}
    assert by["hollow"] == ["75.0", "5.50×", "50.0", "10.00×"]
    assert by["naive"] == ["100.0", "-", "-", "-"] and by["full"][:2] == ["0.0", "1.00×"]
    publish(tmp_path, tmp_path / "out", resamples=50)
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "### Empty contexts" in md and "| hollow | 75.0 | 5.50× | 50.0 | 10.00× |" in md
    csv = pd.read_csv(tmp_path / "out" / "empty_contexts_embedded_gen-a.csv").set_index("variant")
    assert csv.loc["hollow", "nq_cr_nonempty"] == 5.5 and csv.loc["hollow", "triviaqa_empty"] == 50.0


def test_subem_vs_cr_draws_mostly_empty_rows_hollow_and_labels_their_share(tmp_path, monkeypatch):
    from leaderboard import plots

    grid(tmp_path, n=8, datasets=("nq",))
    _empty_some(write_run(tmp_path, "hollow", "nq", [("Paris", ["Paris"])] * 8), HOLLOW)
    _empty_some(write_run(tmp_path, "half", "nq", [("Paris", ["Paris"])] * 4), [(100, 0), (100, 0)] + [(100, 50)] * 2)
    figs = []
    plt = plots._plt()
    monkeypatch.setattr(plt, "close", figs.append)
    plots.subem_vs_cr(collect(tmp_path), "embedded", "gen-a", tmp_path / "p.png")
    ax = figs[0].axes[0]
    labels = {t.get_text() for t in ax.texts}
    assert "hollow ∅75%" in labels and "half" in labels and "bm25" in labels  # half: not more than half
    faces = {(round(ln.get_xdata()[0], 6), ln.get_markerfacecolor()) for ln in ax.lines if ln.get_marker() == "o"}
    assert (20.5, "none") in faces and all(f != "none" for x, f in faces if x != 20.5)


def test_a_shuffled_sample_is_a_column_not_a_variant_and_the_newest_run_wins(tmp_path):
    grid(tmp_path, n=8, datasets=("nq",))
    folder = write_run(
        tmp_path / "later", "bm25", "nq", [("Paris", ["Paris"])] * 8, finished="2026-11-21T10:00:00+0000"
    )
    summary = json.loads((folder / "summary.json").read_text())
    (folder / "summary.json").write_text(json.dumps({**summary, "sample": "shuffled", "sample_seed": 0}))
    runs = collect([tmp_path / "embedded", tmp_path / "later"]).set_index("variant")
    assert runs.loc["bm25", "sample"] == "shuffled seed 0" and runs.loc["bm25", "subem"] == 100.0
    assert runs.loc["full", "sample"] == "first"  # a summary written before samples: the split's first n
    publish(tmp_path, tmp_path / "out", resamples=50)
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "(n = 8: each row's n below the table; sample: first, shuffled seed 0)" in md


@pytest.mark.slow
def test_compare_prints_wins_losses_ties_and_the_differing_questions_of_two_published_rows(capsys):
    """On the archived runs (real SmolLM2 predictions): the counts are the records' own, every differing question
    is printed with its golds, both answers, CRs and echo flags."""
    from leaderboard.__main__ import main
    from leaderboard.compare import compare
    from leaderboard.headline import newest_block

    runs = REPO_ROOT / "leaderboard" / "runs"
    c = compare(runs, "compselect", "bm25", "nq", generator="smollm2-135m-instruct-vllm")
    a = {r["id"]: r["subem"] for r in read_records(c.folders[0])}
    b = {r["id"]: r["subem"] for r in read_records(c.folders[1])}
    shared = a.keys() & b.keys()
    assert len(c.pairs) == len(shared) == 200
    assert (c.wins, c.losses) == (sum(a[i] > b[i] for i in shared), sum(a[i] < b[i] for i in shared))
    assert c.wins + c.losses + c.ties == 200 and c.wins + c.losses == len(c.differing()) > 0
    args = ["compare", str(runs), "compselect", "bm25", "--dataset", "nq", "--generator", "smollm2-135m-instruct-vllm"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"SubEM: {c.wins} wins, {c.losses} losses, {c.ties} ties for compselect" in out
    # without --generator: the headline block (the newest run's), saying which others hold both rows
    assert main(args[:6]) == 0
    every = collect(runs)
    nq = every[every.dataset == "nq"].groupby("generator").variant.agg(set)
    holders = sum({"compselect", "bm25"} <= v for v in nq)
    headline = newest_block(every)
    bare = capsys.readouterr().out
    assert bare.startswith(f"compselect vs bm25 on nq ({headline[0]} / {headline[1]}), ") and " wins, " in bare
    assert ("--generator picks one" in bare) == (holders > 1)
    first_a, _ = c.differing()[0]
    assert f"[1] {first_a['id']}" in out and first_a["question"] in out and "gold:" in out
    assert out.count("A SubEM") == out.count("B SubEM") == len(c.differing()) and "ECHO" in out
    assert main(["compare", str(runs), "compselect", "nope", "--dataset", "nq"]) == 2
    assert "no profile/generator block" in capsys.readouterr().err


def test_compare_takes_the_newest_block_where_several_hold_both_rows(tmp_path):
    from leaderboard.compare import compare, report

    grid(tmp_path, n=10, datasets=("nq",))  # gen-a, finished 2026-11-20
    right = [("Paris", ["Paris"])] * 10
    write_run(tmp_path, "full", "nq", right, generator="gen-b", finished="2026-11-25T10:00:00+0000")
    write_run(tmp_path, "bm25", "nq", right[:4] + [("x", ["Paris"])] * 6, generator="gen-b")
    c = compare(tmp_path, "full", "bm25", "nq")
    assert c.block == ("embedded", "gen-b") and c.others == ("gen-a",) and (c.wins, c.losses) == (6, 0)
    assert "also held by gen-a: --generator picks one" in "\n".join(report(c))
    older = compare(tmp_path, "full", "bm25", "nq", generator="gen-a")
    assert older.block == ("embedded", "gen-a") and older.others == () and (older.wins, older.losses) == (3, 0)


# ------------------------------------------------------------------------------------------ one headline
def _twin(source: Path, variant: str) -> Path:
    """A run of ``variant`` whose records repeat ``source``'s (same answers from the same contexts)."""
    dest = source.parent / variant
    dest.mkdir(parents=True)
    for name in ("predictions.jsonl", "run.json"):
        (dest / name).write_text((source / name).read_text())
    (dest / ".hydra").mkdir()
    (dest / ".hydra" / "hydra.yaml").write_text((source / ".hydra" / "hydra.yaml").read_text())
    summary = json.loads((source / "summary.json").read_text())
    (dest / "summary.json").write_text(json.dumps({**summary, "method": variant}))
    return dest


def test_aliases_are_found_from_the_records_and_need_every_dataset_to_agree(tmp_path):
    from leaderboard.headline import aliases

    grid(tmp_path, n=10, datasets=("nq", "triviaqa"))
    for ds in ("nq", "triviaqa"):
        _twin(tmp_path / "embedded" / "gen-a" / ds / "bm25", "bm25_v2")
        _twin(tmp_path / "embedded" / "gen-a" / ds / "bm25", "bm25_half")
    # bm25_half answers one triviaqa question from another context: not the same pipeline
    f = tmp_path / "embedded" / "gen-a" / "triviaqa" / "bm25_half" / "predictions.jsonl"
    recs = [json.loads(x) for x in f.read_text().splitlines()]
    recs[3]["context"] = "another context"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    found = aliases(collect(tmp_path))
    assert found == {("embedded", "gen-a", "bm25_v2"): "bm25"}
    # the same answers on a subset of the questions (a shorter run of the same pipeline) still make an alias
    f = tmp_path / "embedded" / "gen-a" / "nq" / "bm25_v2" / "predictions.jsonl"
    f.write_text("".join(f.read_text().splitlines(keepends=True)[:4]))
    s = json.loads((f.parent / "summary.json").read_text())
    (f.parent / "summary.json").write_text(json.dumps({**s, "n": 4}))
    assert aliases(collect(tmp_path)) == found


def test_table2_names_each_rows_n(tmp_path):
    """Rows of one block at different n (Table 2's rows on every test question, the rest on a sample): the
    note under Table 2 gives each row's n per dataset, rows with the same n together."""
    grid(tmp_path / "res", n=10)
    f = tmp_path / "res" / "embedded" / "gen-a" / "nq" / "bm25" / "predictions.jsonl"
    f.write_text("".join(f.read_text().splitlines(keepends=True)[:6]))
    s = json.loads((f.parent / "summary.json").read_text())
    (f.parent / "summary.json").write_text(json.dumps({**s, "n": 6}))
    publish(tmp_path / "res", tmp_path / "out", resamples=50)
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "### Table 2 layout (n = 6, 10: each row's n below the table; " in md
    note = next(ln for ln in md.splitlines() if ln.startswith("n per row"))
    assert note.startswith("n per row (NQ / TQA): 10 / 10: `naive`, `full`, `oracle_sentences`; 6 / 10: `bm25`")


def test_a_row_trained_through_another_generator_is_marked(tmp_path):
    """A method whose trained part names another generator (``trained_through`` in its ``method_info``, as CSM's
    heads do) is marked ‡ in Table 2 (Markdown, LaTeX, CSV, HTML) and named with that generator under it; a
    part trained through the block's own generator is not marked."""
    grid(tmp_path / "res", n=10)
    for ds, through in (("nq", "gen-old"), ("triviaqa", "gen-a")):
        f = tmp_path / "res" / "embedded" / "gen-a" / ds / "bm25" / "summary.json"
        s = json.loads(f.read_text())
        f.write_text(json.dumps({**s, "method_info": {"name": "bm25", "head": {"trained_through": through}}}))
    f = tmp_path / "res" / "embedded" / "gen-a" / "nq" / "full" / "summary.json"
    s = json.loads(f.read_text())
    f.write_text(json.dumps({**s, "method_info": {"name": "full", "trained_through": "gen-a"}}))
    publish(tmp_path / "res", tmp_path / "out", resamples=50)
    out = tmp_path / "out"
    md = (out / "leaderboard.md").read_text()
    assert "| bm25‡ |" in md and "| full |" in md
    assert "‡ Trained through another generator than `gen-a`: `bm25` through gen-old (NQ) (" in md
    tex = (out / "table2_embedded_gen-a.tex").read_text()
    assert (
        "bm25$^\\ddagger$" in tex and "$^\\ddagger$ trained through another generator: bm25 through gen-old (NQ)" in tex
    )
    t2 = pd.read_csv(out / "table2_embedded_gen-a.csv").set_index("variant")
    assert t2.loc["bm25", "trained_through_other_generator"] == "gen-old (NQ)"
    assert t2.trained_through_other_generator.dropna().index.tolist() == ["bm25"]
    assert "bm25‡" in (out / "index.html").read_text()


@pytest.mark.slow
def test_publish_opens_on_the_headline_block_with_older_blocks_under_archive(tmp_path):
    """The block of the newest run heads leaderboard.md and index.html (Table 2, SubEM-CR plot, latency);
    the older block follows under "Archive"; a variant identical to another is shown once, its alias named."""
    grid(tmp_path / "res", n=10, generator="gen-old", datasets=("nq",))
    for r in (tmp_path / "res").rglob("summary.json"):
        s = json.loads(r.read_text())
        r.write_text(json.dumps({**s, "finished_at": "2026-11-01T10:00:00+0000"}))
    grid(tmp_path / "res", n=10, generator="gen-new", datasets=("nq",))
    _twin(tmp_path / "res" / "embedded" / "gen-new" / "nq" / "bm25", "bm25_v2")
    publish(tmp_path / "res", tmp_path / "out", resamples=50)
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    heads = [ln for ln in md.splitlines() if ln.startswith("#")]
    assert heads[:2] == ["# Leaderboard", "## Profile `embedded`, generator `gen-new`"]
    assert heads[2].startswith("### Table 2 layout") and heads[3] == "### Latency and break-even"
    table2, plot = md.index(heads[2]), md.index("![subem_vs_cr embedded gen-new]")
    assert table2 < plot < md.index(heads[3])
    archive_at, old_at = heads.index("## Archive"), heads.index("### Profile `embedded`, generator `gen-old`")
    assert 3 < archive_at < old_at and heads[old_at + 1].startswith("#### Table 2 layout")
    assert md.count("| bm25 (= bm25_v2) |") == 1 and "| bm25_v2 " not in md and "| bm25 |" in md  # old block
    assert "`bm25` also stands for `bm25_v2`" in md
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert runs.set_index(["generator", "variant"]).loc[("gen-new", "bm25_v2"), "alias_of"] == "bm25"
    page = (tmp_path / "out" / "index.html").read_text()
    order = [
        page.index(x)
        for x in (
            "<h2>Profile embedded, generator gen-new",
            "subem_vs_cr_embedded_gen-new",
            "<h3>Latency and break-even",
            '<details id="all-runs">',
            "<h2>Archive",
        )
    ]
    assert order == sorted(order) and page.count("bm25 (= bm25_v2)") == 2  # Table 2 and the runs grid
    assert '<strong class="best">60.00</strong>' in page and "**60.00**" not in page  # bold as HTML
    # an explicit choice wins over the newest
    publish(tmp_path / "res", tmp_path / "out2", resamples=50, headline="gen-old")
    heads = [ln for ln in (tmp_path / "out2" / "leaderboard.md").read_text().splitlines() if ln.startswith("#")]
    assert heads[1] == "## Profile `embedded`, generator `gen-old`"
    with pytest.raises(SystemExit, match="names no block"):
        publish(tmp_path / "res", tmp_path / "out3", resamples=50, headline="gen-none")


# ------------------------------------------------------------------------------------------ latency passes
def pass_row(variant: str, online: list[float], compress: float = 0.0, **kw) -> dict:
    """One row of a ``tools.latency_pass`` file, its per-repeat seconds given (the file's own ratios are left
    wrong on purpose: the leaderboard recomputes them within the pass)."""
    total = [compress + o for o in online]
    row = {
        "pass_id": "p1",
        "cpu": "Intel Xeon, native bf16 (amx_bf16)",
        "threads": 2,
        "repeats": len(online),
        "profile": "embedded",
        "generator": "gen-a",
        "dataset": "nq",
        "sample": "shuffled seed 0",
        "variant": variant,
        "n": 20,
        "compress_s": compress,
        "online_s": sum(online) / len(online),
        "total_s": sum(total) / len(total),
        "total_s_spread": max(total) - min(total),
        "online_s_repeats": online,
        "total_s_repeats": total,
        "online_vs_full_ratio": 99.0,
        "total_vs_full_ratio": 99.0,
        "lms": [{"ref": "embedded:smollm2-135m-instruct", "engine": "vllm", "dtype": "float32"}],
        "finished_at": "2026-11-28T10:00:00+0000",
    }
    return {**row, **kw}


def write_pass(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_latency_pass_rows_are_compared_only_with_full_of_their_own_pass_and_cpu(tmp_path):
    from leaderboard import passes

    epyc = {"pass_id": "p2", "cpu": "AMD EPYC, AVX2 only", "finished_at": "2026-11-27T10:00:00+0000"}
    write_pass(
        tmp_path / "latency" / "latency-pass-a.jsonl",
        [pass_row("full", [1.0, 1.2]), pass_row("bm25", [0.5, 0.9], compress=0.1)],
    )
    write_pass(
        tmp_path / "latency" / "latency-pass-b.jsonl",
        [
            pass_row("full", [3.0, 3.0], **epyc),
            pass_row("refiner", [0.2, 0.2], compress=2.0, **epyc),
            pass_row("edc2", [0.2, 0.2], compress=2.0, **{**epyc, "pass_id": "p3"}),  # its pass timed no full
            pass_row("exit", [0.4, 0.4], compress=0.1, cpu="AMD EPYC, AVX2 only"),  # pass p1 on another CPU
        ],
    )
    df = passes.compare(passes.read_passes(tmp_path)).set_index(["pass_id", "variant"])
    bm25 = df.loc[("p1", "bm25")]
    assert bm25.compared and bm25.online_vs_full_ratio == pytest.approx((0.5 / 1.0 + 0.9 / 1.2) / 2)
    assert bm25.total_vs_full_ratio == pytest.approx((0.6 / 1.0 + 1.0 / 1.2) / 2)
    assert bm25.online_vs_full_ratio_spread == pytest.approx(0.9 / 1.2 - 0.5)
    assert bm25.generation_saved_s == pytest.approx(0.4) and bm25.break_even == pytest.approx(0.1 / 0.4)
    assert df.loc[("p1", "full"), "online_vs_full_ratio"] == 1.0 and pd.isna(df.loc[("p1", "full"), "pays_off"])
    assert df.loc[("p2", "refiner"), "compared"] and df.loc[("p2", "refiner"), "total_vs_full_ratio"] == 2.2 / 3
    for key in (("p3", "edc2"), ("p1", "exit")):  # never against the full of another pass or another CPU
        assert not df.loc[key, "compared"] and pd.isna(df.loc[key, "online_vs_full_ratio"])
        assert pd.isna(df.loc[key, "break_even"])
    head, apart = passes.block_passes(passes.compare(passes.read_passes(tmp_path)), "embedded", "gen-a")
    # merged over passes: refiner's row stands beside p1's, against the full of its own pass (p2, on the EPYC)
    assert list(zip(head.pass_id, head.variant, strict=True)) == [("p1", "full"), ("p1", "bm25"), ("p2", "refiner")]
    assert list(head.full_total_s) == [pytest.approx(1.1), pytest.approx(1.1), 3.0]
    assert set(zip(apart.pass_id, apart.variant, strict=True)) == {("p3", "edc2"), ("p1", "exit")}


def test_each_dataset_heads_with_its_own_newest_pass(tmp_path):
    """A pass per dataset (``--datasets nq``, then ``--datasets triviaqa``, perhaps in other sessions): each
    dataset's newest pass that timed ``full`` there is its headline; an older pass on a dataset goes apart."""
    from leaderboard import passes

    tqa = {"dataset": "triviaqa", "pass_id": "p2", "finished_at": "2026-11-29T10:00:00+0000"}
    old_nq = {"pass_id": "p0", "finished_at": "2026-11-20T10:00:00+0000"}
    write_pass(
        tmp_path / "latency" / "latency-pass-a.jsonl",
        [pass_row("full", [1.0, 1.0]), pass_row("bm25", [0.5, 0.5])],
    )
    write_pass(
        tmp_path / "latency" / "latency-pass-b.jsonl",
        [pass_row("full", [2.0, 2.0], **tqa), pass_row("bm25", [1.0, 1.0], **tqa)],
    )
    write_pass(
        tmp_path / "latency" / "latency-pass-0.jsonl",
        [pass_row("full", [9.0, 9.0], **old_nq), pass_row("bm25", [1.0, 1.0], **old_nq)],
    )
    hqa = {"dataset": "hotpotqa", "pass_id": "p3", "finished_at": "2026-11-30T10:00:00+0000"}
    write_pass(  # its file name sorts first; its rows still come after NQ's and TriviaQA's
        tmp_path / "latency" / "latency-pass-00-hotpotqa.jsonl",
        [pass_row("full", [2.0, 2.0], **hqa), pass_row("bm25", [1.0, 1.0], **hqa)],
    )
    head, apart = passes.block_passes(passes.compare(passes.read_passes(tmp_path)), "embedded", "gen-a")
    assert list(dict.fromkeys(head.dataset)) == ["nq", "triviaqa", "hotpotqa"]
    assert set(zip(head.dataset, head.pass_id, strict=True)) == {("nq", "p1"), ("triviaqa", "p2"), ("hotpotqa", "p3")}
    assert head.set_index(["dataset", "variant"]).loc[("triviaqa", "bm25"), "online_vs_full_ratio"] == 0.5
    assert set(apart.pass_id) == {"p0"}


def test_publish_shows_the_newest_pass_side_by_side_and_other_cpus_apart(tmp_path):
    grid(tmp_path / "res", n=10, datasets=("nq",))
    epyc = {"pass_id": "p2", "cpu": "AMD EPYC, AVX2 only"}
    write_pass(
        tmp_path / "res" / "latency" / "latency-pass-a.jsonl",
        [
            pass_row("full", [1.0, 1.0]),
            pass_row("bm25", [0.5, 0.5], compress=0.1),
            pass_row("naive", [0.3, 0.3], **epyc),
        ],
    )
    publish(tmp_path / "res", tmp_path / "out", resamples=50)
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    side = md.index("### Latency side by side (ratios to `full` within each pass)")
    assert side < md.index("### Latency and break-even")
    assert (
        "| bm25 | NQ | 20 × 2 | 0.1000 | 0.500 | 0.600 (±0.000) | 0.50× (±0.00) | 0.60× (±0.00) | 0.200 | yes |" in md
    )
    assert "| Intel Xeon, native bf16 (amx_bf16) | 2 | smollm2-135m-instruct float32 |" in md
    assert (
        "NQ: pass `p1` (2026-11-28T10:00:00+0000) on Intel Xeon, native bf16 (amx_bf16), 2 threads, 20 questions x 2"
        in md
    )
    apart = md.index("shown apart, never compared")
    assert (
        apart > side
        and "| naive | NQ | 20 × 2 | 0.0000 | 0.300 | 0.300 (±0.000) | p2 | AMD EPYC, AVX2 only | 2 | - |" in md
    )
    csv = pd.read_csv(tmp_path / "out" / "latency_pass.csv").set_index("variant")
    assert csv.loc["bm25", "online_vs_full_ratio"] == 0.5 and not csv.loc["naive", "compared"]


def test_per_run_break_even_needs_full_timed_on_the_same_cpu(tmp_path):
    grid(tmp_path, n=10, datasets=("nq",))
    folder = tmp_path / "embedded" / "gen-a" / "nq" / "bm25"
    s = json.loads((folder / "summary.json").read_text())
    (folder / "summary.json").write_text(json.dumps({**s, "hardware": {"cpu": "AMD EPYC 7B13"}}))
    lat = tables.latency(collect(tmp_path)).set_index("variant")
    assert pd.isna(lat.loc["bm25", "break_even"]) and pd.isna(lat.loc["bm25", "total_vs_full_s"])
    assert lat.loc["bm25", "total_s"] == pytest.approx(0.25)  # its own seconds are kept


def test_per_run_latency_names_each_rows_cpu_and_a_bf16_kind_apart(tmp_path):
    """The same CPU model with and without native bf16 is two machines: no break-even across them, each row says
    its cpu, and the block's cost says it sums over machines."""
    grid(tmp_path, n=10, datasets=("nq",))
    for variant, flags in (("full", ["avx2", "avx512_bf16"]), ("bm25", ["avx2"])):
        folder = tmp_path / "embedded" / "gen-a" / "nq" / variant
        s = json.loads((folder / "summary.json").read_text())
        s["hardware"] = {"cpu": "AMD EPYC"}
        s["generator_info"] = {**(s.get("generator_info") or {}), "lm": {"hardware": {"cpu_flags": flags}}}
        (folder / "summary.json").write_text(json.dumps(s))
    lat = tables.latency(collect(tmp_path)).set_index("variant")
    assert lat.loc["full", "cpu"] == "AMD EPYC, native bf16 (avx512_bf16)"
    assert lat.loc["bm25", "cpu"] == "AMD EPYC, AVX2 only" and pd.isna(lat.loc["bm25", "break_even"])
    publish(tmp_path, tmp_path / "out", resamples=50)
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "| AMD EPYC, AVX2 only |" in md and "| AMD EPYC, native bf16 (avx512_bf16) |" in md
    assert "not one machine's cost" in md


def test_the_table2_rows_lead_the_table_in_the_papers_order():
    """The rows `scripts/snapshot.sh table2` runs at full n come first (FineFilter right after CompSelect), the
    other variants after them."""
    script = (REPO_ROOT / "scripts" / "snapshot.sh").read_text()
    table2 = re.search(r"TABLE2=\(\n(.*?)\n\)", script, re.S).group(1).split()
    order = reference.variant_order(["edc2", "csm", "bm25_sentences_top1", *reversed(table2)])
    assert set(order[: len(table2)]) == set(table2) and order[len(table2) :] == ["bm25_sentences_top1", "csm", "edc2"]
    assert order.index("finefilter") == order.index("compselect") + 1


@pytest.mark.slow
def test_output_cut_short_by_its_reader_ends_quietly():
    """``python -m leaderboard collect ... | head``: no BrokenPipeError traceback when the reader has gone (here
    ``true``, which exits before the table is printed)."""
    import subprocess
    import sys

    cmd = f"{sys.executable} -m leaderboard collect leaderboard/runs | true; echo ${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", cmd], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "1", done.stdout  # main's exit code, not the traceback's
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


@pytest.mark.slow
def test_a_reader_block_that_read_anothers_contexts_never_takes_the_headline_by_default():
    """A second reader's block (its contexts read back from the headline's runs, ``reused_contexts`` = n) finished
    later stays beside the headline; the same block having made its own contexts would take it."""
    from leaderboard.headline import newest_block

    archived = collect(REPO_ROOT / "leaderboard" / "runs")
    is_gemma = archived.generator.str.startswith("gemma3-270m")  # the archive's own second reader
    every = archived[archived.reused_contexts.eq(0) & ~is_gemma]
    head = newest_block(every)
    gemma = archived[is_gemma]
    # its contexts read back, save the sentence budgets that count with the reader's tokenizer (computed afresh)
    computed = gemma[gemma.reused_contexts.ne(gemma.n)]
    assert len(gemma) and gemma.reused_contexts.sum() >= 0.5 * gemma.n.sum()
    assert computed.variant.str.endswith("_sentences_budget").all() and newest_block(archived) == head
    rows = every[(every.profile == head[0]) & (every.generator == head[1])]
    later = pd.Timestamp.now(tz="UTC").isoformat()
    reader = rows.assign(generator="a-second-reader", finished_at=later, reused_contexts=rows.n)
    assert newest_block(pd.concat([every, reader])) == head
    assert newest_block(pd.concat([every, reader.assign(reused_contexts=0)])) == (head[0], "a-second-reader")
    assert newest_block(reader) == (head[0], "a-second-reader")  # no other block left: the reader's
