"""The cost model (issue 83, part 3): a record's predicted latency and compute on a measured device.

Inputs: a device table (``leaderboard/data/devices/<device>.json``, the layout of the project's
``measure_kernels.py``: median seconds of a prefill over n tokens, of one decode step at L cached tokens, of an
encoder forward over B x T tokens) and a record's token accounting (``record["tokens"]``, ``harness.lm.meter``:
per stage, one group per (model, adapter, op) with the tokens it read and wrote). A ``Scenario`` says which
measured shape each call of a method stands for (``PAPER_COMPRESSORS``: the papers' checkpoints) and which reads.

What it assumes:
- batch 1: every sequence runs alone; a generation is one prefill over what it read, then one decode step per
  written token after the first, each at its cache length (a seq2seq summariser: one encoder pass, then one
  decoder step per written token). Batched serving is not modelled; under load cost follows ``flops``;
- decode is weight-bound: a shape the table lacks is scaled from the nearest measured one of its kind by weight
  bytes for decode and by FLOPs (2 x params x n) for prefill and encoder passes (the result says ``scaled_from``);
- token counts are those of the profile that ran: an embedded run counts with the embedded tokenizer (SmolLM2's,
  not Llama-3's), and its compressors read and wrote what its stand-ins did, not what the papers' models would;
- FLOPs are 2 x params x (tokens read + written) per call; ``Scenario.attention`` adds the attention term.
Where it departs from the measurement: between measured points it interpolates linearly; below the smallest it
holds the smallest figure (the launch-bound floor); above the largest it extends the last segment's slope (never
downward: a noisy falling segment holds its last figure); an encoder call takes the measured (B, T) nearest in
B x T tokens, scaled by tokens above the largest; a decode column the table lacks (T5's CUDA graph, a CPU) falls
back to the eager one. At batch > 1 a record holds its share of the batch without per-sequence sizes: it is
costed as sequences of mean size (a generation's decode steps at their middle length) and says ``exact: False``.
Pure functions over dicts: nothing here loads a model.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

READER = "reader"  # a rule's shape: the scenario's reader (a method that calls the generator's own model)
READERS = ("llama32_1b", "llama32_3b", "llama3_8b", "qwen3_14b", "llama33_70b")  # the papers' reader sizes
LM_OPS = ("generate", "token_logprobs", "prompt_logprobs")  # the model layer's LM calls
MODULE_OPS = ("forward", "encode", "decode")  # watched torch modules: items are [B, T, past]
COLUMNS = {"cudagraph": "decode_cudagraph", "eager": "decode_eager", "static": "decode_static"}
DTYPE_BYTES = 2  # bf16 weights for a shape known only by its config
DEVICES = Path(__file__).resolve().parent / "data" / "devices"

# method (a variant takes its longest listed prefix: compselect_no_truncator -> compselect) -> call kind -> shape.
# "lm": the model layer's LM calls (generate, token_logprobs, prompt_logprobs); "module": a watched torch module
# (sentence encoder, cross-encoder, classifier, seq2seq LM, a causal LM a library drives itself); an adapter or
# role name as key wins over both. Unlisted kinds take DEFAULT_RULES. As conf/profile/paper.yaml says.
PAPER_COMPRESSORS: dict[str, dict[str, str]] = {
    "compselect": {"lm": "llama32_3b", "module": "distilbert_base"},  # extractor + truncator (3B); SBERT reranker
    "compselect_direct": {"lm": "llama32_3b", "module": "bert_base"},  # un-tuned 3B; off-the-shelf bi-encoder
    "finefilter": {"lm": "llama32_3b", "module": "distilbert_base"},  # CompSelect's stages, index truncator
    "exit": {"lm": "gemma_2b", "module": "gemma_2b"},  # Gemma-2B LoRA classifier (embedded: a cross-encoder)
    "selective_context": {"lm": "gpt2", "module": "gpt2"},  # GPT-2 self-information
    "longllmlingua": {"lm": "llama2_7b", "module": "llama2_7b"},  # llmlingua's Llama-2-7B scorer
    "refiner": {"lm": "llama2_7b", "module": "llama2_7b"},  # Refiner-7B (LoRA on Llama-2-7B-chat)
    "recomp_abs": {"lm": "t5_large", "module": "t5_large"},  # T5-large summariser (embedded: the causal LM)
    "recomp_extr": {"module": "bert_base"},  # Contriever dual encoder
    "csm": {"module": "bert_base"},  # bert-base-uncased local layer (+ the dedup encoder)
    "bge_reranker": {"module": "xlmr_base"},  # bge-reranker-base cross-encoder
    "bge_reranker_v2_m3": {"module": "xlmr_large"},  # bge-reranker-v2-m3 cross-encoder
    "edc2": {"lm": READER, "module": "bert_base"},  # the reader's own model extracts
    "ci_oracle": {"lm": READER, "module": "bert_base"},  # the reader scores the gold answers
}
DEFAULT_RULES: dict[str, str] = {"lm": READER, "module": "bert_base"}  # the shared LM; any other sentence encoder

# Shapes known by their transformers config only (parameters counted by arithmetic; a table entry wins).
CONFIGS: dict[str, dict[str, Any]] = {
    "llama33_70b": {"kind": "decoder", "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
                    "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 128256},
    "qwen3_8b": {"kind": "decoder", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                 "qk_norm": True},
    "smollm2_135m": {"kind": "decoder", "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                     "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
                     "tie_word_embeddings": True},
    "smollm2_360m": {"kind": "decoder", "hidden_size": 960, "intermediate_size": 2560, "num_hidden_layers": 32,
                     "num_attention_heads": 15, "num_key_value_heads": 5, "vocab_size": 49152,
                     "tie_word_embeddings": True},
    "minilm_l6": {"kind": "encoder", "hidden_size": 384, "intermediate_size": 1536, "num_hidden_layers": 6,
                  "vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2},
}  # fmt: skip

Points = tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Shape:
    """One model shape of a device table: its size and its measured curves (empty when scaled)."""

    name: str
    kind: str  # decoder | encoder | seq2seq
    params: int
    weight_bytes: int
    config: Mapping[str, Any] = field(default_factory=dict)
    curves: Mapping[str, Points] = field(default_factory=dict)  # prefill, prefill_full_logits, decode_*: (x, s)
    grid: tuple[tuple[int, int, float], ...] = ()  # encoder forward: (B, T, s)
    partial: bool = False  # a few layers of a larger model: never a source to scale from
    scaled_from: str | None = None


def decoder_params(config: Mapping[str, Any]) -> int:
    """Parameters of a Llama-style decoder (Llama, Qwen3, Gemma, SmolLM2) from its config, no model built."""
    h, layers, vocab = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
    heads = config["num_attention_heads"]
    kv, hd = config.get("num_key_value_heads", heads), config.get("head_dim", h // heads)
    attn = h * heads * hd * 2 + h * kv * hd * 2 + (2 * hd if config.get("qk_norm") else 0)
    layer = attn + 3 * h * config["intermediate_size"] + 2 * h
    embeddings = vocab * h * (1 if config.get("tie_word_embeddings") else 2)
    return embeddings + layers * layer + h


def encoder_params(config: Mapping[str, Any]) -> int:
    """Parameters of a BERT-style encoder (with its pooler) from its config, no model built."""
    h, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    positions, types = config.get("max_position_embeddings", 512), config.get("type_vocab_size", 2)
    embeddings = (config["vocab_size"] + positions + types) * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h + (h * inter + inter) + (inter * h + h) + 2 * h
    return embeddings + layers * layer + h * h + h


def config_params(config: Mapping[str, Any]) -> int:
    """Parameters of a ``CONFIGS`` entry (``kind`` decoder or encoder)."""
    return encoder_params(config) if config.get("kind") == "encoder" else decoder_params(config)


def figures(section: Mapping[str, Any] | None) -> Points:
    """The measured (x, median seconds) of one curve, sorted; an error or a skip reason is no figure."""
    out = []
    for key, value in (section or {}).items():
        if isinstance(value, Mapping) and isinstance(value.get("median_s"), int | float) and str(key).isdigit():
            out.append((float(key), float(value["median_s"])))
    return tuple(sorted(out))


def _extrapolated(section: Mapping[str, Any]) -> Points:
    """The (x, est_real_s) of one curve of ``extrapolation_80_layers``."""
    out = [
        (float(k), float(v["est_real_s"])) for k, v in section.items() if isinstance(v, Mapping) and "est_real_s" in v
    ]
    return tuple(sorted(out))


def _decoder_shapes(name: str, entry: Mapping[str, Any]) -> list[Shape]:
    """A measured decoder, plus the whole model its ``extrapolation_80_layers`` evaluates (``_layer`` dropped)."""
    kinds = ("prefill", "prefill_full_logits", *COLUMNS.values())
    subset = entry.get("layer_subset")
    curves = {k: figures(entry.get(k)) for k in kinds}
    config = dict(entry.get("config") or {})
    shape = Shape(
        name, "decoder", int(entry["params"]), int(entry["weight_bytes"]), config, curves, partial=bool(subset)
    )
    out = [shape]
    ext = entry.get("extrapolation_80_layers")
    if ext and subset:
        config = {**shape.config, "num_hidden_layers": int(ext["real_layers"])}
        curves = {k: _extrapolated(ext[k]) for k in kinds if isinstance(ext.get(k), Mapping)}
        whole = name.removesuffix("_layer") if name.endswith("_layer") else f"{name}_whole"
        out.append(
            Shape(whole, "decoder", int(subset["real_params"]), int(subset["real_weight_bytes"]), config, curves)
        )
    return out


def _encoder_shape(name: str, entry: Mapping[str, Any]) -> Shape:
    """A measured encoder: its forward grid of (B, T, seconds)."""
    grid = []
    for key, value in (entry.get("forward") or {}).items():
        b, _, t = str(key).partition("x")
        if (
            b.isdigit()
            and t.isdigit()
            and isinstance(value, Mapping)
            and isinstance(value.get("median_s"), int | float)
        ):
            grid.append((int(b), int(t), float(value["median_s"])))
    config = dict(entry.get("config") or {})
    return Shape(name, "encoder", int(entry["params"]), int(entry["weight_bytes"]), config, grid=tuple(sorted(grid)))


def _seq2seq_shape(name: str, entry: Mapping[str, Any]) -> Shape:
    """A measured encoder-decoder: its encoder pass over n tokens as ``prefill``, its decoder steps as decode."""
    curves = {"prefill": figures(entry.get("encode")), **{k: figures(entry.get(k)) for k in COLUMNS.values()}}
    params, weights = int(entry["params"]), int(entry["weight_bytes"])
    return Shape(name, "seq2seq", params, weights, dict(entry.get("config") or {}), curves)


def table_shapes(data: Mapping[str, Any]) -> dict[str, Shape]:
    """Every shape a device table measured, by name (an entry without ``params`` is skipped)."""
    shapes: list[Shape] = []
    for name, entry in (data.get("decoders") or {}).items():
        if isinstance(entry, Mapping) and "params" in entry:
            shapes.extend(_decoder_shapes(name, entry))
    for name, entry in (data.get("encoders") or {}).items():
        if isinstance(entry, Mapping) and "params" in entry:
            shapes.append(_encoder_shape(name, entry))
    for name, entry in (data.get("seq2seq") or {}).items():
        if isinstance(entry, Mapping) and "params" in entry:
            shapes.append(_seq2seq_shape(name, entry))
    return {s.name: s for s in shapes}


def interpolate(points: Points, x: Any) -> Any:
    """Piecewise-linear in the measured points; the smallest figure below them; the last slope (not below 0) above."""
    if not points:
        raise ValueError("no measured figure")
    xs = np.array([p[0] for p in points])
    ys = np.array([p[1] for p in points])
    at = np.asarray(x, dtype=float)
    y = np.interp(at, xs, ys)
    if len(xs) > 1:
        slope = max((ys[-1] - ys[-2]) / (xs[-1] - xs[-2]), 0.0)
        y = np.where(at > xs[-1], ys[-1] + slope * (at - xs[-1]), y)
    return float(y) if np.ndim(y) == 0 else y


class DeviceTable:
    """The measured shapes of one device, and every ``CONFIGS`` shape scaled from the nearest of its kind."""

    def __init__(self, data: Mapping[str, Any], configs: Mapping[str, Mapping[str, Any]] = CONFIGS, name: str = ""):
        """Read the shapes of a table (the layout of ``h200.json``)."""
        self.meta = dict(data.get("meta") or {})
        self.name = name or str(self.meta.get("device_name", ""))
        self.shapes = table_shapes(data)
        self.configs = dict(configs)

    @classmethod
    def load(cls, path: str | Path, configs: Mapping[str, Mapping[str, Any]] = CONFIGS) -> DeviceTable:
        """A table from its JSON file (a bare name: ``leaderboard/data/devices/<name>.json``)."""
        p = Path(path)
        p = p if p.suffix == ".json" or p.exists() else DEVICES / f"{p}.json"
        return cls(json.loads(p.read_text(encoding="utf-8")), configs, p.stem)

    def shape(self, name: str) -> Shape:
        """The measured shape, or a ``CONFIGS`` one scaled from the measured shape of its kind nearest in params."""
        if name in self.shapes:
            return self.shapes[name]
        if name not in self.configs:
            raise KeyError(f"shape {name!r}: not in the device table {self.name!r} nor in CONFIGS")
        config = dict(self.configs[name])
        kind, params = config.get("kind", "decoder"), config_params(config)
        pool = [s for s in self.shapes.values() if s.kind == kind and not s.partial]
        if not pool:
            raise KeyError(f"shape {name!r}: the table {self.name!r} measured no {kind} to scale from")
        source = min(pool, key=lambda s: abs(math.log(params / s.params)))
        return Shape(name, kind, params, params * DTYPE_BYTES, config, scaled_from=source.name)

    def params(self, name: str) -> int:
        """Parameters of a shape."""
        return self.shape(name).params

    def weight_bytes(self, name: str) -> int:
        """Bytes of a shape's weights (bf16 for a shape known by its config)."""
        return self.shape(name).weight_bytes

    def _measured(self, name: str, by: str) -> tuple[Shape, float]:
        """The shape whose curves answer for ``name`` and the factor on its figures (``by``: params or weights)."""
        s = self.shape(name)
        if s.scaled_from is None:
            return s, 1.0
        src = self.shapes[s.scaled_from]
        return src, (s.params / src.params if by == "params" else s.weight_bytes / src.weight_bytes)

    def prefill(self, name: str, n: Any, full_logits: bool = False) -> Any:
        """Seconds of one forward over n tokens (``full_logits``: every position's logits, where measured)."""
        src, factor = self._measured(name, "params")
        curve = src.curves.get("prefill_full_logits") if full_logits else None
        return factor * interpolate(curve or src.curves["prefill"], n)

    def decode_column(self, name: str, column: str = "cudagraph") -> str:
        """The decode column that answers (``decode_cudagraph``, ...): the eager one where ``column`` is unmeasured."""
        src, _ = self._measured(name, "weights")
        wanted = COLUMNS.get(column, column)
        return wanted if src.curves.get(wanted) else "decode_eager"

    def decode(self, name: str, length: Any, column: str = "cudagraph") -> Any:
        """Seconds of one decode step at ``length`` cached tokens (``column``: cudagraph, eager or static)."""
        src, factor = self._measured(name, "weights")
        return factor * interpolate(src.curves[self.decode_column(name, column)], length)

    def encoder(self, name: str, batch: int, tokens: int) -> float:
        """Seconds of one encoder forward over ``batch`` x ``tokens``: the measured (B, T) nearest in B x T."""
        src, factor = self._measured(name, "params")
        if not src.grid:
            raise ValueError(f"shape {name!r}: no encoder forward measured")
        size = batch * tokens
        largest = max(src.grid, key=lambda g: g[0] * g[1])
        if size > largest[0] * largest[1]:
            return factor * largest[2] * size / (largest[0] * largest[1])
        near = min(src.grid, key=lambda g: (abs(g[0] * g[1] - size), g[0] * g[1]))
        return factor * near[2]


