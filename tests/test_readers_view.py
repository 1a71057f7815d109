"""The "Across readers" view (``leaderboard.views.readers``) on the archived records: the two SmolLM2 blocks of the same
13 Table 2 rows (the headline's prompt and the archived paper prompt) stand in for two readers; as blocks of one
model they are never published as readers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from leaderboard import publish, tables
from leaderboard.collect import collect, read_records
from leaderboard.reference import table2_variants
from leaderboard.views import readers

RUNS = Path(__file__).resolve().parents[1] / "leaderboard" / "runs" / "embedded"
HEAD = "smollm2-135m-instruct-vllm-documents_first-unlabelled"  # n = 800 / 400 / 400
PAPER = "smollm2-135m-instruct-vllm"  # the archived paper-prompt block, the shuffled 200
PROFILE = "embedded"


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    df = collect([RUNS / HEAD, RUNS / PAPER])
    return df[df.variant.isin(table2_variants())].reset_index(drop=True)


@pytest.fixture(scope="module")
def nq(runs) -> readers.Readers:
    c = readers.compare(runs, [HEAD, PAPER], PROFILE, "nq")
    assert c is not None
    return c


def test_tau_b_by_hand():
    # 4 rows: pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3); y swaps rows 1 and 2: 5 concordant, 1 discordant
    assert readers.tau_b(np.array([1.0, 2, 3, 4]), np.array([1.0, 3, 2, 4])) == pytest.approx(4 / 6)
    # ties: x ties (0,1), y ties (1,2); concordant (0,2) (0,3) (1,3) (2,3), none discordant: 4 / sqrt(5 * 5)
    assert readers.tau_b(np.array([1.0, 1, 2, 3]), np.array([1.0, 2, 2, 3])) == pytest.approx(0.8)
    assert readers.tau_b(np.array([1.0, 2, 3]), np.array([3.0, 2, 1])) == pytest.approx(-1)
    assert np.isnan(readers.tau_b(np.array([2.0, 2, 2]), np.array([1.0, 2, 3])))
    batch = readers.tau_b(np.array([[1.0, 2, 3, 4], [1, 1, 2, 3]]), np.array([[1.0, 3, 2, 4], [1, 2, 2, 3]]))
    assert batch == pytest.approx([4 / 6, 0.8])


@pytest.mark.slow
def test_tau_b_is_scipys_on_the_real_rows(nq):
    kendalltau = pytest.importorskip("scipy.stats").kendalltau
    rows = [v for v in set(nq.rows.variant) if v != readers.ORACLE]
    a = [nq.row(HEAD, v).subem for v in rows]
    b = [nq.row(PAPER, v).subem for v in rows]
    assert readers.tau_b(np.array(a), np.array(b)) == pytest.approx(kendalltau(a, b).statistic)
    assert nq.tau[PAPER].tau == pytest.approx(kendalltau(a, b).statistic)
    assert nq.tau[PAPER].rows == len(rows) == 12


def test_tau_interval_resamples_questions():
    # 3 rows x 4 questions; one resample by hand with the generator tau_interval seeds
    a = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=float)
    b = np.array([[0, 0, 0, 1], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=float)
    idx = np.random.default_rng(0).integers(0, 4, size=(1, 4))[0]
    assert idx.tolist() == [3, 2, 2, 1]
    # resampled SubEMs: a (0, 1/4, 3/4), b (1/4, 1/4, 1): pairs (0,1) tied in b, (0,2) and (1,2) concordant
    t = readers.tau_interval(a, b, resamples=1, seed=0)
    assert t.tau == pytest.approx(1.0)  # unresampled: a (1/4, 1/2, 3/4), b (1/4, 1/2, 1)
    assert t.lo == pytest.approx(2 / np.sqrt(3 * 2)) and t.hi == pytest.approx(2 / np.sqrt(6))
    assert np.isnan(readers.tau_interval(a, b, resamples=1, seed=3).lo)  # every row tied: no interval
    wide = readers.tau_interval(a, b, resamples=500, seed=0)
    assert -1 <= wide.lo <= wide.hi <= 1 and wide.lo < 1


def test_rows_are_paired_on_shared_ids(runs, nq):
    head_full = runs[(runs.generator == HEAD) & (runs.dataset == "nq") & (runs.variant == "full")].iloc[0]
    paper_full = runs[(runs.generator == PAPER) & (runs.dataset == "nq") & (runs.variant == "full")].iloc[0]
    assert (head_full.n, paper_full.n) == (800, 200)
    ids = {r["id"] for r in read_records(paper_full.folder, 200)}
    assert nq.n == len(ids) == 200
    # compselect of the 800-question block, re-scored on the 200 ids by hand
    cs = runs[(runs.generator == HEAD) & (runs.dataset == "nq") & (runs.variant == "compselect")].iloc[0]
    recs = [r for r in read_records(cs.folder, 800) if r["id"] in ids]
    assert nq.row(HEAD, "compselect").subem == pytest.approx(100 * np.mean([r["subem"] for r in recs]))
    assert nq.row(HEAD, "compselect").n == nq.row(HEAD, "compselect").n_paired == 200


def _reversed_copy(runs: pd.DataFrame, tmp: Path) -> Path:
    """The paper block's NQ rows copied with their records in reverse order (same records, other positions)."""
    for r in runs[(runs.generator == PAPER) & (runs.dataset == "nq")].itertuples():
        dst = tmp / Path(r.folder).relative_to(RUNS)
        shutil.copytree(r.folder, dst)
        lines = (dst / "predictions.jsonl").read_text().splitlines()
        (dst / "predictions.jsonl").write_text("\n".join(reversed(lines)) + "\n")
    return tmp / PAPER


