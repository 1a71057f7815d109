"""Token accounting: which model each call of a run ran, the tokens it read and the tokens it wrote.

The run loop opens a ``metered()`` block around each stage (a method's compression, the generator's answers); the
model layer adds to every open block:

- ``lm_call``: every sequence of an ``LM`` operation (``harness.lm.model``), computed or replayed from the call cache
  (a replayed call read and wrote the same tokens when it was computed): ``generate`` reads the prompt and writes
  the new tokens, the stop token included (the step that chose it ran too); ``token_logprobs`` and
  ``prompt_logprobs`` read the prompt and write nothing;
- ``watch``: a forward pre-hook on a torch module that is not an ``LM`` (sentence encoders, cross-encoders,
  classifiers, a seq2seq LM, a causal LM a library drives itself): one ``forward`` item per call, ``[B, T, past]``
  (batch rows, new tokens per row, tokens already in its key/value cache).

``groups(entries, share)`` folds a block's entries into one group per (model, adapter, op): sequences ``n``, tokens
``read`` and ``written`` and, at batch 1, ``each`` sequence's ``[read, written]`` (``forward``: ``[B, T, past]``)
and, for an ``LM`` operation, ``calls``: how many of those sequences went to the engine together in each call (a
method that scores 40 sentences of one question in one call pays one batched pass, not 40).
A batched stage serves several examples with one call, so each example's record gets the batch's totals divided by
the batch size (``share``), without ``each``: exact per example at batch 1 (the latency pass, ``batch_size=1``),
exact per run in the sum either way.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

SHAPE_OPS = ("forward", "encode", "decode")  # watched torch modules: items are [B, T, past]
_OPEN: list[Meter] = []
_LOCK = threading.Lock()
_MUTE = threading.local()


@dataclass
class Meter:
    """The entries of one ``metered()`` block, in call order."""

    entries: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def metered() -> Iterator[Meter]:
    """A block whose model calls are counted (blocks nest: an entry goes to every open one)."""
    meter = Meter()
    with _LOCK:
        _OPEN.append(meter)
    try:
        yield meter
    finally:
        with _LOCK:
            _OPEN.remove(meter)


@contextmanager
def muted() -> Iterator[None]:
    """Inside the block watched modules are not counted: an ``LM`` operation counts its own sequences (its
    transformers engine may run a watched model, e.g. one LongLLMLingua also drives)."""
    _MUTE.depth = getattr(_MUTE, "depth", 0) + 1
    try:
        yield
    finally:
        _MUTE.depth -= 1


def _add(entry: dict[str, Any]) -> None:
    with _LOCK:
        for meter in _OPEN:
            meter.entries.append(entry)


def lm_call(model: str, adapter: str | None, op: str, each: Sequence[Sequence[int]]) -> None:
    """One ``LM`` operation over sequences of ``[read, written]`` tokens."""
    if _OPEN:
        _add({"model": model, "adapter": adapter, "op": op, "each": [[int(r), int(w)] for r, w in each]})


def written_of(token_ids: Sequence[int], hit_limit: bool) -> int:
    """Tokens a greedy generation wrote: its kept tokens, plus the stop token unless the cap ended it."""
    return len(token_ids) + (0 if hit_limit else 1)


def watch(module: Any, model: str, adapter: str | None = None, op: str = "forward") -> Any:
    """Count every forward call of a torch ``module`` as an ``op`` item ``[B, T, past]``; returns the module.
    Watching it again (a shared instance handed out twice) changes nothing."""
    if getattr(module, "_harness_meter_hook", None) is not None:
        return module

    def hook(_mod: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        if _OPEN and not getattr(_MUTE, "depth", 0) and (shape := forward_shape(args, kwargs)) is not None:
            _add({"model": model, "adapter": adapter, "op": op, "each": [shape]})

    module._harness_meter_hook = module.register_forward_pre_hook(hook, with_kwargs=True)
    return module


def forward_shape(args: tuple, kwargs: dict[str, Any]) -> list[int] | None:
    """``[B, T, past]`` of a forward call: its ``input_ids`` (or ``inputs_embeds``, or the features dict a
    sentence-transformers module takes) and the length of its key/value cache."""
    ids = kwargs.get("input_ids")
    if ids is None and args:
        first = args[0]
        ids = first.get("input_ids") if isinstance(first, dict) else first
    if ids is None and kwargs.get("inputs_embeds") is not None:
        ids = kwargs["inputs_embeds"][..., 0]
    if ids is None and kwargs.get("decoder_input_ids") is not None:
        ids = kwargs["decoder_input_ids"]
    shape = getattr(ids, "shape", None)
    if shape is None or len(shape) < 2:
        return None
    return [int(shape[0]), int(shape[1]), _past_length(kwargs.get("past_key_values"))]


def _past_length(cache: Any) -> int:
    if cache is None:
        return 0
    if hasattr(cache, "get_seq_length"):
        return int(cache.get_seq_length())
    try:  # the legacy tuple of (key, value) per layer: key is (B, heads, past, dim)
        return int(cache[0][0].shape[-2])
    except (TypeError, IndexError, AttributeError):
        return 0


def groups(entries: Sequence[dict[str, Any]], share: int = 1) -> list[dict[str, Any]]:
    """One group per (model, adapter, op), in order of first call: ``n`` sequences (``forward``: calls), tokens
    ``read`` and ``written``, divided by ``share`` (the batch size; ``calls`` and ``each`` kept only when it is 1)."""
    calls: dict[tuple, list[int]] = {}
    each: dict[tuple, list[list[int]]] = {}
    for e in entries:
        key = (e["model"], e["adapter"], e["op"])
        calls.setdefault(key, []).append(len(e["each"]))
        each.setdefault(key, []).extend(e["each"])
    out = []
    for (model, adapter, op), items in each.items():
        shaped = op in SHAPE_OPS  # a watched call is one call already: no ``calls``
        read = sum(b * t for b, t, _ in items) if shaped else sum(r for r, _ in items)
        written = 0 if shaped else sum(w for _, w in items)
        g = {"model": model, "adapter": adapter, "op": op, "n": _per(len(items), share)}
        g.update(read=_per(read, share), written=_per(written, share))
        if share == 1:
            g.update({} if shaped else {"calls": calls[model, adapter, op]}, each=items)  # ``each`` last: the long part
        out.append(g)
    return out


def _per(total: int, share: int) -> float | int:
    return total if share == 1 else round(total / share, 3)