def family(method: str, rules: Mapping[str, Any] = PAPER_COMPRESSORS) -> str | None:
    """The ``rules`` key of a method's name: itself, else its longest listed prefix before ``_`` (or None)."""
    if method in rules:
        return method
    keys = [k for k in rules if method.startswith(k + "_")]
    return max(keys, key=len) if keys else None


@dataclass(frozen=True)
class Scenario:
    """Which shape each call of a record stands for, which shape reads, and how decode runs."""

    reader: str = "llama3_8b"
    compressors: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: PAPER_COMPRESSORS)
    default: Mapping[str, str] = field(default_factory=lambda: DEFAULT_RULES)
    column: str = "cudagraph"  # the LM calls' decode (a serving engine); "eager": Hugging Face generate
    module_column: str = "eager"  # a library driving a torch causal LM step by step itself
    attention: bool = False  # add the attention term to the FLOPs
    # model ref (or "ref|lm", "ref|module" by call kind) -> shape, before the method rules: the shapes as they ran
    models: Mapping[str, str] = field(default_factory=dict)
    batched: bool = True  # the sequences of one LM call (a group's ``calls``) as one batched pass, as they ran

    def shape_for(self, method: str, stage: str, group: Mapping[str, Any]) -> tuple[str, bool]:
        """(shape, whether it is the reader) of one group: the generate stage reads, the compress stage maps (by
        the group's model where ``models`` names it: the shapes a run's own models have, on the machine it ran)."""
        if stage == "generate":
            return self.reader, True
        kind = "module" if group.get("op") in MODULE_OPS else "lm"
        for key in (f"{group.get('model')}|{kind}", str(group.get("model"))):  # "ref|module" before "ref"
            if key in self.models:
                return self.models[key], False
        rules = {**self.default, **self.compressors.get(family(method, self.compressors) or "", {})}
        kind = "module" if group.get("op") in MODULE_OPS else "lm"
        named = [rules.get(str(group.get(k))) for k in ("role", "adapter") if group.get(k)]
        shape = next((s for s in named if s), rules[kind])
        return (self.reader, True) if shape == READER else (shape, False)