@pytest.mark.slow
def test_pairing_is_by_id_not_position(runs, nq, tmp_path):
    moved = collect([RUNS / HEAD, _reversed_copy(runs, tmp_path)])
    c = readers.compare(moved[moved.variant.isin(table2_variants())], [HEAD, PAPER], PROFILE, "nq")
    assert c.n == nq.n and c.tau[PAPER] == nq.tau[PAPER] and c.marks == nq.marks
    for v in set(nq.rows.variant):
        assert c.row(PAPER, v).d_subem == pytest.approx(nq.row(PAPER, v).d_subem, nan_ok=True)


def test_verdict_marks():
    assert readers.verdict([3.0, 2.0], [True, True]) == readers.HOLDS
    assert readers.verdict([-3.0, -2.0], [True, True]) == readers.HOLDS
    assert readers.verdict([3.0, 2.0], [True, False]) == readers.SIGN_ONLY
    assert readers.verdict([3.0, -2.0], [True, True]) == readers.REVERSES
    assert readers.verdict([3.0, -2.0], [True, False]) == readers.DIFFERS
    assert readers.verdict([0.0, 2.0], [False, True]) == readers.DIFFERS
    assert readers.verdict([0.0, 0.0], [False, False]) == readers.SIGN_ONLY


def test_marks_follow_each_readers_paired_test(nq):
    assert set(nq.marks) == set(nq.rows.variant) - {"full"}
    for v, mark in nq.marks.items():
        d = [nq.row(g, v).d_subem for g in nq.gens]
        sig = [bool(nq.row(g, v).sig_subem) for g in nq.gens]
        same = len({np.sign(x) for x in d}) == 1
        flipped = readers.REVERSES if all(sig) and 0 not in {np.sign(x) for x in d} else readers.DIFFERS
        assert mark == (readers.HOLDS if same and all(sig) else readers.SIGN_ONLY if same else flipped)
    assert {readers.HOLDS, readers.SIGN_ONLY, readers.DIFFERS} <= set(nq.marks.values())


def test_blocks_of_one_model_are_not_readers(runs, tmp_path):
    assert readers.reader_blocks(runs, PROFILE, HEAD) == [HEAD]
    from leaderboard.page import Block, Data, Page

    page = Page(tmp_path)
    data = Data(runs, *(pd.DataFrame() for _ in range(5)))
    readers.VIEW.render(page, data, Block(PROFILE, HEAD, "full", 50))
    assert not page.md and not page.parts and not list(tmp_path.iterdir())
    # the same records labelled as read by another model: now a second reader
    other = runs.assign(generator_model=runs.generator_model.where(runs.generator == HEAD, "embedded:other@0"))
    assert readers.reader_blocks(other, PROFILE, HEAD) == [HEAD, PAPER]


def test_one_block_per_other_model(runs):
    # the transformers block as another model's: of the two blocks of "the other" model, the one with more questions
    alone = "smollm2-135m-instruct"
    more = collect(RUNS / alone)
    three = pd.concat([runs, more[more.variant.isin(table2_variants())]], ignore_index=True)
    three = three.assign(generator_model=three.generator_model.where(three.generator != alone, "embedded:other@0"))
    assert readers.reader_blocks(three, PROFILE, alone) == [alone, HEAD]
    assert readers.reader_blocks(three, PROFILE, PAPER) == [PAPER, alone]


