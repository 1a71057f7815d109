"""``python -m tools.add_row`` end to end on a tiny limit with the real embedded generator (vLLM, fp32): an in-repo
variant, and docs/adding-a-method.md's worked example kept outside the repository (its module in a temporary
folder, its YAML there on ``hydra.searchpath``). Each runs on 3 questions of one dataset, is timed beside ``full``
on 1 question x 2 repeats, is archived into a copy of the published headline block, published into a temporary
folder and compared with every Table 2 row; the page then holds its row from its own pass beside the headline
pass's rows."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from leaderboard.reference import method_map
from tests.conftest import REPO
from tests.test_docs import CONFIG, MODULE, doc_files
from tools.add_row import SAMPLE, SNAPSHOT_N, block_of, main

PROFILE, GENERATOR = block_of("full", [])  # the block a run goes to by default: the published headline block


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """A copy of the archive's block of the default generator and of its latency passes."""
    src, root = REPO / "leaderboard" / "runs", tmp_path_factory.mktemp("runs")
    assert (src / PROFILE / GENERATOR).is_dir(), "the default generator's block is not published"
    shutil.copytree(src / PROFILE / GENERATOR, root / PROFILE / GENERATOR)
    shutil.copytree(src / "latency", root / "latency")
    return root


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    """The worked example kept outside the repository: ``lead_ext.py``, ``conf/method/lead_sentences.yaml``."""
    root = tmp_path_factory.mktemp("outside")
    files = doc_files()
    (root / "lead_ext.py").write_text(files[MODULE], "utf-8")
    (root / "conf" / "method").mkdir(parents=True)
    yaml_text = files[CONFIG].replace("methods.lead_sentences.", "lead_ext.")
    (root / "conf" / "method" / "lead_sentences.yaml").write_text(yaml_text, "utf-8")
    return root


def add_row(tmp: Path, runs: Path, variant: str, dataset: str, *overrides: str) -> str:
    argv = [variant, "--limit", "3", "--datasets", dataset, "--results", str(tmp / "results"), "--runs", str(runs)]
    argv += ["--out", str(tmp / "out"), "--latency-n", "1", "--warmup", "0", "--resamples", "50"]
    assert main([*argv, "progress=false", "latency.samples=0", *overrides]) == 0
    return str(tmp / "out")


def jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def subem(dataset: str, variant: str, runs: Path) -> dict[str, float]:
    """Per question id, the SubEM of the archived run of ``variant``."""
    folder = next((runs / PROFILE / GENERATOR / dataset / variant).rglob("summary.json")).parent
    return {r["id"]: r["subem"] for r in jsonl(folder / "predictions.jsonl")}


def headline_pass(runs: Path, dataset: str) -> str:
    """The pass that timed the most variants of the block on ``dataset`` (the whole-dataset pass)."""
    rows = [r for f in (runs / "latency").glob("latency-pass-*.jsonl") for r in jsonl(f)]
    ids = Counter(r["pass_id"] for r in rows if r["dataset"] == dataset and r["generator"] == GENERATOR)
    return ids.most_common(1)[0][0]


def latency_table(md: str) -> pd.DataFrame:
    """The headline block's side-by-side latency table (the first on the page)."""
    part = md[md.index("### Latency side by side") :]
    lines = [x for x in part[: part.index("\n\n", part.index("| Method"))].splitlines() if x.startswith("|")]
    cells = [[c.strip() for c in x.strip("|").split("|")] for x in lines]
    return pd.DataFrame(cells[2:], columns=cells[0])


