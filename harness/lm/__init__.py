"""The model layer: the one place that loads, batches and caches language models.

``get_lm(ref, engine=..., dtype=..., adapter=...)`` returns the process-wide ``LM`` for those weights, engine
and dtype (a LoRA ``adapter`` is merged into derived weights first, see ``loading.merged_folder``). An ``LM``
tokenises (chat template or raw text) and runs four batched operations through its engine (vLLM by default,
transformers where asked for or where vLLM cannot serve), each through the persistent call cache:

- ``generate``: greedy completions;
- ``token_logprobs``: log-probabilities of given tokens as the next token (classifier prompts, e.g. Yes/No);
- ``prompt_logprobs``: log p(token | prefix) of every token from a start position (self-information);
- ``answer_nll``: mean NLL per token of an answer (followed by end-of-turn) after a prompt.

Engines: ``vllm`` (``harness.lm.vllm_engine``) and ``transformers`` (``harness.lm.hf_engine``); ``dtype: auto``
picks bf16 only where the hardware runs it natively (``harness.lm.hardware``).
"""

from __future__ import annotations

import atexit
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness import resources
from harness.lm import hardware
from harness.lm.cache import Cached, cached_calls
from harness.protocols import Messages

ENGINES = ("vllm", "transformers")


@dataclass
class Completion:
    """One greedy completion: decoded text, its token ids (stop token excluded), whether it hit the token cap,
    the seconds it cost when computed, and whether it was replayed from the cache."""

    text: str
    token_ids: list[int]
    hit_limit: bool
    seconds: float = 0.0
    replayed: bool = False


class LM:
    """A tokenizer plus an engine plus the call cache; see the module docstring. ``engine`` may be None with a
    ``start`` function that builds it when a call first misses the cache (``get_lm(lazy=True)``)."""

    def __init__(
        self, ref: str, engine: Any, tokenizer: Any, info: dict[str, Any], start: Callable[[], Any] | None = None
    ) -> None:
        self.ref, self._engine, self._start, self.tokenizer, self.info = ref, engine, start, tokenizer, info
        # hub ids have no local digest: the id (and its revision, if pinned in it) keys their calls instead
        weights = info["weights_sha256"] or f"ref:{ref}"
        adapter = info.get("adapter_sha256") or (f"ref:{info['adapter']}" if info.get("adapter") else None)
        self.namespace = f"{weights}|{adapter}|{info['engine']}|{info['dtype']}"
        eos = tokenizer.eos_token_id
        self.stop_ids = [eos] if eos is not None else []

    @property
    def engine(self) -> Any:
        """The engine, started here if it was left for the first computed call."""
        self._ready()
        return self._engine

    @property
    def started(self) -> bool:
        return self._engine is not None

    def _ready(self) -> None:
        """Start a lazy engine (``cached_calls`` does so before it times a computed call)."""
        if self._engine is None:
            assert self._start is not None
            self._engine = self._start()

    # ------------------------------------------------------------------ tokens
    def encode_chat(self, messages: Messages, **template_kwargs: Any) -> list[int]:
        """Token ids of ``messages`` through the chat template, ready for the assistant turn."""
        enc = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True, **template_kwargs
        )
        return list(enc["input_ids"])

    def encode(self, text: str, special: bool = True) -> list[int]:
        """Token ids of raw text (with the tokenizer's special tokens, e.g. BOS, when ``special``)."""
        return list(self.tokenizer(text, add_special_tokens=special)["input_ids"])

    def count(self, text: str) -> int:
        return len(self.encode(text, special=False)) if text else 0

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def _ids(self, prompt: list[int] | Messages) -> list[int]:
        if prompt and isinstance(prompt[0], dict):
            return self.encode_chat(prompt)  # type: ignore[arg-type]
        return [int(t) for t in prompt]  # type: ignore[union-attr]

    # ------------------------------------------------------------------ operations
    def generate(
        self, prompts: Sequence[list[int] | Messages], max_new_tokens: int, stop_ids: Sequence[int] | None = None
    ) -> list[Completion]:
        """Greedy completions of token-id or chat prompts, in input order."""
        ids = [self._ids(p) for p in prompts]
        stops = list(stop_ids) if stop_ids is not None else self.stop_ids
        settings = {"max_new_tokens": int(max_new_tokens), "stop": stops, "greedy": True}
        rows = cached_calls(
            self.namespace,
            "generate",
            ids,
            settings,
            lambda ps: [list(x) for x in self.engine.generate(ps, max_new_tokens, stops)],
            prepare=self._ready,
        )
        return [
            Completion(self.decode(r.value[0]).strip(), list(r.value[0]), bool(r.value[1]), r.seconds, r.replayed)
            for r in rows
        ]

    def token_logprobs(self, prompts: Sequence[list[int] | Messages], token_ids: Sequence[int]) -> list[Cached]:
        """Next-token log-probabilities of ``token_ids`` after each prompt (``.value``: one float per id)."""
        ids = [self._ids(p) for p in prompts]
        return cached_calls(
            self.namespace,
            "token_logprobs",
            ids,
            {"tokens": list(token_ids)},
            lambda ps: self.engine.token_logprobs(ps, list(token_ids)),
            prepare=self._ready,
        )

    def prompt_logprobs(self, prompts: Sequence[list[int]], start: Sequence[int] | int = 0) -> list[Cached]:
        """log p(token j | tokens < j) for j = start + 1 .. len - 1 (``.value``: a list of floats)."""
        starts = [start] * len(prompts) if isinstance(start, int) else list(start)
        items = [[list(p), int(s)] for p, s in zip(prompts, starts, strict=True)]
        return cached_calls(
            self.namespace,
            "prompt_logprobs",
            items,
            {},
            lambda its: self.engine.prompt_logprobs([i[0] for i in its], [i[1] for i in its]),
            prepare=self._ready,
        )

    def answer_ids(self, answer: str) -> list[int]:
        """An answer's tokens followed by end-of-turn, as the generator would emit it."""
        return self.encode(answer, special=False) + self.stop_ids[:1]

    def answer_nll(self, prompts: Sequence[list[int] | Messages], answers: Sequence[str]) -> list[float]:
        """Mean NLL per token of each answer (and its end-of-turn) teacher-forced after its prompt."""
        seqs, starts = [], []
        for p, a in zip(prompts, answers, strict=True):
            head = self._ids(p)
            seqs.append(head + self.answer_ids(a))
            starts.append(len(head) - 1)
        return [-sum(r.value) / len(r.value) for r in self.prompt_logprobs(seqs, starts)]

    def describe(self) -> dict[str, Any]:
        return {"ref": self.ref, **self.info}