def sequences(group: Mapping[str, Any]) -> tuple[list[tuple[float, tuple[float, ...]]], bool]:
    """(weight, item) per sequence or call of a group, and whether exact: its ``each``, else n of mean size."""
    if group.get("each") is not None:
        return [(1.0, tuple(float(v) for v in item)) for item in group["each"]], True
    n = float(group.get("n") or 0)
    if n <= 0:
        return [], False
    read, written = float(group.get("read", 0)) / n, float(group.get("written", 0)) / n
    item = (1.0, read, 0.0) if group.get("op") in MODULE_OPS else (read, written)
    return [(n, item)], False


def generate_seconds(table: DeviceTable, shape: Shape, read: float, written: float, column: str) -> float:
    """One generation: a prefill (a seq2seq encoder pass) over ``read``, then its decode steps."""
    first = table.prefill(shape.name, read)
    if shape.kind == "seq2seq":  # the decoder writes every token, its self-attention cache 0 .. written - 1
        lengths, steps = np.arange(int(written)), written
    else:  # the prefill wrote the first token; each later one is a step at read + j
        lengths, steps = read + np.arange(1, int(written)), max(written - 1.0, 0.0)
    if float(written).is_integer() and float(read).is_integer():
        return first + float(np.sum(table.decode(shape.name, lengths, column))) if len(lengths) else first
    middle = read + written / 2 if shape.kind != "seq2seq" else written / 2
    return first + steps * table.decode(shape.name, middle, column)


