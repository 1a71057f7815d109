"""CompSelect end to end on real NQ examples, as configured in conf/method/compselect.yaml, with the committed
embedded artifacts (extractor and truncator LoRA on SmolLM2, LoRA-tuned MiniLM reranker)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from harness.config import register_resolvers
from harness.runner import build_method
from harness.text import split_sentences
from tests.conftest import REPO


def method_config(name: str):
    register_resolvers()
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        # fp32: the vLLM engine the other model-layer tests share (one engine start per test process)
        return compose("config", overrides=[f"method={name}", "models.lm_dtype=float32"]).method


@pytest.fixture(scope="module", autouse=True)
def release_adapter_engines(request):
    """Each merged adapter is a vLLM engine of its own (weights + KV cache): stop them after this module. An
    in-process engine (a CPU's default) gives its memory back to this process's system; in vLLM's process layout
    the engine's processes end and their shared-memory segments go with them (``VLLMEngine.close``)."""
    yield
    import psutil

    from harness.lm import live, release

    adapters = [lm for lm in live() if lm.info["adapter"] is not None and lm.started and lm.engine.name == "vllm"]
    inproc = sum(lm.engine.in_process for lm in adapters)
    held = [lm.engine._shared_memory() for lm in adapters if not lm.engine.in_process]
    rss, children = psutil.Process().memory_info().rss, set(psutil.Process().children(recursive=True))
    # CompSelect's extractor and truncator, where a selected test used it (``-k`` may pick tests that do not)
    mine = [item for item in request.session.items if item.module is request.module]
    built = any("compselect" in item.fixturenames for item in mine)
    assert release(lambda lm: lm.info["adapter"] is not None) >= (2 if built else 0)
    # each engine held >= 0.5 GB of fp32 weights and touched KV cache (~1.7 GB measured for one)
    assert not inproc or rss - psutil.Process().memory_info().rss >= inproc * 2**29
    assert not set(psutil.Process().children(recursive=True)) - children  # nothing new left running
    from harness.lm.vllm_engine import SEGMENTS

    for names, pids in held:
        assert [n for n in names if n.startswith(tuple(SEGMENTS))] and pids
        assert not [n for n in names if n.startswith(tuple(SEGMENTS)) and Path(f"/dev/shm/{n}").exists()]
        procs = []
        for pid in pids:
            try:
                procs.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                continue
        _, alive = psutil.wait_procs(procs, timeout=10)  # killed: gone within moments
        assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


@pytest.fixture(scope="module")
def compselect(env):
    m = build_method(method_config("compselect"))
    m.bind(env)
    return m


@pytest.mark.slow
def test_compresses_two_real_examples(compselect, nq5):
    examples = list(nq5[:2])
    out = compselect.compress_batch(examples)
    assert len(out) == 2
    for ex, c in zip(examples, out, strict=True):
        meta = c.meta
        assert set(c.timings) == {"extract", "rerank", "truncate"} and all(t >= 0 for t in c.timings.values())
        assert sorted(map(tuple, (e["unit"] for e in meta["extracted"]))) == sorted(
            map(tuple, (r["unit"] for r in meta["ranked"]))
        )
        scores = [r["score"] for r in meta["ranked"]]
        assert scores == sorted(scores, reverse=True)
        assert meta["kept"] == [r["unit"] for r in meta["ranked"][: meta["k"]]]  # a prefix of the ranking
        # the embedded profile shows each kept clue with its neighbours under the passage title (clue_context)
        assert compselect.clue_context == "window"
        assert compselect.reranker_input == "titled"  # the reranker reads each clue under its passage title
        kept = {tuple(k) for k in meta["kept"]}
        shown = [(u.passage, u.sentence) for u in c.units]
        assert kept <= set(shown)
        assert all(any(p == q and abs(s - t) <= 1 for q, t in kept) for p, s in shown)
        passages = list(dict.fromkeys(p for p, _ in shown))
        assert len(c.documents) == len(passages)
        for doc, p in zip(c.documents, passages, strict=True):  # extractive: source sentences under the title
            sents = split_sentences(ex.passages[p].text)
            assert doc == f"{ex.passages[p].title}\n" + " ".join(sents[s] for q, s in shown if q == p)
        assert set(meta["diagnostics"]) == {"eligible", "recall1", "hit2_at1", "recall3"}
        assert "truncator_output" in meta or meta["n_clues"] == 0
        if meta["n_clues"]:  # the embedded profile's thresholded decision (truncator_decision)
            assert (meta["k"] == 0) == (meta["truncator_p_empty"] >= compselect.empty_threshold)
    info = compselect.describe()
    assert set(info["adapters"]) == {"extractor", "truncator"}
    assert all(a["sha256"] for a in info["adapters"].values()) and info["reranker"]["trained"]["lora"]
    assert info["trained_through"] == "smollm2-135m-instruct-vllm-documents_first-unlabelled"  # its labels' generator


@pytest.mark.slow
def test_empty_truncation_runs_closed_book_through_the_runner(compselect, env, generator, nq5, monkeypatch):
    """A truncator that keeps no clue (K = 0, whatever the adapter in use says) leaves an empty context; the
    runner then prompts the generator exactly as Naive does."""
    from harness.runner import process
    from methods.vanilla import Naive

    monkeypatch.setattr(
        compselect, "truncate", lambda exs, ranked: ([0] * len(ranked), [""] * len(ranked), [None] * len(ranked))
    )
    ex = nq5[1]
    (row,), _ = process([ex], compselect, generator)
    assert row["meta"]["k"] == 0 and row["units"] == [] and row["meta"]["n_clues"] > 0
    naive = Naive()
    naive.bind(env)
    (closed,), _ = process([ex], naive, generator)
    assert row["prompt_tokens"] == closed["prompt_tokens"] and row["prediction"] == closed["prediction"]
    assert row["compressed_tokens"] == 0


@pytest.mark.slow
def test_extractor_calls_replay_from_the_call_cache_with_their_measured_time(
    env, generator, nq5, tmp_path, monkeypatch
):
    """The ablations share the extractor through the model layer's call cache: a second run of the same prompt
    gives the same clues without generating, and the run still pays the seconds the extraction was measured
    at."""
    from harness.lm import cache
    from harness.runner import process

    cache.configure(True, str(tmp_path / "calls.sqlite"))
    try:
        m = build_method(method_config("compselect_no_truncator"))
        m.bind(env)
        (fresh,) = m.compress_batch([nq5[2]])
        assert "extract_cached" not in fresh.meta and fresh.timings["extract"] > 0
        engine = m.lms["extractor"].engine
        calls = []
        real = engine.generate
        monkeypatch.setattr(engine, "generate", lambda *a, **k: calls.append(a) or real(*a, **k))
        before = cache.REPLAYS.seconds
        rows, _ = process([nq5[2]], m, generator)
        replayed = cache.REPLAYS.seconds - before
    finally:
        cache.configure(None, None)
    assert calls == []  # nothing generated: the extraction came from the cache
    assert rows[0]["meta"]["extract_cached"] is True
    assert rows[0]["units"] == [[u.passage, u.sentence] for u in fresh.units]
    assert 0 < replayed <= fresh.timings["extract"] * 1.0001  # the generation inside the measured stage
    assert rows[0]["compress_s"] >= replayed and rows[0]["stages"]["extract"] >= replayed
    assert rows[0]["replayed"]["compress_calls"] == 1


@pytest.mark.slow
def test_truncator_probe_reports_predicted_against_label_k(tmp_path, generator, release_new_models):
    from research.compselect.truncator_probe import main

    labels = REPO / "methods/compselect/artifacts/embedded/labels/truncator_labels.jsonl"
    rows = labels.read_text().splitlines()[:3]
    (tmp_path / "l.jsonl").write_text("\n".join(rows) + "\n")
    adapter = str(REPO / "methods/compselect/artifacts/embedded/truncator")
    report = main([adapter, str(tmp_path / "l.jsonl"), "--dtype", "float32"])
    greedy = report["decisions"]["greedy"]
    assert report["questions"] == 3 and sum(greedy["predicted_k"].values()) == 3
    assert report["label_k"] == dict(sorted(Counter(json.loads(r)["k"] for r in rows).items()))
    assert 0 <= greedy["agree_keep_or_not"] <= 3
    swept = main([adapter, str(tmp_path / "l.jsonl"), "--dtype", "float32", "--thresholds", "1e-9,1.0"])["decisions"]
    assert swept["1e-09"]["predicted_k"] == {0: 3} and swept["1.0"]["kept_something"] == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("output, folder", [("text", "truncator"), ("index", "truncator_index")])
def test_thresholded_truncator_decision_keeps_more_as_the_threshold_rises(output, folder, release_new_models):
    """``truncator_decision`` on the committed truncators and real ranked clue lists: the probability of the
    empty set does not depend on the threshold, the empty set is chosen exactly where it reaches the threshold,
    and a kept prefix is a valid K in [1, n]."""
    from harness.lm import get_lm
    from methods.compselect.prompts import truncator_messages
    from methods.compselect.truncator import truncator_decision

    art = REPO / "methods/compselect/artifacts/embedded"
    rows = [json.loads(x) for x in (art / "labels/truncator_labels.jsonl").read_text().splitlines()[:6]]
    lm = get_lm("embedded:smollm2-135m-instruct", dtype="float32", adapter=str(art / folder))
    prompts = [truncator_messages(f"question {i}", r["ranked"]) for i, r in enumerate(rows)]
    lists = [r["ranked"] for r in rows]
    runs = {t: truncator_decision(lm, prompts, lists, output, t) for t in (1e-9, 0.5, 1.0)}
    p = [d.p_empty for d in runs[0.5]]
    assert all(0.0 < x < 1.0 for x in p)
    for t, decisions in runs.items():
        assert [d.p_empty for d in decisions] == pytest.approx(p)
        for d, n, pe in zip(decisions, (len(x) for x in lists), p, strict=True):
            assert (d.k == 0) == (pe >= t) and 0 <= d.k <= n
    assert all(d.k >= 1 for d in runs[1.0]) and all(d.k == 0 for d in runs[1e-9])


@pytest.mark.slow
def test_finefilter_truncator_outputs_an_index(env, nq5, release_new_models):
    """FineFilter's committed truncator (trained by the project's pipeline on K) answers with an integer, which
    is the number of ranked clues kept."""
    ff = build_method(method_config("finefilter"))
    ff.bind(env)
    (c,) = ff.compress_batch([nq5[1]])  # an example the extractor finds clues in
    assert c.meta["n_clues"] > 0
    out = c.meta["truncator_output"].strip()
    assert out.isdigit() and c.meta["k"] == min(int(out), c.meta["n_clues"])
    assert c.meta["kept"] == [r["unit"] for r in c.meta["ranked"][: c.meta["k"]]]
    assert ff.describe()["adapters"]["truncator"]["path"].endswith("truncator_index")
