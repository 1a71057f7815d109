"""The metric regression check: its comparison on hand-made records, and one real small grid run of the
embedded generator (update; an unchanged rerun passes; a baseline claiming better answers fails)."""

from __future__ import annotations

import json

import pytest
import yaml

from harness.lm.hardware import cpu_label
from harness.metrics import score
from tools import regress


def records(preds: list[str], gold: str = "Paris", tokens: int = 50) -> list[dict]:
    return [
        {
            "id": f"q{i}",
            "question": f"question {i}",
            "answers": [gold],
            "prediction": p,
            "original_tokens": 100,
            "compressed_tokens": tokens,
            "context_sha1": "c0",
            **score(p, [gold]),
        }
        for i, p in enumerate(preds)
    ]


def test_nothing_changed_passes_with_a_zero_width_interval():
    base = records(["Paris"] * 10 + ["Rome"] * 20)
    rep = regress.compare({"nq__full": base}, {"nq__full": [dict(r) for r in base]})
    assert not rep.failed and rep.changed == 0
    assert all((t.delta, t.lo, t.hi) == (0, 0, 0) for t in rep.cells[0].tests)
    assert "PASS" in regress.format_report(rep)


def test_a_drop_beyond_the_bootstrap_interval_fails_and_names_the_examples():
    base = records(["Paris"] * 12 + ["Rome"] * 18)
    now = records(["It is Rome"] * 6 + ["Paris"] * 6 + ["Rome"] * 18)  # 6 of 30 lost
    rep = regress.compare({"nq__full": base}, {"nq__full": now})
    cell = rep.cells[0]
    sub = next(t for t in cell.tests if t.metric == "subem")
    assert rep.failed and cell.failed and sub.failed
    assert (sub.base, sub.now, sub.delta) == (40.0, 20.0, -20.0) and sub.hi < 0
    assert [c["id"] for c in cell.changed] == [f"q{i}" for i in range(6)]
    text = regress.format_report(rep)
    assert "REGRESSION" in text and "FAIL nq__full: subem 40.00 -> 20.00" in text
    assert "q3: 'question 3'" in text and "was: 'Paris'" in text and "now: 'It is Rome'" in text


def test_changes_within_the_interval_are_reported_but_pass_unless_strict():
    base = records(["Paris"] * 12 + ["Rome"] * 18)
    now = records(["Rome"] + ["Paris"] * 11 + ["Paris"] + ["Rome"] * 17)  # one lost, one gained
    rep = regress.compare({"nq__bm25": base}, {"nq__bm25": now})
    assert not rep.failed and rep.changed == 2
    assert "2 of 30 examples changed (1 worse, 1 better" in regress.format_report(rep)
    assert regress.compare({"nq__bm25": base}, {"nq__bm25": now}, strict=True).failed


def test_a_changed_context_is_reported_and_missing_examples_fail():
    base = records(["Paris"] * 4, tokens=50)
    now = records(["Paris"] * 3, tokens=40)
    rep = regress.compare({"tqa__x": base}, {"tqa__x": now})
    assert rep.cells[0].missing == ["q3"] and rep.failed
    assert rep.cells[0].context_changes == 3 and rep.cells[0].cr == (2.0, 2.5)
    assert "50 -> 40 tokens" in regress.format_report(rep)


def test_pooling_over_datasets_catches_a_drop_no_single_cell_shows():
    base, now = {}, {}
    for ds in ("nq", "triviaqa", "hotpotqa"):
        base[f"{ds}__full"] = records(["Paris"] * 15 + ["Rome"] * 15)
        now[f"{ds}__full"] = records(["Rome"] * 3 + ["Paris"] * 12 + ["Rome"] * 15)  # 3 of 30 lost each
    rep = regress.compare(base, now)
    assert not any(c.failed for c in rep.cells)
    assert rep.pooled[0].name == "full (all datasets)" and rep.pooled[0].failed and rep.failed


@pytest.mark.slow
def test_real_small_grid_update_then_rerun_passes_and_a_better_baseline_fails(tmp_path, capsys):
    grid = {
        "methods": ["naive", "bm25"],
        "datasets": ["nq"],
        "limit": 3,
        "overrides": ["batch_size=4", "generator.threads=1"],
    }
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(grid))
    args = ["--grid", str(tmp_path / "grid.yaml"), "--baseline", str(tmp_path / "base")]
    assert regress.main([*args, "--update", "--out", str(tmp_path / "run1")]) == 0
    rows = [json.loads(x) for x in (tmp_path / "base" / "nq__bm25.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and rows[0]["id"] == "nq-open-test-0000" and rows[0]["compressed_tokens"] > 0
    summary = json.loads((tmp_path / "base" / "summary.json").read_text())
    assert set(summary["cells"]) == {"nq__naive", "nq__bm25"} and summary["grid"]["limit"] == 3
    assert summary["cpu"] == regress.baseline_cpu(tmp_path / "base") == cpu_label()  # e.g. "AMD EPYC, AVX2 only"

    assert regress.main([*args, "--out", str(tmp_path / "run2")]) == 0  # greedy: the same answers again
    out = capsys.readouterr().out
    assert "PASS" in out and f"baseline made on: {cpu_label()}; this run on: {cpu_label()}" in out

    # a partial update rewrites its own cells and keeps the others of the grid, files and summaries
    naive_before = (tmp_path / "base" / "nq__naive.jsonl").read_text()
    assert regress.main([*args, "--update", "--methods", "bm25", "--out", str(tmp_path / "run3")]) == 0
    summary = json.loads((tmp_path / "base" / "summary.json").read_text())
    assert set(summary["cells"]) == {"nq__naive", "nq__bm25"} and summary["updated_cells"] == ["nq__bm25"]
    assert (tmp_path / "base" / "nq__naive.jsonl").read_text() == naive_before

    # a baseline claiming the gold answer everywhere: every example that differs is listed, and the drop fails
    current = regress.read_baseline(tmp_path / "base", ["nq__naive", "nq__bm25"])
    better = {
        k: [{**r, "prediction": r["answers"][0], **score(r["answers"][0], r["answers"])} for r in v]
        for k, v in current.items()
    }
    rep = regress.compare(better, current)
    bm25 = next(c for c in rep.cells if c.name == "nq__bm25")
    assert [c["id"] for c in bm25.changed] == [
        r["id"] for r in current["nq__bm25"] if r["prediction"] != r["answers"][0]
    ]
    assert next(t for t in bm25.tests if t.metric == "em").delta < 0 and rep.failed
    # and the command itself exits 1 with a readable FAIL report against that baseline
    for name, rows in better.items():
        (tmp_path / "base" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    capsys.readouterr()
    assert regress.main([*args, "--out", str(tmp_path / "run4")]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "nq__bm25" in out


def test_the_core_never_imports_the_leaderboard():
    """harness/ (the regression check included) takes its statistics from harness.stats, not leaderboard."""
    import ast
    from pathlib import Path

    import harness

    offenders = []
    for path in Path(harness.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "leaderboard"]
    assert not offenders, offenders


def test_leaderboard_stats_re_exports_the_core_statistics():
    from harness import stats as core
    from leaderboard import stats as lb

    assert lb.bootstrap_ci is core.bootstrap_ci and lb.paired_bootstrap is core.paired_bootstrap
    t = core.paired_bootstrap([1, 1, 1, 0], [0, 0, 0, 0], resamples=200, seed=0)
    assert t.n == 4 and t.delta == 75.0 and t.lo >= 0 and t.hi == 100.0
