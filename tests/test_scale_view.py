"""The "At the readers' scale" view (``leaderboard.views.scale``) and the recount that feeds it (``tools.recount``), on
hand-made token records: the predictions add up from the cost model's per-record figures, the CSV has its columns,
the paper's CompSelect figures stand beside ours, the CPU check is stated, and a block without recounted tokens
shows nothing."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from leaderboard import costmodel as cm
from leaderboard.views import scale

GEN, PROFILE = "gen-a", "embedded"
LM = "embedded:smollm2-135m-instruct"


def _lm(op: str, each: list[list[int]], adapter: str | None = None) -> dict:
    return {"model": LM, "adapter": adapter, "op": op, "n": len(each), "read": sum(r for r, _ in each),
            "written": sum(w for _, w in each), "calls": [len(each)], "each": each}  # fmt: skip


def _line(variant: str, dataset: str, i: int) -> dict:
    """A batch-1 record: full reads everything; compselect's extractor writes clues, the reader reads little."""
    compress: list[dict] = []
    read = 800 + 10 * i
    if variant == "compselect":
        compress = [_lm("generate", [[900 + i, 120]], "extractor"), _lm("generate", [[300, 20]], "truncator")]
        compress.append({"model": "embedded:all-minilm-l6-v2", "adapter": "reranker", "op": "forward", "n": 1,
                         "read": 6 * 40, "written": 0, "each": [[6, 40, 0]]})  # fmt: skip
        read = 150 + i
    if variant == "bm25":
        read = 250 + i
    tokens = {"compress": compress, "generate": [_lm("generate", [[read, 12]])]}
    return {"profile": PROFILE, "generator": GEN, "variant": variant, "dataset": dataset, "sample": "shuffled",
            "id": f"{dataset}-{i}", "batch": 1, "tokens": tokens}  # fmt: skip


