"""The cost model (``leaderboard.costmodel``) on a device table measured here: tiny random transformers models timed
with torch on the CPU, in the layout of ``leaderboard/data/devices/h200.json``; then the H200 table itself."""

from __future__ import annotations

import json
import re
import statistics
import time
from itertools import pairwise
from typing import Any

import pytest

from leaderboard import costmodel as cm
from tests.conftest import REPO

TINY_LLAMA = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 512}  # fmt: skip
TINY_BERT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "vocab_size": 1000, "max_position_embeddings": 512, "type_vocab_size": 2}  # fmt: skip
WIDE = {"kind": "decoder", **TINY_LLAMA, "hidden_size": 128, "intermediate_size": 256}  # scaled, never measured
PREFILL_N, DECODE_L, ENCODER_BT = (16, 32, 64), (16, 32, 64), ((2, 16), (4, 32))
RUNS = 5


def timed(fn: Any) -> dict[str, float]:
    """The measure_kernels.py figure: the median of a few runs after a warm-up."""
    fn()
    runs = []
    for _ in range(RUNS):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return {"median_s": statistics.median(runs), "min_s": min(runs)}


def measure_decoder(torch: Any, transformers: Any) -> dict[str, Any]:
    """Prefill at a few n, one decode step at a few cache lengths L (a DynamicCache, cropped back after each)."""
    config = transformers.LlamaConfig(**TINY_LLAMA)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 1000, (1, max(PREFILL_N + DECODE_L)))
    prefill = {str(n): timed(lambda n=n: model(ids[:, :n])) for n in PREFILL_N}
    decode = {}
    for length in DECODE_L:
        cache = transformers.DynamicCache()
        model(ids[:, :length], past_key_values=cache, use_cache=True)

        def step(cache: Any = cache) -> None:
            model(ids[:, :1], past_key_values=cache, use_cache=True)
            cache.crop(-1)

        decode[str(length)] = timed(step)
    decode["128"] = {"error": "not measured"}  # an entry without a figure is ignored
    params = sum(p.numel() for p in model.parameters())
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"config": TINY_LLAMA, "params": params, "weight_bytes": weights, "prefill": prefill, "decode_eager": decode}


def measure_encoder(torch: Any, transformers: Any) -> dict[str, Any]:
    """One forward over B x T at a couple of (B, T)."""
    model = transformers.BertModel(transformers.BertConfig(**TINY_BERT)).eval()
    forward = {f"{b}x{t}": timed(lambda b=b, t=t: model(torch.randint(0, 1000, (b, t)))) for b, t in ENCODER_BT}
    params = sum(p.numel() for p in model.parameters())
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"config": TINY_BERT, "params": params, "weight_bytes": weights, "forward": forward}


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    with torch.no_grad():
        decoders = {"tiny_llama": measure_decoder(torch, transformers)}
        encoders = {"tiny_bert": measure_encoder(torch, transformers)}
    return {"meta": {"device_name": "this CPU"}, "decoders": decoders, "encoders": encoders}


@pytest.fixture(scope="module")
def table(data: dict[str, Any]) -> cm.DeviceTable:
    return cm.DeviceTable(data, configs={"tiny_llama_wide": WIDE})


def line(points: list[tuple[float, float]], x: float) -> float:
    """The interpolation rule written out again: floor below, segments between, the last slope (>= 0) above."""
    points = sorted(points)
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in pairwise(points):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    (x0, y0), (x1, y1) = points[-2:]
    return y1 + max((y1 - y0) / (x1 - x0), 0.0) * (x - x1)


def curve(data: dict[str, Any], kind: str) -> list[tuple[float, float]]:
    section = data["decoders"]["tiny_llama"][kind]
    return [(float(k), v["median_s"]) for k, v in section.items() if "median_s" in v]


def test_config_arithmetic_counts_the_parameters_torch_counts(data: dict[str, Any]):
    assert cm.decoder_params(TINY_LLAMA) == data["decoders"]["tiny_llama"]["params"]
    assert cm.encoder_params(TINY_BERT) == data["encoders"]["tiny_bert"]["params"]
    h200 = cm.DeviceTable.load("h200")
    for name in ("llama3_8b", "llama32_3b", "llama32_1b", "llama2_7b"):
        assert cm.decoder_params(h200.shape(name).config) == h200.params(name)
    assert cm.decoder_params(cm.CONFIGS["llama33_70b"]) == h200.params("llama33_70b")