@pytest.mark.slow
def test_section_on_two_blocks(runs, tmp_path):
    csv = tmp_path / "readers.csv"
    md, body, written = readers.section(runs, [HEAD, PAPER], PROFILE, "full", csv)
    frame = pd.read_csv(written)
    assert len(frame) == 2 * 13 * 3 and set(frame.dataset) == {"nq", "triviaqa", "hotpotqa"}
    assert set(frame.n) == {200}
    for ds in ("NQ", "TQA", "HQA"):
        assert f"### {ds} (n = 200)" in md
    assert md.count("Kendall's τ-b") == 3 and "Figure 1" in md and "<table" in body
    # the sentences count the verdicts in the table
    sig = frame[(frame.reader == 1) & frame.sig_subem.eq(True) & (frame.variant != readers.ORACLE)]
    held = sig[sig.verdict_across_readers == readers.HOLDS]
    assert f"Of the {len(sig)} differences" in md and f"{len(held)} hold under reader 2," in md
    print(
        json.dumps(
            {
                d: g.iloc[0][["tau_vs_reader1", "tau_lo", "tau_hi"]].tolist()
                for d, g in frame[frame.reader == 2].groupby("dataset")
            }
        )
    )
    up = frame[(frame.reader == 1) & frame.sig_subem.eq(True) & (frame.d_subem > 0) & (frame.variant != readers.ORACLE)]
    per = [f"{len(g)} on {tables.label(d)}" for d, g in up.groupby("dataset", sort=False)]
    assert f"Non-oracle rows significantly above `full`: {readers._join(per, 'none')} under reader 1;" in md


@pytest.mark.slow
def test_publish_fills_the_section_once_another_model_reads(tmp_path):
    """End to end through ``publish`` on two small blocks of the same answers: empty while both read with one
    model, filled (Markdown, HTML, CSV) once one block's summaries name another model."""
    from test_leaderboard import grid

    res = tmp_path / "res"
    grid(res, n=40, generator="gen-a")
    grid(res, n=40, generator="gen-b")
    files = publish.publish(res, tmp_path / "one", resamples=200, headline="embedded/gen-a")
    md = (tmp_path / "one" / "leaderboard.md").read_text()
    assert "One reader so far" in md and not any(f.name.startswith("readers_") for f in files)
    for s in (res / "embedded" / "gen-b").rglob("summary.json"):
        summary = json.loads(s.read_text())
        summary["generator_info"]["model"] = {"ref": "embedded:another-reader", "sha256": "a" * 64}
        s.write_text(json.dumps(summary))
    files = publish.publish(res, tmp_path / "two", resamples=200, headline="embedded/gen-a")
    md = (tmp_path / "two" / "leaderboard.md").read_text()
    section = md[md.index("## Across readers") : md.index("## When retrieval fails")]
    assert "One reader so far" not in section and "reader 2: `gen-b` (embedded:another-reader@aaaaaaaaaaaa)" in section
    assert "### NQ (n = 40)" in section and "### TQA (n = 40)" in section and "Figure 1" in section
    # the same answers under both readers: the 3 non-oracle rows rank alike on every resample
    assert section.count("reader 2 against SmolLM2-135M-Instruct: 1.00 [1.00, 1.00]") == 2  # a known model: its label
    page = (tmp_path / "two" / "index.html").read_text()
    assert page.index('id="readers"') < page.index("reader 2 against SmolLM2") < page.index('id="retrieval"')
    csv = tmp_path / "two" / "readers_embedded_gen-a.csv"
    assert csv in files and len(pd.read_csv(csv)) == 2 * 4 * 2


@pytest.mark.slow
def test_a_readers_validation_note_stands_beside_its_block(runs, tmp_path, monkeypatch):
    """``leaderboard/data/readers.yaml`` is keyed by the generator names the configs give; a note is said in the
    section's legend beside its reader."""
    from hydra import compose, initialize_config_dir

    from harness.config import register_resolvers
    from leaderboard import reference

    register_resolvers()
    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        gemma = compose("config", overrides=["generator=gemma3_270m_vllm"]).generator.name
    assert set(reference.reader_notes()) == {gemma} and "p = 0.058" in reference.reader_notes()[gemma]
    monkeypatch.setattr(readers, "reader_notes", lambda: {PAPER: "a note on reader 2"})
    md, _, _ = readers.section(runs, [HEAD, PAPER], PROFILE, "full", tmp_path / "r.csv")
    assert f"reader 2: `{PAPER}` (" in md and "; a note on reader 2)" in md


