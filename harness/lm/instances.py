"""The process's language models: ``get_lm`` builds one ``LM`` per (weights, adapter, engine, dtype) and hands
the same instance to every caller; ``live``, ``release`` and ``forget_prefixes`` act on those alive.

Engines: ``vllm`` (``harness.lm.vllm_engine``) and ``transformers`` (``harness.lm.hf_engine``); ``dtype: auto``
picks bf16 only where the hardware runs it natively (``harness.lm.hardware``). A LoRA ``adapter`` is merged into
derived weights first (``harness.lm.loading.merged_folder``).
"""

from __future__ import annotations

import atexit
import functools
from collections.abc import Callable
from typing import Any

from harness import resources
from harness.lm import hardware
from harness.lm.model import LM
from harness.lm.speculative import Speculation
from harness.lm.speculative import active as speculative_active

ENGINES = ("vllm", "transformers")


def live() -> list[LM]:
    """The LMs alive in this process."""
    return [obj for key in resources.loaded() if key[0] == "lm" and isinstance(obj := resources.get(key), LM)]


def forget_prefixes() -> None:
    """Empty every live engine's prefix cache, so that the next call computes its prompt from scratch (batch-1
    latency of an unseen question); the call cache is another switch (``cache.bypassed``)."""
    for lm in live():
        for eng in lm.engines():
            eng.reset_prefix_cache()


def release(which: Callable[[LM], bool] = lambda lm: True) -> int:
    """Close and forget the process's LMs for which ``which(lm)`` holds (e.g. merged-adapter engines no longer
    needed: each vLLM engine holds its weights and KV cache); returns how many were closed."""
    gone = resources.drop(lambda key, obj: not (key[0] == "lm" and isinstance(obj, LM) and which(obj)))
    for lm in gone:
        for eng in lm.engines():
            eng.close()
    return len(gone)


_EXIT_HOOK: list[bool] = []


def _release_at_exit() -> None:
    """Close the process's LMs when it exits (once registered): an engine left to vLLM's own exit hook waits its
    5-s grace (``VLLMEngine.close``). Registered after the engine is built, so it runs before vLLM's hooks."""
    if not _EXIT_HOOK:
        atexit.register(release)
        _EXIT_HOOK.append(True)


def _build(
    ref: str,
    engine: str,
    dtype: str,
    adapter: str | None,
    device: str,
    threads: int | None,
    max_model_len: int | None,
    batch_size: int,
    trust_remote_code: bool,
    engine_kwargs: dict[str, Any],
    spec: Speculation | None,
) -> LM:
    from harness.lm.loading import adapter_digest, load_hf, merged_folder, weights_digest
    from harness.lm.models import require_model, resolve

    require_model(ref, resolve(ref).path)  # a local folder without config, weights or tokenizer: one line
    path = merged_folder(ref, adapter, trust_remote_code) if adapter else resolve(ref).path
    info: dict[str, Any] = {
        "engine": engine,
        "dtype": dtype,
        "weights_sha256": weights_digest(ref),
        "hardware": hardware.describe(),
        "adapter": adapter,
        "adapter_sha256": adapter_digest(resolve(adapter).path) if adapter else None,
        "speculative": spec.describe() if spec else None,
    }
    if engine == "vllm":
        from transformers import AutoTokenizer

        from harness.lm.vllm_engine import engine_settings

        start = _vllm_start(path, dtype, max_model_len, threads, trust_remote_code, engine_kwargs, info, None)
        spec_start = None
        if spec is not None:  # generation on its own engine: vLLM returns no log-probabilities with speculation
            spec_start = _vllm_start(path, dtype, max_model_len, threads, trust_remote_code, engine_kwargs, info, spec)
        info["engine_settings"] = engine_settings(dtype, max_model_len, threads, engine_kwargs)[0]  # until started
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        return LM(ref, None, tok, info, start, spec_start, context_length(path, max_model_len, trust_remote_code))
    import torch

    from harness.lm.hf_engine import TransformersEngine

    torch.set_num_threads(hardware.thread_count(threads))
    model, tok = load_hf(path, dtype, device, trust_remote_code)
    eng = TransformersEngine(model, tok, batch_size, speculation=spec)
    info["engine_settings"] = {"threads": torch.get_num_threads(), "device": device, "batch_size": batch_size}
    return LM(ref, eng, tok, info, context_length=context_length(path, max_model_len, trust_remote_code))