def test_interpolation_hits_the_measured_points_and_holds_the_ends(data: dict[str, Any], table: cm.DeviceTable):
    prefill, decode = curve(data, "prefill"), curve(data, "decode_eager")
    assert [table.prefill("tiny_llama", n) for n, _ in prefill] == [s for _, s in prefill]
    assert [table.decode("tiny_llama", n, "eager") for n, _ in decode] == [s for _, s in decode]
    assert table.prefill("tiny_llama", 1) == prefill[0][1]  # the launch-bound floor
    for x in (24, 48, 200):
        assert table.prefill("tiny_llama", x) == pytest.approx(line(prefill, x))
        assert table.decode("tiny_llama", x, "eager") == pytest.approx(line(decode, x))
    assert table.decode("tiny_llama", 40, "cudagraph") == table.decode("tiny_llama", 40, "eager")  # unmeasured column
    forward = data["encoders"]["tiny_bert"]["forward"]
    assert table.encoder("tiny_bert", 2, 16) == forward["2x16"]["median_s"]
    assert table.encoder("tiny_bert", 1, 100) == forward["4x32"]["median_s"]  # nearest in B x T tokens
    assert table.encoder("tiny_bert", 8, 32) == pytest.approx(2 * forward["4x32"]["median_s"])  # scaled above


TINY_RULES = {"mine": {"lm": "tiny_llama", "module": "tiny_bert", "scorer": "tiny_llama"}}


def record() -> dict[str, Any]:
    """A batch-1 record: an extractor (generate), a scorer (prompt_logprobs), an encoder, a library-driven LM."""
    lm = {"model": "embedded:smollm2-135m-instruct", "role": None}
    compress = [
        {**lm, "adapter": "extractor", "op": "generate", "n": 2, "read": 70, "written": 8, "each": [[40, 5], [30, 3]]},
        {**lm, "adapter": None, "op": "prompt_logprobs", "n": 1, "read": 50, "written": 0, "each": [[50, 0]]},
        {"model": "enc", "adapter": None, "op": "forward", "n": 2, "read": 160, "written": 0,
         "each": [[2, 16, 0], [4, 32, 0]]},
        {"model": "lib", "adapter": "scorer", "op": "forward", "n": 2, "read": 25, "written": 0,
         "each": [[1, 24, 0], [1, 1, 24]]},
    ]  # fmt: skip
    generate = [{**lm, "adapter": None, "op": "generate", "n": 1, "read": 60, "written": 4, "each": [[60, 4]]}]
    return {"tokens": {"compress": compress, "generate": generate}, "batch": 1, "compress_s": 1.0, "generate_s": 0.5}


def test_a_record_costs_the_sum_of_its_stages_and_its_sequences(data: dict[str, Any], table: cm.DeviceTable):
    scenario = cm.Scenario(reader="tiny_llama", compressors=TINY_RULES, column="eager")
    got = cm.predict_record(record(), "mine", table, scenario)
    pre, dec = curve(data, "prefill"), curve(data, "decode_eager")
    forward = data["encoders"]["tiny_bert"]["forward"]
    extractor = sum(line(pre, r) + sum(line(dec, r + j) for j in range(1, w)) for r, w in ((40, 5), (30, 3)))
    scorer = line(pre, 50)  # no prefill_full_logits measured: the plain prefill
    encoder = forward["2x16"]["median_s"] + forward["4x32"]["median_s"]
    library = line(pre, 24) + line(dec, 24)  # a prefill, then one step at 24 cached tokens
    reader = line(pre, 60) + sum(line(dec, 60 + j) for j in range(1, 4))
    terms = [t["s"] for t in got["stages"]["compress"]["terms"]]
    assert terms == pytest.approx([extractor, scorer, encoder, library])
    assert got["stages"]["compress"]["s"] == pytest.approx(extractor + scorer + encoder + library)
    assert got["stages"]["generate"]["s"] == pytest.approx(reader)
    assert got["online_s"] == got["stages"]["generate"]["s"]
    assert got["total_s"] == pytest.approx(got["stages"]["compress"]["s"] + got["online_s"])
    p_llama, p_bert = table.params("tiny_llama"), table.params("tiny_bert")
    assert got["flops"] == pytest.approx(2 * p_llama * (70 + 8 + 50 + 25 + 60 + 4) + 2 * p_bert * 160)
    assert got["exact"] and got["scaled_from"] == {}
    assert got["reader_tokens"] == 64 and got["compressor_flops"] == pytest.approx(got["flops"] - 2 * p_llama * 64)