def module_seconds(table: DeviceTable, shape: Shape, op: str, item: Sequence[float], column: str) -> float:
    """One watched forward call ``[B, T, past]``: an encoder pass, a decode step (T 1 after a cache) or a prefill."""
    b, t, past = (float(v) for v in item)
    if shape.kind == "encoder":
        return table.encoder(shape.name, int(b), int(t))
    if shape.kind == "seq2seq" and op != "encode" and t == 1:
        return table.decode(shape.name, past, column)
    if shape.kind == "decoder" and t == 1 and past > 0:
        return table.decode(shape.name, past, column)
    # a causal LM's plain forward computes every position's logits (a library scoring perplexity, as llmlingua)
    return table.prefill(shape.name, b * t, full_logits=shape.kind == "decoder")


def call_seconds(table: DeviceTable, shape: Shape, op: str, item: Sequence[float], scenario: Scenario) -> float:
    """Batch-1 seconds of one sequence (or watched call) of ``op`` on ``shape``."""
    if op in MODULE_OPS:
        return module_seconds(table, shape, op, item, scenario.module_column)
    read, written = item
    if shape.kind == "encoder":
        return table.encoder(shape.name, 1, max(int(read), 1))
    if op == "generate":
        return generate_seconds(table, shape, read, written, scenario.column)
    return table.prefill(shape.name, read, full_logits=op == "prompt_logprobs")  # token_logprobs, answer_nll, ...