@pytest.fixture
def results(tmp_path: Path) -> Path:
    lines = [_line(v, d, i) for d in ("nq", "hotpotqa") for v in ("full", "bm25", "compselect") for i in range(4)]
    (tmp_path / "scale").mkdir()
    with gzip.open(tmp_path / "scale" / f"tokens-{PROFILE}-{GEN}.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(x) + "\n" for x in lines)
    check = {"meta": {"device": {"cpu_name": "Test CPU"}}, "overall": {"n": 24, "median_error": 0.08,
             "largest_error": -0.25}, "rows": [{"variant": "exit", "total": {"median_error": 0.2}},
                                               {"variant": "full", "total": {"median_error": -0.05}}]}  # fmt: skip
    (tmp_path / "scale" / "cpu-check-nq.json").write_text(json.dumps(check))
    return tmp_path


def test_the_view_adds_up_from_the_cost_model_and_writes_its_csv(results: Path, tmp_path: Path):
    md, body, csv = scale.section(results, PROFILE, GEN, tmp_path / "scale_x.csv")
    assert csv is not None and "scale" in csv.name
    table = cm.DeviceTable.load("h200")
    figs = scale.row_figures(scale.read_tokens(results), table)
    lines = [_line("compselect", "nq", i) for i in range(4)]
    each = [cm.predict_record(r, "compselect", table, cm.Scenario(reader="llama3_8b")) for r in lines]
    got = figs[(figs.variant == "compselect") & (figs.dataset == "nq")].iloc[0]
    assert got.total_s_cudagraph == pytest.approx(sum(p["total_s"] for p in each) / 4)
    assert got.online_s_cudagraph == pytest.approx(sum(p["online_s"] for p in each) / 4)
    assert got.total_s_cudagraph > got.online_s_cudagraph > 0  # the extractor's 120 tokens cost time
    assert got.total_s_eager > got.total_s_cudagraph  # Hugging Face generate pays more per token
    p8 = table.params("llama3_8b")
    flops = [p["compressor_flops"] + 2 * p8 * p["reader_tokens"] for p in each]  # compute is linear in tokens
    assert got.tflops_llama3_8b == pytest.approx(sum(flops) / 4 / 1e12)
    frame = pd.read_csv(csv)
    assert {"method", "dataset", "reader", "device", "total_s", "online_s"} <= set(frame.columns)
    assert len(frame) == 2 * 3 * len(cm.READERS) * 2  # datasets x rows x readers x decode columns
    assert set(frame.reader) == set(scale.READER_NAMES.values()) and set(frame.device) == {"NVIDIA H200"}
    assert "CompSelect (paper, Sec. 5.4) | - | 2.14 | 0.21" in md  # beside our NQ row, not HotpotQA's
    assert md.count("CompSelect (paper, Sec. 5.4)") == 2  # its table row and the sentence that compares
    assert "Checked on Test CPU" in md and "+8%" in md and "`exit` (+20%)" in md
    assert "### NQ" in md and "### HQA" in md and "<table>" in body


def test_bm25_breaks_even_at_once_and_compselect_needs_a_large_enough_reader(results: Path):
    figs = scale.row_figures(scale.read_tokens(results), cm.DeviceTable.load("h200"))
    nq = figs[figs.dataset == "nq"].set_index("variant")
    assert nq.loc["bm25", "break_even_reader"] == "llama32_1b"  # no model: fewer reader tokens is all it takes
    assert pd.isna(nq.loc["full", "break_even_reader"])
    params = nq.loc["compselect", "break_even_params_b"] * 1e9  # a 3B extractor's FLOPs over the tokens it saves
    saved = nq.loc["full", "reader_tokens"] - nq.loc["compselect", "reader_tokens"]
    assert params == pytest.approx(nq.loc["compselect", "compressor_tflops"] * 1e12 / (2 * saved))
    smallest = min((r for r in cm.READERS if cm.DeviceTable.load("h200").params(r) > params),
                   key=cm.DeviceTable.load("h200").params)  # fmt: skip
    assert nq.loc["compselect", "break_even_reader"] == smallest


def test_a_block_without_recounted_tokens_shows_nothing(results: Path, tmp_path: Path):
    assert scale.section(results, PROFILE, "another-generator", tmp_path / "s.csv") == ("", "", None)
    assert scale.section(tmp_path / "nowhere", PROFILE, GEN, tmp_path / "s.csv") == ("", "", None)


def test_recount_gathers_counted_records_without_their_text(tmp_path: Path):
    from tools.recount import recount

    run = tmp_path / "r" / "embedded" / GEN / "nq" / "bm25"
    run.mkdir(parents=True)
    summary = {"method": "bm25", "dataset": "nq", "generator": GEN, "profile": PROFILE, "sample": "shuffled"}
    (run / "summary.json").write_text(json.dumps(summary))
    counted = {"id": "q1", "question": "who?", "context": "Doc1: ...", "batch": 1, "tokens": {"compress": [],
               "generate": [_lm("generate", [[100, 5]])]}, "compress_s": 0.0, "generate_s": 0.5}  # fmt: skip
    old = {"id": "q2", "question": "what?", "batch": 8, "compress_s": 0.0, "generate_s": 0.4}  # made before counting
    (run / "predictions.jsonl").write_text(json.dumps(counted) + "\n" + json.dumps(old) + "\n")
    (path,) = recount(tmp_path / "r", tmp_path / "scale")
    assert path.name == f"tokens-{PROFILE}-{GEN}.jsonl.gz"
    with gzip.open(path, "rt") as f:
        (line,) = [json.loads(x) for x in f]
    assert line["id"] == "q1" and line["variant"] == "bm25" and line["tokens"] == counted["tokens"]
    assert "question" not in line and "context" not in line


def test_recount_replaces_the_cells_it_recounts_and_keeps_the_file_s_others(tmp_path: Path):
    from tools.recount import recount

    def run(dataset: str, generate_s: float) -> Path:
        root = tmp_path / f"r-{dataset}-{generate_s}"
        folder = root / "embedded" / GEN / dataset / "bm25"
        folder.mkdir(parents=True)
        summary = {"method": "bm25", "dataset": dataset, "generator": GEN, "profile": PROFILE, "sample": "shuffled"}
        (folder / "summary.json").write_text(json.dumps(summary))
        record = {"id": "q1", "batch": 1, "tokens": _line("bm25", dataset, 1)["tokens"], "generate_s": generate_s}
        (folder / "predictions.jsonl").write_text(json.dumps(record) + "\n")
        return root

    def cells(path: Path) -> dict[str, float]:
        with gzip.open(path, "rt") as f:
            return {x["dataset"]: x["generate_s"] for x in map(json.loads, f)}

    recount(run("nq", 0.1), tmp_path / "scale")
    recount(run("hotpotqa", 0.2), tmp_path / "scale")  # another dataset: nq's lines stay
    (path,) = recount(run("nq", 0.3), tmp_path / "scale")  # nq again: its old line goes
    assert cells(path) == {"nq": 0.3, "hotpotqa": 0.2}
    (path,) = recount(run("nq", 0.4), tmp_path / "scale", fresh=True)
    assert cells(path) == {"nq": 0.4}


def test_recount_takes_a_latency_pass_s_first_repeat_once_per_question(tmp_path: Path):
    from tools.recount import recount

    passes = tmp_path / "latency-pass-x.jsonl"
    rows = [{"variant": v, "dataset": "nq", "profile": PROFILE, "generator": GEN, "sample": "shuffled seed 0",
             "pass_id": "p1"} for v in ("full", "bm25")]  # fmt: skip
    passes.write_text("".join(json.dumps(r) + "\n" for r in rows))
    timed = [{"variant": v, "dataset": "nq", "id": f"q{i}", "repeat": k, "tokens": _line(v, "nq", i)["tokens"],
              "compress_s": 0.0, "generate_s": 0.3}
             for v in ("full", "bm25") for k in (0, 1) for i in range(3)]  # fmt: skip
    records = tmp_path / "latency-records-x.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in timed))
    (path,) = recount(None, tmp_path / "scale", latency=[(records, passes), (records, passes)])
    with gzip.open(path, "rt") as f:
        lines = [json.loads(x) for x in f]
    assert len(lines) == 2 * 3 and {x["from"] for x in lines} == {"latency pass p1"}  # one repeat, no double
    assert all(x["batch"] == 1 and x["generator"] == GEN for x in lines)


def test_rows_and_datasets_keep_the_papers_order_whatever_the_file_order(results: Path):
    path = next((results / "scale").glob("tokens-*.jsonl.gz"))
    with gzip.open(path, "rt") as f:
        lines = f.read().splitlines()
    with gzip.open(path, "wt") as f:  # as tools.recount writes them: by folder path, HotpotQA and bm25 first
        f.writelines(x + "\n" for x in reversed(lines))
    figs = scale.row_figures(scale.read_tokens(results), cm.DeviceTable.load("h200"))
    assert list(dict.fromkeys(figs.dataset)) == ["nq", "hotpotqa"]
    assert list(figs[figs.dataset == "nq"].variant) == ["full", "bm25", "compselect"]