def test_the_sequences_of_one_call_are_one_batched_pass_unless_told(data: dict[str, Any], table: cm.DeviceTable):
    lm = {"model": "m", "adapter": None, "role": None}
    scored = {
        **lm,
        "op": "token_logprobs",
        "n": 3,
        "read": 90,
        "written": 0,
        "calls": [2, 1],
        "each": [[40, 0], [20, 0], [30, 0]],
    }
    wrote = {**lm, "op": "generate", "n": 2, "read": 70, "written": 7, "calls": [2], "each": [[40, 3], [30, 4]]}
    rec = {"tokens": {"compress": [scored, wrote], "generate": []}, "batch": 1}  # fmt: skip
    pre, dec = curve(data, "prefill"), curve(data, "decode_eager")
    batched = cm.Scenario(reader="tiny_llama", compressors=TINY_RULES, column="eager")
    got = [t["s"] for t in cm.predict_record(rec, "mine", table, batched)["stages"]["compress"]["terms"]]
    # two calls: 40 + 20 tokens in one pass, 30 in the other; the generation's prefill over 70, then the longest
    # one's 3 steps at the mean prompt (35) plus 1, 2, 3
    assert got == pytest.approx(
        [line(pre, 60) + line(pre, 30), line(pre, 70) + sum(line(dec, 35 + j) for j in (1, 2, 3))]
    )
    alone = cm.Scenario(reader="tiny_llama", compressors=TINY_RULES, column="eager", batched=False)
    got = [t["s"] for t in cm.predict_record(rec, "mine", table, alone)["stages"]["compress"]["terms"]]
    each = [line(pre, r) + sum(line(dec, r + j) for j in range(1, w)) for r, w in ((40, 3), (30, 4))]
    assert got == pytest.approx([line(pre, 40) + line(pre, 20) + line(pre, 30), sum(each)])
    # a call of no sequences (a truncator asked about no candidate) costs nothing and leaves the others as they are
    empty = {**scored, "calls": [2, 0, 1]}
    rec = {"tokens": {"compress": [empty, {**wrote, "calls": [0], "n": 0, "read": 0, "written": 0, "each": []}],
                      "generate": []}, "batch": 1}  # fmt: skip
    got = [t["s"] for t in cm.predict_record(rec, "mine", table, batched)["stages"]["compress"]["terms"]]
    assert got == pytest.approx([line(pre, 60) + line(pre, 30), 0.0])


def test_a_shape_the_table_lacks_is_scaled_from_the_nearest_measured_one(table: cm.DeviceTable):
    wide = table.shape("tiny_llama_wide")
    assert wide.scaled_from == "tiny_llama" and wide.params == cm.decoder_params(WIDE)
    by_flops = wide.params / table.params("tiny_llama")
    by_weights = wide.weight_bytes / table.weight_bytes("tiny_llama")
    assert table.prefill("tiny_llama_wide", 40) == pytest.approx(by_flops * table.prefill("tiny_llama", 40))
    assert table.decode("tiny_llama_wide", 40, "eager") == pytest.approx(
        by_weights * table.decode("tiny_llama", 40, "eager")
    )
    got = cm.predict_record(record(), "mine", table, cm.Scenario(reader="tiny_llama_wide", compressors=TINY_RULES))
    assert got["scaled_from"] == {"tiny_llama_wide": "tiny_llama"}
    assert got["stages"]["generate"]["terms"][0]["scaled_from"] == "tiny_llama"
    with pytest.raises(KeyError):
        table.shape("no_such_shape")