def attention_flops(config: Mapping[str, Any], past: float, new: float) -> float:
    """FLOPs of the attention scores and mixing (4 x layers x width per cached position) for ``new`` tokens."""
    layers = config.get("num_hidden_layers") or config.get("num_layers") or 0
    heads, head_dim = config.get("num_attention_heads"), config.get("head_dim")
    width = heads * head_dim if heads and head_dim else config.get("hidden_size") or config.get("d_model") or 0
    return 4.0 * layers * width * (new * past + new * (new + 1) / 2)


def batched_call_seconds(
    table: DeviceTable, shape: Shape, op: str, items: Sequence[Sequence[float]], scenario: Scenario
) -> float:
    """One LM call of several sequences as one batched pass: a prefill over all they read, then (a generation) the
    longest one's decode steps at their mean cache length; decode is weight-bound, so a step of the batch costs what
    one sequence's step does. One sequence: ``call_seconds``."""
    if len(items) == 1:
        return call_seconds(table, shape, op, items[0], scenario)
    read, longest = sum(float(r) for r, _ in items), max(float(w) for _, w in items)
    if op != "generate":
        return call_seconds(table, shape, op, (read, 0.0), scenario)
    if shape.kind != "decoder":  # a summariser: one encoder pass over all, the longest one's decoder steps
        return call_seconds(table, shape, op, (read, longest), scenario)
    mean_read = read / len(items)
    lengths = mean_read + np.arange(1, max(int(longest), 1))  # the longest one's steps after the prefill's token
    steps = float(np.sum(table.decode(shape.name, lengths, scenario.column))) if len(lengths) else 0.0
    return table.prefill(shape.name, read) + steps