@functools.cache
def window(ref: str, max_model_len: int | None, trust_remote_code: bool = False) -> int | None:
    """The context length an LM of ``ref`` built with ``max_model_len`` takes (``context_length``): part of its
    key, so a caller that asks for a narrower engine gets one, and callers whose settings give the same window
    (an explicit 8,192 and SmolLM2's own) share it."""
    if max_model_len:
        return int(max_model_len)
    from harness.lm.models import resolve

    try:
        path = resolve(ref).path
    except (OSError, ValueError):  # the build names what is wrong
        return None
    return _own_window(path, trust_remote_code)


def context_length(path: str, max_model_len: int | None, trust_remote_code: bool = False) -> int | None:
    """The prompt + new tokens an engine on ``path`` takes: ``max_model_len`` if set (vLLM's setting), else the
    model config's ``max_position_embeddings`` (vLLM's default; transformers runs past it, but with positions
    the model never saw); None when neither is known."""
    return int(max_model_len) if max_model_len else _own_window(path, trust_remote_code)


@functools.cache
def _own_window(path: str, trust_remote_code: bool) -> int | None:
    """The model config's ``max_position_embeddings`` (None when unknown)."""
    from harness.lm.loading import model_config

    try:
        n = getattr(model_config(path, trust_remote_code), "max_position_embeddings", None)
    except (OSError, ValueError):
        return None
    return int(n) if n else None


def _vllm_start(
    path: str,
    dtype: str,
    max_model_len: int | None,
    threads: int | None,
    trust_remote_code: bool,
    engine_kwargs: dict[str, Any],
    info: dict[str, Any],
    spec: Speculation | None,
) -> Callable[[], Any]:
    """A function that starts a vLLM engine on ``path`` (with ``spec``'s speculation when given) and records the
    settings it started with in ``info`` (``engine_settings``, or ``generation_engine_settings`` for the
    speculating one)."""

    def start() -> Any:
        from harness.lm.vllm_engine import VLLMEngine

        kwargs = engine_kwargs
        if spec:  # with its counters of proposed and accepted tokens (``VLLMEngine.speculation_counts``)
            kwargs = {**engine_kwargs, "speculative_config": spec.vllm_config(), "disable_log_stats": False}
        eng = VLLMEngine(path, dtype, max_model_len, threads, trust_remote_code=trust_remote_code, engine_kwargs=kwargs)
        info["generation_engine_settings" if spec else "engine_settings"] = eng.settings
        _release_at_exit()
        return eng

    return start


def get_lm(
    ref: str,
    engine: str = "vllm",
    dtype: str = "auto",
    adapter: str | None = None,
    device: str = "auto",
    threads: int | None = None,
    max_model_len: int | None = None,
    batch_size: int = 8,
    trust_remote_code: bool = False,
    engine_kwargs: dict[str, Any] | None = None,
    lazy: bool = False,
    speculative: Speculation | dict[str, Any] | str | None = "default",
) -> LM:
    """The process-wide ``LM`` of (weights, adapter, engine, dtype, speculation, ``window``); built on first use.
    ``lazy`` (vLLM): the tokenizer now, the engine (~4-15 s to start on 2 cores) only when a call first misses the call
    cache, so a re-run whose calls all replay never starts it (training re-runs; not for timed runs, whose load
    belongs before the first batch). ``speculative``: the run's setting (``"default"``, ``speculative.configure``),
    another one, or None (off); it is on only for the dtypes it names (``harness.lm.speculative``)."""
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r}; valid: {', '.join(ENGINES)}")
    dtype = hardware.pick_dtype(dtype)
    if device == "auto":
        device = "cuda" if hardware.has_cuda() else "cpu"
    spec = speculative_active(speculative, dtype)
    key = ("lm", ref, adapter, engine, dtype, device, spec, window(ref, max_model_len, trust_remote_code))
    lm = resources.shared(
        key,
        lambda: _build(
            ref,
            engine,
            dtype,
            adapter,
            device,
            threads,
            max_model_len,
            batch_size,
            trust_remote_code,
            dict(engine_kwargs or {}),
            spec,
        ),
    )
    if not lazy:  # a lazy LM of the same key, asked for eagerly now: its engine starts here, not in a timed call
        lm._ready()
    return lm
