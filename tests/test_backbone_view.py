"""The "Compressors at size" view (``leaderboard.views.backbone``, issue 94) on hand-made records: a compressor on
two backbones beside the baselines, the seeds' claimed orderings, and the switched rows kept out of every other
table. Nothing here loads a model."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from leaderboard.reference import claims, table2_variants
from leaderboard.views import backbone

SMOL = {"switch": None, "lm": "embedded:smollm2-135m-instruct", "compselect_lm": "embedded:smollm2-135m-instruct"}
QWEN = {
    "switch": "qwen25-coder-05b-instruct",
    "lm": "embedded:qwen2.5-coder-0.5b-instruct",
    "compselect_lm": "embedded:qwen2.5-coder-0.5b-instruct",
}


def test_switched_rows_and_their_own_backbone_variant():
    assert backbone.base_variant("recomp_abs", "backbone=qwen05b") == "recomp_abs"
    assert backbone.base_variant("edc2", "backbone=qwen05b,models.x=1") == "edc2[models.x=1]"
    switch = "qwen25-coder-05b-instruct"
    df = pd.DataFrame({"backbone": [None, switch, switch], "overrides": ["", "backbone=qwen05b", "generator=x"]})
    assert list(backbone.owned(df)) == [False, True, False]  # a switch the run did not name in its folder: not owned
    assert backbone.backbone_label("embedded:qwen2.5-coder-0.5b-instruct@abc") == "0.5B"
    assert backbone.backbone_label("hf:some/model") == "hf:some/model"


def test_every_claimed_baseline_is_a_row_the_board_runs():
    for method, claim in claims().items():
        assert method in table2_variants() or method == "edc2", method
        assert set(claim["above"]) <= table2_variants() | {"top1"}, (method, claim["above"])


def test_ordering_by_hand():
    row = {"method": "finefilter", "d_full": 5.0, "sig_full": True, "d_top1": 3.0, "sig_top1": True}
    assert backbone.ordering(row, "finefilter") == (backbone.HOLDS, {"full": "above", "top1": "above"})
    row |= {"d_recomp_extr": 1.0, "sig_recomp_extr": False}
    assert backbone.ordering(row, "finefilter")[0] == backbone.NOT_SHOWN
    row |= {"d_longllmlingua": -4.0, "sig_longllmlingua": True}
    assert backbone.ordering(row, "finefilter")[0] == backbone.FAILS
    assert backbone.ordering({"method": "edc2"}, "edc2") == (backbone.NOT_SHOWN, {})  # nothing compared


def test_publish_puts_each_compressor_at_both_backbones_and_tests_the_seeds_orderings(tmp_path: Path):
    from leaderboard.publish import publish
    from tests.test_leaderboard import grid, write_run

    n = 40
    res = tmp_path / "res"
    grid(res, n=n, datasets=("nq",))  # full right on 24 of 40, bm25 on 12, naive on 4
    right = lambda k: [("Paris" if i < k else "London", ["Paris"]) for i in range(n)]  # noqa: E731
    write_run(res, "bge_reranker", "nq", right(16), tokens=(100, 25))
    write_run(res, "compselect", "nq", right(30), tokens=(100, 10), backbone=SMOL)
    write_run(res, "compselect", "nq", right(36), tokens=(100, 8), backbone=QWEN, overrides="backbone=qwen05b")
    write_run(res, "edc2", "nq", right(24), tokens=(100, 100), backbone=SMOL)  # repeats full: shown as its alias
    write_run(res, "edc2", "nq", right(8), tokens=(100, 20), backbone=QWEN, overrides="backbone=qwen05b")
    timed = {"full": 1.0e-4, "compselect": 0.5, "compselect[backbone=qwen05b]": 2.0}  # compselect's, one machine
    latency_pass(res / "latency" / "latency-pass-x.jsonl", timed)
    files = publish(res, tmp_path / "out", resamples=300, min_n=10)
    out = tmp_path / "out"
    assert out / "backbone_embedded_gen-a.csv" in files
    t = pd.read_csv(out / "backbone_embedded_gen-a.csv").set_index(["method", "backbone"])
    assert list(t.index) == [("compselect", "135M"), ("compselect", "0.5B"), ("edc2", "135M"), ("edc2", "0.5B")]
    assert set(t.n) == {n} and t.loc[("compselect", "0.5B"), "subem"] == 90.0
    assert t.loc[("compselect", "0.5B"), "d_own"] == 15.0 and t.loc[("compselect", "0.5B"), "sig_own"]
    assert t.loc[("compselect", "0.5B"), "cr"] == 12.5 and t.loc[("edc2", "135M"), "d_bge_reranker"] == 20.0
    assert list(t.ordering) == [backbone.HOLDS, backbone.HOLDS, backbone.NOT_SHOWN, backbone.FAILS]
    assert t.loc[("edc2", "135M"), "d_full"] == 0.0 and t.loc[("edc2", "135M"), "subem"] == 60.0
    md = (out / "leaderboard.md").read_text()
    section = md.split("## Compressors at size")[1].split("\n## ")[0]
    assert "`compselect`'s claimed ordering holds at 135M and holds at 0.5B" in section
    assert "`edc2`'s claimed ordering not shown at 135M and fails at 0.5B" in section
    assert "| `edc2` | 0.5B | 20.0 [" in section and "fails (below full)" in section
    assert "| `compselect` | 0.5B | 90.0 [80.0, 97.5] | 12.5x | 2.00 (4.0x) |" in section  # timed in one pass
    assert t.loc[("compselect", "0.5B"), "timed_in"] == "one pass, Some CPU, AVX2 only"
    assert t.loc[("edc2", "0.5B"), "timed_in"].startswith("accuracy pass")  # no pass timed it: no ratio
    table2 = pd.read_csv(out / "table2_embedded_gen-a.csv")
    assert "compselect" in set(table2.variant)
    assert not any("backbone=" in v for v in table2.variant)  # the switched rows stay out of Table 2
    assert "compselect[backbone=qwen05b]" in set(pd.read_csv(out / "runs.csv").variant)


def latency_pass(path: Path, compress_s: dict[str, float]) -> None:
    """A latency-pass file (``tools.latency_pass``'s rows) timing ``compress_s``'s variants on NQ under gen-a."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for v, c in compress_s.items():
        row = {"pass_id": "p1", "cpu": "Some CPU, AVX2 only", "repeats": 2, "warmup": 2, "threads": 2, "n": 20}
        row |= {"profile": "embedded", "generator": "gen-a", "dataset": "nq", "variant": v, "baseline": "full"}
        row |= {"compress_s": c, "online_s": 1.0, "total_s": 1.0 + c, "compress_s_repeats": [c, c]}
        row |= {"online_s_spread": 0.0, "total_s_spread": 0.0}
        row |= {"online_s_repeats": [1.0, 1.0], "total_s_repeats": [1.0 + c, 1.0 + c], "lms": []}
        rows.append(row | {"finished_at": "2026-12-07T20:00:00+0000"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_no_switched_row_leaves_the_section_empty(tmp_path: Path):
    from leaderboard.publish import publish
    from tests.test_leaderboard import grid

    grid(tmp_path / "res", n=20, datasets=("nq",))
    publish(tmp_path / "res", tmp_path / "out", resamples=100, min_n=10)
    section = (tmp_path / "out" / "leaderboard.md").read_text().split("## Compressors at size")[1].split("\n## ")[0]
    assert "Not run yet: no row of the embedded profile with its compressors' language models switched" in section
    assert not (tmp_path / "out" / "backbone_embedded_gen-a.csv").exists()