def test_top1_stands_in_figure1_but_in_no_ranking_or_verdict(tmp_path):
    """The retriever's Top-1 document joins CompSelect's Figure 1 per reader (issue 84) where every reader ran it;
    it is a control row, so it enters neither the side-by-side rows, the verdicts nor Kendall's tau."""
    from test_leaderboard import grid, write_run

    res = tmp_path / "res"
    for gen in ("gen-a", "gen-b"):
        grid(res, n=40, generator=gen, datasets=("nq",))
    frame = tables.ordered(collect(res))
    before = readers.compare_all(frame, ["gen-a", "gen-b"], "embedded")
    for gen, right in (("gen-a", 20), ("gen-b", 12)):
        write_run(res, "top1", "nq", [("Paris" if i < right else "Rome", ["Paris"]) for i in range(40)], generator=gen)
    after = readers.compare_all(tables.ordered(collect(res)), ["gen-a", "gen-b"], "embedded")
    cols, rows = readers.figure1(after)
    assert [m for _, m in cols][1:4] == ["top1", "full", "oracle_sentences"]
    assert [r[1:4] for r in rows] == [["50.0", "60.0", "90.0"], ["30.0", "60.0", "90.0"]]
    assert "top1" not in after[0].marks and "top1" not in [r[0] for r in readers.side_by_side(after[0])[1]]
    assert [t.tau for t in after[0].tau.values()] == [t.tau for t in before[0].tau.values()]
    assert readers.figure1(before)[0][1][1] == "full"  # without top1 under every reader: the figure as it was


def test_a_reader_that_has_not_read_a_dataset_leaves_the_others_comparison_of_it(tmp_path):
    """A third reader that has read NQ only (a pass still under way): NQ compares three readers, TriviaQA the two
    that read it, each reader keeping its number everywhere; its cells elsewhere are '-'."""
    from test_leaderboard import grid

    res = tmp_path / "res"
    for gen, ds in (("gen-a", ("nq", "triviaqa")), ("gen-b", ("nq", "triviaqa")), ("gen-c", ("nq",))):
        grid(res, n=40, generator=gen, datasets=ds)
        for s in (res / "embedded" / gen).rglob("summary.json"):
            summary = json.loads(s.read_text())
            summary["generator_info"]["model"] = {"ref": f"embedded:{gen}", "sha256": "a" * 64}
            s.write_text(json.dumps(summary))
    frame = tables.ordered(collect(res))
    cs = readers.compare_all(frame, ["gen-a", "gen-b", "gen-c"], "embedded", resamples=50)
    assert [(c.dataset, c.gens) for c in cs] == [("nq", ["gen-a", "gen-b", "gen-c"]), ("triviaqa", ["gen-a", "gen-b"])]
    assert cs[1].name("gen-b") == "reader 2" and cs[1].everyone == ["gen-a", "gen-b", "gen-c"]
    _, rows = readers.figure1(cs)
    assert rows[2][0] == "reader 3" and rows[2][-3:] == ["-", "-", "-"] and "-" not in rows[2][1:4]
    assert set(readers.frame(cs, {}).query("dataset == 'triviaqa'").reader) == {1, 2}


def test_a_reader_part_way_through_its_pass_waits_instead_of_cutting_the_comparison():
    """A reader that has read 2 of a dataset's 4 Table 2 rows joins (half: ``COVER``); one that has read 1 waits, named
    with how far it is, so that the others' comparison keeps every row."""
    from leaderboard.views.readers import _far_enough

    rows = [("a", v) for v in ("naive", "full", "bm25", "exit")] + [("b", "naive"), ("b", "full"), ("c", "full")]
    full = pd.DataFrame([{"profile": "p", "dataset": "nq", "generator": g, "variant": v} for g, v in rows])
    assert _far_enough(full, ["a", "b", "c"], "p", "nq") == (["a", "b"], {"c": "1 of 4 rows"})
    assert _far_enough(full, ["a"], "p", "triviaqa") == (["a"], {})  # nothing read there: nobody left out
