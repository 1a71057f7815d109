"""The "Readers by size" and "Kept and read" views (issue 93) on the archived records of two readers (SmolLM2-135M's
headline block and Gemma-3-270M's), and their rules by hand. Nothing here loads a model."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from leaderboard import tables
from leaderboard.collect import collect, read_records
from leaderboard.page import Block, Data
from leaderboard.reference import reader_sizes
from leaderboard.views import kept, readers, size

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "leaderboard" / "runs"
HEAD = "smollm2-135m-instruct-vllm-documents_first-unlabelled"
GEMMA = "gemma3-270m-vllm-completion_k3-first_line"
PROFILE = "embedded"


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    return tables.ordered(collect([RUNS / PROFILE / HEAD, RUNS / PROFILE / GEMMA]))


# ---------------------------------------------------------------------------------------------- readers by size
def test_fate_by_hand():
    # the smallest reader: +8 [+4, +12]
    assert size.fate(8, 4, 12, 9, True) == size.HOLDS
    assert size.fate(8, 4, 12, 4, True) == size.HOLDS  # at the interval's near end: not closer to zero
    assert size.fate(8, 4, 12, 3, True) == size.SHRINKS
    assert size.fate(8, 4, 12, 3, False) == size.VANISHES
    assert size.fate(8, 4, 12, -3, False) == size.VANISHES
    assert size.fate(8, 4, 12, -3, True) == size.REVERSES
    # below full: -8 [-12, -4]
    assert size.fate(-8, -12, -4, -2, True) == size.SHRINKS
    assert size.fate(-8, -12, -4, 2, True) == size.REVERSES


def test_every_embedded_reader_config_has_a_size():
    """A new embedded generator model without a size would silently fall out of the view."""
    refs = set()
    for f in (ROOT / "conf" / "generator").glob("*.yaml"):
        model = (yaml.safe_load(f.read_text()) or {}).get("model")
        if isinstance(model, str) and model.startswith("embedded:"):
            refs.add(model)
    assert refs and refs <= set(reader_sizes()), refs - set(reader_sizes())
    assert size.params_of("embedded:gemma3-270m@a5fd3b62230a") == 268098176 and size.params_of("x@y") is None
    assert [size.short(size.params_of(r)) for r in sorted(refs)] == ["270M", "0.5B", "1.5B", "135M"]
    assert size.short(2_000_000_000) == "2.0B"  # a size no reader names: rounded


@pytest.mark.slow
def test_size_section_on_two_readers(runs, tmp_path):
    md, body, files = size.section(runs, PROFILE, HEAD, tmp_path, "x", resamples=200)
    csv, png = files
    frame = pd.read_csv(csv)
    assert png.stat().st_size > 10_000 and "<img" in body
    assert list(dict.fromkeys(frame.params)) == [134515008, 268098176]  # smallest first
    assert set(frame.n) == {200} and len(frame) == 2 * 14 * 3  # 13 Table 2 rows + top1
    # the figures are the readers view's on the same questions
    nq = readers.compare(runs, [HEAD, GEMMA], PROFILE, "nq", resamples=200)
    for r in frame[frame.dataset == "nq"].itertuples():
        assert r.subem == pytest.approx(nq.row(r.generator, r.variant).subem)
    # every fate follows the rule from the two readers' own differences and tests
    for (_, v), g in frame.groupby(["dataset", "variant"]):
        small, large = g.sort_values("params").itertuples()
        if v in ("oracle_sentences", "top1", "full") or not small.sig_subem:
            assert pd.isna(large.fate_at_largest)
            continue
        want = size.fate(small.d_subem, small.d_subem_lo, small.d_subem_hi, large.d_subem, large.sig_subem)
        assert large.fate == large.fate_at_largest == want
    # the sentence counts the CSV's fates
    fates = frame[frame.params == 268098176].fate_at_largest.value_counts()
    said = re.search(r"finds significant .*", md).group(0)
    verbs = {size.HOLDS: "hold", size.SHRINKS: "shrink", size.VANISHES: "vanish", size.REVERSES: "reverse"}
    for f, verb in verbs.items():
        assert f"{int(fates.get(f, 0))} {verb} (" in said
    assert md.count("135M vs 270M") == 1 and "hold under every reader" not in md  # two readers: no such clause


def test_tau_pairs_use_the_readers_rankings(runs):
    c = readers.compare(runs, [HEAD, GEMMA], PROFILE, "hotpotqa", resamples=200)
    pair = size.pair_taus(c, resamples=200)
    assert list(pair) == [(HEAD, GEMMA)] and pair[HEAD, GEMMA] == c.tau[GEMMA]


def test_a_reader_of_unknown_size_is_left_out(tmp_path):
    import json

    from test_leaderboard import grid

    res = tmp_path / "res"
    for gen, ref in (("gen-a", "embedded:smollm2-135m-instruct"), ("gen-b", "embedded:qwen2.5-coder-0.5b-instruct")):
        grid(res, n=40, generator=gen, datasets=("nq",))
        for s in (res / PROFILE / gen).rglob("summary.json"):
            summary = json.loads(s.read_text())
            summary["generator_info"]["model"] = {"ref": ref, "sha256": "a" * 64}
            s.write_text(json.dumps(summary))
    frame = tables.ordered(collect(res))
    gens, sizes, unsized = size.sized_readers(frame, PROFILE, "gen-a")
    assert gens == ["gen-a", "gen-b"] and sizes["gen-b"] == 494032768 and not unsized
    md, _, files = size.section(frame, PROFILE, "gen-a", tmp_path, "x", resamples=100)
    assert "0.5B: `gen-b` (Qwen2.5-Coder-0.5B-Instruct)" in md and len(files) == 2
    for s in (res / PROFILE / "gen-b").rglob("summary.json"):
        summary = json.loads(s.read_text())
        summary["generator_info"]["model"] = {"ref": "embedded:unknown-reader", "sha256": "b" * 64}
        s.write_text(json.dumps(summary))
    frame = tables.ordered(collect(res))
    assert size.sized_readers(frame, PROFILE, "gen-a") == (["gen-a"], {"gen-a": 134515008}, ["gen-b"])
    # one sized reader: no view
    assert size.section(frame, PROFILE, "gen-a", tmp_path, "y", resamples=100) == ("", "", [])


# ---------------------------------------------------------------------------------------------- kept and read
def test_the_parts_sum_to_the_difference_and_read_by_hand():
    rng = np.random.default_rng(0)
    s, k, sf, kf = (rng.integers(0, 2, (5, 50)).astype(float) for _ in range(4))
    parts = kept.split(s, k, sf, kf)
    assert parts.sum(-1) == pytest.approx(100 * (s.mean(-1) - sf.mean(-1)))
    # 4 questions: full keeps all 4 and reads 2; the row keeps 2 of them and reads both, and answers 1 lost one
    sf, kf = np.array([1.0, 1, 0, 0]), np.ones(4)
    s, k = np.array([1.0, 1, 1, 0]), np.array([1.0, 1, 0, 0])
    lost, read, without = kept.split(s, k, sf, kf)
    assert lost == pytest.approx(100 * (0.5 - 1) * 0.5)  # half the answers dropped, read at full's 50 %
    assert read == pytest.approx(100 * 0.5 * (1 - 0.5))  # the kept half read at 100 % against 50 %
    assert without == pytest.approx(100 * 0.5 * 0.5)  # one of the two lost ones answered anyway
    assert lost + read + without == pytest.approx(25)


def test_holds_is_subems_rule_on_the_context():
    recs = [
        {"id": "a", "context": "Document [1](Title: X) The Eiffel Tower is in Paris.", "answers": ["paris"]},
        {"id": "b", "context": "Nothing here.", "answers": ["Paris", "Lyon"]},
        {"id": "c", "context": "", "answers": ["Paris"]},
    ]
    assert kept.holds(recs) == {"a": True, "b": False, "c": False}
    assert kept.holds([*recs, {"id": "d", "answers": ["x"]}]) is None  # a record without its text


@pytest.mark.slow
def test_kept_section_on_the_archive(runs, tmp_path):
    data = Data(runs, *(pd.DataFrame(),) * 5, results=RUNS)
    md, body, csv = kept.section(data, Block(PROFILE, HEAD, "full", 50), tmp_path, resamples=200)
    frame = pd.read_csv(csv)
    assert set(frame.n) == {200} and set(frame.generator) == {HEAD, GEMMA}
    assert (frame.d_lost + frame.d_read + frame.d_without - frame.d_subem).abs().max() < 1e-9
    assert (frame[frame.variant == "naive"].kept == 0).all()  # no passage, no answer
    # kept is one figure per context, whichever reader read it
    assert frame.groupby(["dataset", "variant"]).kept.nunique().max() == 1
    # by hand on NQ's bm25: the archive's texts, SubEM's rule, on the shared questions
    from harness.metrics import subem
    from leaderboard import context_store

    c = kept.compare(runs, [HEAD, GEMMA], PROFILE, "nq", RUNS, resamples=50)
    folder = runs[(runs.generator == HEAD) & (runs.dataset == "nq") & (runs.variant == "bm25")].iloc[0].folder
    recs = {r["id"]: r for r in context_store.fill(read_records(folder), RUNS, "nq")}
    hit = [bool(subem(recs[q]["context"], recs[q]["answers"])) for q in c.ids]
    row = frame[(frame.dataset == "nq") & (frame.variant == "bm25") & (frame.generator == HEAD)].iloc[0]
    assert row.kept == pytest.approx(100 * np.mean(hit)) and c.n == row.n == len(c.ids)
    right = [recs[q]["subem"] for q, h in zip(c.ids, hit, strict=True) if h]
    assert row.subem_kept == pytest.approx(100 * np.mean(right))
    # rows whose contexts the archive does not hold are named, not scored
    textless = set(runs[(runs.generator == HEAD) & (runs.dataset == "nq")].variant) - set(frame.variant)
    assert textless and all(v in md for v in textless if v in c.textless)
    assert "Losing or reading." in md and "<table" in body