def group_seconds(group: Mapping[str, Any], shape: Shape, table: DeviceTable, scenario: Scenario) -> float:
    """A group's seconds: per engine call (``calls``) when ``scenario.batched`` and the group has them, else every
    sequence alone (or n of mean size without ``each``). A call of no sequences (a method that asked for nothing,
    e.g. a truncator with no candidate) costs nothing."""
    op, calls, each = str(group.get("op", "generate")), group.get("calls"), group.get("each")
    if scenario.batched and calls and each is not None and op in LM_OPS:
        bounds = itertools.pairwise(np.cumsum([0, *calls]))
        return sum(batched_call_seconds(table, shape, op, each[a:b], scenario) for a, b in bounds if b > a)
    items, _ = sequences(group)
    return sum(w * call_seconds(table, shape, op, item, scenario) for w, item in items)


def group_cost(
    group: Mapping[str, Any], shape_name: str, on_reader: bool, table: DeviceTable, scenario: Scenario
) -> dict[str, Any]:
    """One group's batch-1 seconds and FLOPs on ``shape_name``, with what it was costed as."""
    shape, op = table.shape(shape_name), str(group.get("op", "generate"))
    items, exact = sequences(group)
    seconds = group_seconds(group, shape, table, scenario)
    read, written = float(group.get("read", 0)), float(group.get("written", 0))
    flops = 2.0 * shape.params * (read + written)
    if scenario.attention:
        spans = [(w * it[0], it[2], it[1]) if op in MODULE_OPS else (w, 0.0, sum(it)) for w, it in items]
        flops += sum(k * attention_flops(shape.config, past, new) for k, past, new in spans)
    column = table.decode_column(shape_name, scenario.module_column if op in MODULE_OPS else scenario.column)
    return {
        **{k: group.get(k) for k in ("model", "adapter", "role", "op", "n")},
        "shape": shape_name,
        "on_reader": on_reader,
        "read": read,
        "written": written,
        "s": seconds,
        "flops": flops,
        "exact": exact,
        "scaled_from": shape.scaled_from,
        "column": column if shape.kind != "encoder" else None,
    }


def stage_cost(
    groups: Iterable[Mapping[str, Any]], stage: str, method: str, table: DeviceTable, scenario: Scenario
) -> dict[str, Any]:
    """One stage of a record: the sum of its groups' terms."""
    terms = [group_cost(g, *scenario.shape_for(method, stage, g), table, scenario) for g in groups]
    return {
        "s": sum(t["s"] for t in terms),
        "flops": sum(t["flops"] for t in terms),
        "exact": all(t["exact"] for t in terms),
        "terms": terms,
    }