def live() -> list[LM]:
    """The LMs alive in this process."""
    return [obj for key in resources.loaded() if key[0] == "lm" and isinstance(obj := resources.get(key), LM)]


def forget_prefixes() -> None:
    """Empty every live engine's prefix cache, so that the next call computes its prompt from scratch (batch-1
    latency of an unseen question); the call cache is another switch (``cache.bypassed``)."""
    for lm in live():
        if lm.started:
            lm.engine.reset_prefix_cache()


def release(which: Callable[[LM], bool] = lambda lm: True) -> int:
    """Close and forget the process's LMs for which ``which(lm)`` holds (e.g. merged-adapter engines no longer
    needed: each vLLM engine holds its weights and KV cache); returns how many were closed."""
    gone = resources.drop(lambda key, obj: not (key[0] == "lm" and isinstance(obj, LM) and which(obj)))
    for lm in gone:
        if lm.started:
            lm.engine.close()
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
    lazy: bool,
) -> LM:
    from harness.lm.loading import adapter_digest, load_hf, merged_folder, weights_digest
    from harness.models import resolve

    path = merged_folder(ref, adapter, trust_remote_code) if adapter else resolve(ref).path
    info: dict[str, Any] = {
        "engine": engine,
        "dtype": dtype,
        "weights_sha256": weights_digest(ref),
        "hardware": hardware.describe(),
        "adapter": adapter,
        "adapter_sha256": adapter_digest(resolve(adapter).path) if adapter else None,
    }
    if engine == "vllm":
        from harness.lm.vllm_engine import VLLMEngine, engine_settings

        def start() -> VLLMEngine:
            eng = VLLMEngine(
                path, dtype, max_model_len, threads, trust_remote_code=trust_remote_code, engine_kwargs=engine_kwargs
            )
            info["engine_settings"] = eng.settings  # what the engine was started with
            _release_at_exit()
            return eng

        info["engine_settings"] = engine_settings(dtype, max_model_len, threads, engine_kwargs)[0]  # until then
        if lazy:
            from transformers import AutoTokenizer

            return LM(ref, None, AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code), info, start)
        eng = start()
        tok = eng.llm.get_tokenizer()
    else:
        import torch

        from harness.lm.hf_engine import TransformersEngine

        torch.set_num_threads(hardware.thread_count(threads))
        model, tok = load_hf(path, dtype, device, trust_remote_code)
        eng = TransformersEngine(model, tok, batch_size)
        info["engine_settings"] = {"threads": torch.get_num_threads(), "device": device, "batch_size": batch_size}
    return LM(ref, eng, tok, info)


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
) -> LM:
    """The process-wide ``LM`` of (weights, adapter, engine, dtype); built on first use. ``lazy`` (vLLM): the
    tokenizer now, the engine (~4-15 s to start on 2 cores) only when a call first misses the call cache, so a
    re-run whose calls all replay never starts it (training re-runs; not for timed runs, whose load belongs
    before the first batch)."""
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r}; valid: {', '.join(ENGINES)}")
    dtype = hardware.pick_dtype(dtype)
    if device == "auto":
        device = "cuda" if hardware.has_cuda() else "cpu"
    key = ("lm", ref, adapter, engine, dtype, device)
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
            lazy,
        ),
    )
    if not lazy:  # a lazy LM of the same key, asked for eagerly now: its engine starts here, not in a timed call
        lm._ready()
    return lm
