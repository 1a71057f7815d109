"""The compressor LLM of EDC²-RAG: one chat turn per cluster, greedy (the paper: temperature 0).

- ``LocalLLM``: a causal LM through the model layer (``harness.lm.get_lm``: the same engine as the generator
  when the refs match), batched greedy decoding.
- ``ServerLLM``: an OpenAI-compatible server (OpenAI, or a vLLM/llama.cpp server running the generator's model)
  through the shared client of ``harness.lm.server`` (the ``openai_server`` generator's): requests in parallel
  threads, retries, a timeout, the call cache. The API key is read from the environment variable named by
  ``api_key_env`` per request and never stored on the object or written to records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from harness.lm.fit import Fit


def fit_user_turn(lm: Any, render: Callable[..., str], parts: dict[str, Any], max_new_tokens: int) -> Fit:
    """``render(**parts)`` as one user turn fitted to ``lm``; the fit's ``prompt`` is the turn's text."""
    from harness.lm.fit import fit_prompt

    fit = fit_prompt(lm, lambda **p: [{"role": "user", "content": render(**p)}], parts, max_new_tokens)
    fit.prompt = fit.prompt[0]["content"]
    return fit


class LocalLLM:
    """The compressor LLM in this process, through the model layer (``harness.lm``: vLLM by default, one chat
    turn per prompt, greedy, the call cache)."""

    def __init__(
        self,
        model: str,
        engine: str = "vllm",
        dtype: str = "auto",
        max_new_tokens: int = 256,
        batch_size: int = 8,
        trust_remote_code: bool = False,
    ) -> None:
        self.model_ref, self.engine, self.dtype = model, engine, dtype
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.trust_remote_code = trust_remote_code
        self.lm: Any = None

    @property
    def backend(self) -> str:
        return self.engine

    def load(self) -> None:
        from harness.lm import get_lm

        self.lm = get_lm(
            self.model_ref,
            engine=self.engine,
            dtype=self.dtype,
            batch_size=self.batch_size,
            trust_remote_code=self.trust_remote_code,
        )

    def fit(self, render: Callable[..., str], parts: dict[str, Any]) -> Fit:
        """The user turn ``render(**parts)`` fitted to this LM (``harness.lm.fit``; ``.prompt`` is its text)."""
        if self.lm is None:
            self.load()
        return fit_user_turn(self.lm, render, parts, self.max_new_tokens)

    def complete(self, prompts: Sequence[str]) -> list[str]:
        if self.lm is None:
            self.load()
        outs = self.lm.generate([[{"role": "user", "content": p}] for p in prompts], self.max_new_tokens)
        return [o.text for o in outs]

    def describe(self) -> dict[str, Any]:
        from harness.lm.models import resolve

        return {
            "backend": self.backend,
            "model": resolve(self.model_ref).describe(),
            "lm": self.lm.describe() if self.lm else None,
            "max_new_tokens": self.max_new_tokens,
            "greedy": True,
        }


class ServerLLM:
    """The compressor LLM behind an OpenAI-compatible server (OpenAI, or a vLLM server running the generator's
    model): the shared client ``harness.lm.server.ServerClient`` (retries, timeout, concurrency, the call cache),
    one user turn per prompt, greedy."""

    backend = "openai_server"

    def __init__(
        self,
        model: str,
        base_url: str = "https://api.openai.com/v1",
        api_key_env: str | None = "OPENAI_API_KEY",
        max_new_tokens: int = 512,
        concurrency: int = 8,
        timeout_s: float = 120.0,
        retries: int = 5,
        backoff_s: float = 1.0,
        context_length: int = 8192,
    ) -> None:
        from harness.lm.server import ServerClient

        self.client = ServerClient(base_url, model, api_key_env, timeout_s, retries, backoff_s, concurrency)
        self.max_new_tokens, self.context_length = max_new_tokens, int(context_length)

    def load(self) -> None:
        """Nothing to load; the key is looked up per request."""

    def fit(self, render: Callable[..., str], parts: dict[str, Any]) -> Fit:
        """The user turn ``render(**parts)`` fitted to the served model's ``context_length`` (``harness.lm.fit``),
        its tokens bounded by ``ByteEstimate`` (no tokenizer at hand)."""
        from harness.lm.fit import ByteEstimate

        return fit_user_turn(ByteEstimate(self.client.model, self.context_length), render, parts, self.max_new_tokens)

    def complete(self, prompts: Sequence[str]) -> list[str]:
        replies = self.client.complete([[{"role": "user", "content": p}] for p in prompts], self.max_new_tokens)
        return [r.text for r in replies]

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            **self.client.describe(),
            "max_new_tokens": self.max_new_tokens,
            "greedy": True,
        }