def record_tokens(record: Mapping[str, Any]) -> tuple[dict[str, list[Mapping[str, Any]]], bool]:
    """A record's groups per stage and whether it counted them; without ``tokens``, the generator's own counts."""
    tokens = record.get("tokens")
    if tokens is not None:
        return {"compress": list(tokens.get("compress") or []), "generate": list(tokens.get("generate") or [])}, True
    read, written = int(record.get("prompt_tokens") or 0), int(record.get("completion_tokens") or 0)
    group = {"model": "generator", "adapter": None, "op": "generate", "n": 1, "read": read, "written": written}
    return {"compress": [], "generate": [{**group, "each": [[read, written]]}]}, False


def predict_record(
    record: Mapping[str, Any], method: str, table: DeviceTable, scenario: Scenario | None = None
) -> dict[str, Any]:
    """A record's predicted batch-1 seconds and FLOPs per stage; ``online_s`` is the generate stage's."""
    scenario = scenario or Scenario()
    groups, counted = record_tokens(record)
    stages = {stage: stage_cost(groups[stage], stage, method, table, scenario) for stage in ("compress", "generate")}
    terms = [t for st in stages.values() for t in st["terms"]]
    return {
        "stages": stages,
        "total_s": stages["compress"]["s"] + stages["generate"]["s"],
        "online_s": stages["generate"]["s"],
        "flops": stages["compress"]["flops"] + stages["generate"]["flops"],
        "exact": counted and all(st["exact"] for st in stages.values()),
        "counted": counted,
        "scaled_from": {t["shape"]: t["scaled_from"] for t in terms if t["scaled_from"]},
        "compressor_flops": sum(t["flops"] for t in terms if not t["on_reader"]),
        "reader_tokens": sum(t["read"] + t["written"] for t in terms if t["on_reader"]),
    }


MEANS = ("total_s", "online_s", "flops", "compressor_flops", "reader_tokens")


def predict_run(
    records: Sequence[Mapping[str, Any]], method: str, table: DeviceTable, scenario: Scenario | None = None
) -> dict[str, Any]:
    """Means per question over a run's records (predicted, and the measured ``compress_s``/``generate_s``)."""
    scenario = scenario or Scenario()
    preds = [predict_record(r, method, table, scenario) for r in records]

    def mean(values: Iterable[Any]) -> float | None:
        kept = [float(v) for v in values if v is not None]
        return sum(kept) / len(kept) if kept else None

    out: dict[str, Any] = {k: mean(p[k] for p in preds) for k in MEANS}
    out["compress_s"] = mean(p["stages"]["compress"]["s"] for p in preds)
    out["measured"] = {k: mean(r.get(k) for r in records) for k in ("compress_s", "generate_s")}
    out.update(method=method, reader=scenario.reader, device=table.name, n=len(preds))
    out["exact"] = bool(preds) and all(p["exact"] for p in preds)
    out["scaled_from"] = {k: v for p in preds for k, v in p["scaled_from"].items()}
    return out


def break_even(
    row: Mapping[str, Any], full: Mapping[str, Any], table: DeviceTable, readers: Sequence[str] = READERS
) -> dict[str, Any]:
    """Where a row's compute per question (compressor FLOPs + 2 x reader params x its reader tokens) falls below
    ``full``'s: ``reader``, the smallest of ``readers`` where it does, and ``params``, the continuous reader size
    past which it does (compressor FLOPs over 2 x the reader tokens saved); None where it never does."""
    saved = float(full["reader_tokens"]) - float(row["reader_tokens"])
    extra = float(row["compressor_flops"]) - float(full.get("compressor_flops") or 0.0)
    params = max(extra / (2.0 * saved), 0.0) if saved > 0 else None

    def cheaper(p: int) -> bool:
        return extra + 2.0 * p * float(row["reader_tokens"]) < 2.0 * p * float(full["reader_tokens"])

    sizes = sorted(readers, key=table.params)
    reader = next((r for r in sizes if cheaper(table.params(r))), None)
    return {"reader": reader, "params": params}