def check(out: Path, runs: Path, variant: str, dataset: str, printed: str) -> None:
    """The row is archived, in Table 2 with its paired test, in the latency table from its own pass, compared."""
    mine, full = subem(dataset, variant, runs), subem(dataset, "full", runs)
    assert len(mine) == 3 and set(mine) <= set(full)
    # Table 2 at its n, with the paired test against full on the questions both ran
    csv = pd.read_csv(out / "runs.csv")
    row = csv[(csv.generator == GENERATOR) & (csv.dataset == dataset) & (csv.variant == variant)].iloc[0]
    assert row.n == 3 and row.n_paired == 3
    assert row.d_subem == pytest.approx(sum(mine[i] - full[i] for i in mine) / 3 * 100)
    assert variant in set(pd.read_csv(next(out.glob(f"table2_{PROFILE}_*.csv"))).variant)
    # the latency table: its row from its own pass, against that pass's full, beside the headline pass's rows
    timed = [r for r in jsonl(runs / "latency" / f"latency-pass-add-{variant}.jsonl") if r["dataset"] == dataset]
    [new] = [r for r in timed if r["variant"] == variant]
    [ref] = [r for r in timed if r["variant"] == "full" and r["pass_id"] == new["pass_id"]]
    assert new["n"] == 1 and new["repeats"] == 2
    here = latency_table((out / "leaderboard.md").read_text())
    here = here[here.Dataset == {"nq": "NQ", "triviaqa": "TQA"}[dataset]].set_index("Method")
    assert here.loc[variant, "pass (date)"] == f"{new['pass_id']} ({new['finished_at'][:10]})"
    assert here.loc[variant, "full total s of its pass"] == f"{ref['total_s']:.3f}"
    ratio = sum(x / y for x, y in zip(new["total_s_repeats"], ref["total_s_repeats"], strict=True)) / 2
    assert here.loc[variant, "total_vs_full_ratio"].startswith(f"{ratio:.2f}×")
    old = headline_pass(runs, dataset)
    assert here.loc["full", "pass (date)"].startswith(old) and here["pass (date)"].str.startswith(old).sum() > 20
    md = (out / "leaderboard.md").read_text()
    assert new["pass_id"] in md[md.index("### Latency side by side") :].split("| Method")[0]  # named above it
    # the comparison against every Table 2 row, printed; against full, the wins and losses of the records
    for t2 in (v for vs in method_map().values() for v in vs if v != variant):
        assert re.search(rf"  vs {t2} +3 questions  W/L/T \d/\d/\d ", printed), t2
    won, lost = sum(mine[i] > full[i] for i in mine), sum(mine[i] < full[i] for i in mine)
    assert re.search(rf"  vs full +3 questions  W/L/T {won}/{lost}/{3 - won - lost} ", printed), printed


@pytest.mark.slow
@pytest.mark.vllm
def test_add_row_takes_an_in_repo_and_an_out_of_repo_method_to_a_published_row(
    tmp_path, runs, outside, monkeypatch, capsys
):
    out = add_row(tmp_path / "in", runs, "bm25_sentences_top1", "nq")
    check(Path(out), runs, "bm25_sentences_top1", "nq", capsys.readouterr().out)
    md = (Path(out) / "leaderboard.md").read_text()
    apart = md[md.index("Timed again in a newer pass") :]
    assert "| bm25_sentences_top1 | NQ | 20 × 2 |" in apart  # its whole-dataset timing, now shown apart
    monkeypatch.syspath_prepend(str(outside))
    searchpath = f"hydra.searchpath=[file://{outside / 'conf'}]"
    out = add_row(tmp_path / "out", runs, "lead_sentences", "triviaqa", searchpath)
    check(Path(out), runs, "lead_sentences", "triviaqa", capsys.readouterr().out)
    table = latency_table((Path(out) / "leaderboard.md").read_text())
    assert len(table[(table.Method == "bm25_sentences_top1") & (table.Dataset == "NQ")]) == 1  # still beside them


def test_it_runs_the_snapshots_sample():
    script = (REPO / "scripts" / "snapshot.sh").read_text()
    assert re.search(r"^limit=(\d+)$", script, re.M).group(1) == str(SNAPSHOT_N)
    assert all(o in script for o in SAMPLE)


def test_bad_input_is_one_line_before_any_model(tmp_path, capsys):
    argv = ["--results", str(tmp_path / "r"), "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit, match=r"^error: method=no_such_variant: .*method/no_such_variant"):
        main(["no_such_variant", *argv])
    with pytest.raises(SystemExit, match=r"^error: method.top_k=2: give the variant its own YAML"):
        main(["bm25", *argv, "method.top_k=2"])
    assert not (tmp_path / "r").exists() and not (tmp_path / "runs").exists()


def test_the_leaderboard_only_names_the_command(capsys):
    from leaderboard.__main__ import main as leaderboard

    assert leaderboard(["add", "lead_sentences", "--limit", "3", "hydra.searchpath=[file:///x]"]) == 2
    err = capsys.readouterr().err
    assert "never runs a model" in err and "python -m tools.add_row lead_sentences --limit 3 hydra.searchpath" in err