def test_a_batched_record_is_costed_as_sequences_of_mean_size_and_says_so(table: cm.DeviceTable):
    group = {"model": "m", "adapter": None, "op": "generate", "n": 0.5, "read": 30.0, "written": 5.0}
    rec = {"tokens": {"compress": [group], "generate": [{**group, "n": 1.0}]}, "batch": 4}
    scenario = cm.Scenario(reader="tiny_llama", compressors=TINY_RULES, column="eager")
    got = cm.predict_record(rec, "mine", table, scenario)
    assert got["exact"] is False and got["stages"]["compress"]["exact"] is False
    read, written = 60.0, 10.0  # per sequence: the totals over n
    steps = sum(table.decode("tiny_llama", read + j, "eager") for j in range(1, int(written)))  # whole sizes here
    each = table.prefill("tiny_llama", read) + steps
    assert got["stages"]["compress"]["s"] == pytest.approx(0.5 * each)
    old = cm.predict_record({"prompt_tokens": 60, "completion_tokens": 4}, "mine", table, scenario)
    assert old["counted"] is False and old["exact"] is False and old["stages"]["compress"]["terms"] == []


def test_break_even_needs_fewer_reader_tokens_and_a_small_enough_compressor():
    h200 = cm.DeviceTable.load("h200")
    full = {"reader_tokens": 800.0, "compressor_flops": 0.0}
    more = {"reader_tokens": 900.0, "compressor_flops": 1e9}
    assert cm.break_even(more, full, h200) == {"reader": None, "params": None}
    tiny = {"reader_tokens": 200.0, "compressor_flops": 2 * h200.params("distilbert_base") * 1000.0}
    got = cm.break_even(tiny, full, h200)
    assert got["params"] == pytest.approx(tiny["compressor_flops"] / (2 * 600))
    assert got["reader"] == "llama32_1b"
    mid = {"reader_tokens": 700.0, "compressor_flops": 2 * h200.params("llama32_3b") * 1000.0}  # a 3B over 1000
    assert cm.break_even(mid, full, h200)["reader"] == "llama33_70b"  # 3B x 1000 / 100 saved = 32B: above 14B
    huge = {"reader_tokens": 799.0, "compressor_flops": 2 * h200.params("llama32_3b") * 1e4}
    assert cm.break_even(huge, full, h200)["reader"] is None and cm.break_even(huge, full, h200)["params"] > 7e10


def test_the_paper_mapping_names_every_configured_method():
    methods = [re.search(r"^name: (\S+)", p.read_text(), re.M) for p in (REPO / "conf" / "method").glob("*.yaml")]
    names = {m.group(1) for m in methods if m}
    no_model = {n for n in names if n.startswith("bm25") or n in ("full", "naive", "oracle_sentences", "top1")}
    assert {n for n in names - no_model if cm.family(n) is None} == set()
    scenario, lm, module = cm.Scenario(), {"op": "generate"}, {"op": "forward"}
    assert scenario.shape_for("compselect_no_truncator", "compress", lm) == ("llama32_3b", False)
    assert scenario.shape_for("finefilter", "compress", module) == ("distilbert_base", False)
    assert scenario.shape_for("bge_reranker_sentences_top1", "compress", module) == ("xlmr_base", False)
    assert scenario.shape_for("bge_reranker_v2_m3", "compress", module) == ("xlmr_large", False)
    assert scenario.shape_for("edc2", "compress", lm) == ("llama3_8b", True)
    assert scenario.shape_for("selective_context_ratio0.68", "compress", {"op": "prompt_logprobs"})[0] == "gpt2"
    assert scenario.shape_for("bm25", "generate", lm) == ("llama3_8b", True)


def test_the_h200_table_reads_the_70b_extrapolation_and_t5_as_encode_then_decoder_steps():
    h200 = cm.DeviceTable.load("h200")
    raw = json.loads((cm.DEVICES / "h200.json").read_text())
    ext = raw["decoders"]["llama33_70b_layer"]["extrapolation_80_layers"]
    assert h200.prefill("llama33_70b", 64) == ext["prefill"]["64"]["est_real_s"]
    assert h200.decode("llama33_70b", 512) == ext["decode_cudagraph"]["512"]["est_real_s"]
    assert h200.decode_column("t5_large", "cudagraph") == "decode_eager"  # no CUDA graph measured for T5
    group = {"model": "m", "adapter": None, "op": "generate", "n": 1, "read": 700, "written": 3, "each": [[700, 3]]}
    got = cm.predict_record({"tokens": {"compress": [group], "generate": []}}, "recomp_abs", h200)
    want = h200.prefill("t5_large", 700) + sum(h200.decode("t5_large", j) for j in range(3))
    assert got["stages"]["compress"]["s"] == pytest.approx(want)
    assert h200.decode("gpt2", 900) >= h200.decode("gpt2", 512)  # beyond the measured points: the last slope
