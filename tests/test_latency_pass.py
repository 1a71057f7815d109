"""``python -m tools.latency_pass`` on a tiny slice with the real embedded generator (vLLM, fp32): two variants,
two NQ questions, two repeats; then the leaderboard reads its file and compares within the pass."""

from __future__ import annotations

import json

import pytest

from harness.lm import hardware
from leaderboard import passes
from tools.latency_pass import main


@pytest.mark.slow
@pytest.mark.vllm
def test_latency_pass_times_variants_side_by_side_and_the_leaderboard_compares_them_within_it(tmp_path, capsys):
    out = tmp_path / "latency" / "latency-pass-test.jsonl"
    argv = ["--variants", "bm25", "--datasets", "nq", "--n", "2", "--repeats", "2", "--warmup", "1", "--out", str(out)]
    assert main(argv) == 0
    assert str(out) in capsys.readouterr().out
    rows = {r["variant"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(rows) == {"full", "bm25"}  # full is always timed, the reference
    full, bm25 = rows["full"], rows["bm25"]
    assert full["pass_id"] == bm25["pass_id"] and full["cpu"] == bm25["cpu"] == hardware.cpu_label()
    assert ("native bf16" in full["cpu"]) == hardware.native_bf16() and full["threads"] == hardware.thread_count()
    assert full["generator"] == "smollm2-135m-instruct-vllm-documents_first-unlabelled"  # the embedded default
    assert full["sample"] == "shuffled seed 0"
    for r in (full, bm25):
        assert r["n"] == 2 and r["repeats"] == 2 and len(r["total_s_repeats"]) == 2
        assert all(t > 0 for t in r["online_s_repeats"])
        assert r["total_s"] == pytest.approx(sum(r["total_s_repeats"]) / 2)
        assert r["total_s_spread"] == pytest.approx(max(r["total_s_repeats"]) - min(r["total_s_repeats"]))
        assert r["lms"] == [  # BM25 runs no LM of its own
            {"role": "generator", "ref": "embedded:smollm2-135m-instruct", "engine": "vllm", "dtype": "float32"}
        ]
    assert full["compress_s"] < 0.01 and bm25["compress_s"] > 0  # the BM25 ranking is timed
    per_repeat = [b / f for b, f in zip(bm25["total_s_repeats"], full["total_s_repeats"], strict=True)]
    assert bm25["total_vs_full_ratio"] == pytest.approx(sum(per_repeat) / 2)
    # the leaderboard recomputes the same figures from the file, within the pass
    df = passes.compare(passes.read_passes(tmp_path)).set_index("variant")
    assert df.compared.all()
    assert df.loc["bm25", "total_vs_full_ratio"] == pytest.approx(bm25["total_vs_full_ratio"])
    assert df.loc["bm25", "online_vs_full_ratio"] == pytest.approx(bm25["online_vs_full_ratio"])


@pytest.mark.slow
def test_the_default_variants_are_every_published_variant_of_the_generator(monkeypatch):
    """The generator's own block; for a generator with none published yet (a new prompt, before its snapshot is
    published), the newest block's variants, whichever block that is. The archive is read once (each call
    would read it again; none changes what it reads)."""
    import functools

    from harness.provenance import REPO_ROOT
    from leaderboard import collect as collecting
    from leaderboard.headline import newest_block
    from tools.latency_pass import published_variants

    collect = functools.cache(collecting.collect)
    monkeypatch.setattr(collecting, "collect", collect)

    runs = REPO_ROOT / "leaderboard" / "runs"
    vllm, block = published_variants(runs, "embedded", "smollm2-135m-instruct-vllm")
    old, old_block = published_variants(runs, "embedded", "smollm2-135m-instruct")  # the archived block
    assert block == "smollm2-135m-instruct-vllm" and old_block == "smollm2-135m-instruct"
    assert vllm[:2] == ["naive", "full"] and "bge_reranker_v2_m3" in vllm and "bge_reranker_v2_m3" not in old
    df = collect(runs)
    newest = newest_block(df[df.profile == "embedded"])[1]
    assert published_variants(runs, "embedded", "no-such-generator") == published_variants(runs, "embedded", newest)
    assert newest in {"smollm2-135m-instruct-vllm", "smollm2-135m-instruct-vllm-documents_first-unlabelled"}
    assert published_variants(runs, "paper", "no-such-generator") == ([], "no-such-generator")


def test_a_variants_lms_are_read_from_its_describe_tree():
    """On the archived refiner run of the Xeon (its own LM calls in bf16 there, models.lm_dtype: auto)."""
    from harness.provenance import REPO_ROOT
    from tools.latency_pass import lm_entries

    [f] = (REPO_ROOT / "leaderboard" / "runs" / "embedded" / "smollm2-135m-instruct-vllm" / "nq" / "refiner").rglob(
        "summary.json"
    )
    info = json.loads(f.read_text())["method_info"]
    assert lm_entries(info, "method") == [
        {"role": "method", "ref": "embedded:smollm2-135m-instruct", "engine": "vllm", "dtype": info["lm"]["dtype"]}
    ]
    assert lm_entries({"model": {"ref": "x"}}, "method") == []


def test_a_variant_with_its_own_overrides_is_timed_with_them():
    """``recomp_abs[backbone=qwen05b]`` (the leaderboard's name of a switched-backbone row) composes with the
    0.5B as the compressors' LM, so one pass times both backbones; commas inside brackets do not split variants."""
    from harness.config import compose_config
    from tools.latency_pass import SAMPLE, split_variants, variant_overrides

    assert split_variants("full,edc2[backbone=qwen05b,x=1],bm25") == ["full", "edc2[backbone=qwen05b,x=1]", "bm25"]
    assert variant_overrides("edc2[backbone=qwen05b,x=1]") == ("edc2", ["backbone=qwen05b", "x=1"])
    assert variant_overrides("bm25") == ("bm25", [])
    method, own = variant_overrides("recomp_abs[backbone=qwen05b]")
    cfg = compose_config(overrides=[f"method={method}", "dataset=nq", *SAMPLE, *own])
    plain = compose_config(overrides=[f"method={method}", "dataset=nq", *SAMPLE])
    assert cfg.models.lm == "embedded:qwen2.5-coder-0.5b-instruct" != plain.models.lm
    assert cfg.generator.model == plain.generator.model  # the reader stays the generator's
