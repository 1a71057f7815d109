"""The compressor LLM of EDC²-RAG: one chat turn per cluster, greedy (the paper: temperature 0).

- ``LocalLLM``: a causal LM through the model layer (``harness.lm.get_lm``: the same engine as the generator
  when the refs match), batched greedy decoding.
- ``OpenAICompatibleLLM``: ``POST {base_url}/chat/completions`` (OpenAI, or a vLLM/llama.cpp server running
  the generator's model), requests in parallel threads. The API key is read from the environment variable
  named by ``api_key_env`` at call time and never stored on the object or written to records.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class LocalLLM:
    """The compressor LLM in this process, through the model layer (``harness.lm``: vLLM by default, one chat
    turn per prompt, greedy, the call cache)."""

    def __init__(self, model: str, engine: str = "vllm", dtype: str = "auto", max_new_tokens: int = 256,
                 batch_size: int = 8, trust_remote_code: bool = False) -> None:
        self.model_ref, self.engine, self.dtype = model, engine, dtype
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.trust_remote_code = trust_remote_code
        self.lm: Any = None

    @property
    def backend(self) -> str:
        return self.engine

    def load(self) -> None:
        from harness.lm import get_lm

        self.lm = get_lm(self.model_ref, engine=self.engine, dtype=self.dtype, batch_size=self.batch_size,
                         trust_remote_code=self.trust_remote_code)

    def complete(self, prompts: Sequence[str]) -> list[str]:
        if self.lm is None:
            self.load()
        outs = self.lm.generate([[{"role": "user", "content": p}] for p in prompts], self.max_new_tokens)
        return [o.text for o in outs]

    def describe(self) -> dict[str, Any]:
        from harness.models import resolve

        return {"backend": self.backend, "model": resolve(self.model_ref).describe(),
                "lm": self.lm.describe() if self.lm else None, "max_new_tokens": self.max_new_tokens,
                "greedy": True}


class OpenAICompatibleLLM:
    backend = "openai"

    def __init__(self, model: str, base_url: str = "https://api.openai.com/v1",
                 api_key_env: str = "OPENAI_API_KEY", max_new_tokens: int = 512, concurrency: int = 8,
                 timeout_s: float = 120.0, retries: int = 3) -> None:
        self.model_ref, self.base_url, self.key_env = model, base_url.rstrip("/"), api_key_env
        self.max_new_tokens, self.concurrency = max_new_tokens, concurrency
        self.timeout_s, self.retries = timeout_s, retries

    def load(self) -> None:
        """Nothing to load; the key is looked up per request."""

    def _one(self, prompt: str) -> str:
        body = json.dumps({"model": self.model_ref, "messages": [{"role": "user", "content": prompt}],
                           "temperature": 0, "max_tokens": self.max_new_tokens}).encode()
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.key_env) if self.key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(f"{self.base_url}/chat/completions", body, headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                    return json.loads(r.read())["choices"][0]["message"]["content"].strip()
            except OSError:
                if attempt == self.retries:
                    raise
                time.sleep(2**attempt)
        raise RuntimeError("unreachable")

    def complete(self, prompts: Sequence[str]) -> list[str]:
        with ThreadPoolExecutor(max_workers=max(self.concurrency, 1)) as pool:
            return list(pool.map(self._one, prompts))

    def describe(self) -> dict[str, Any]:
        return {"backend": self.backend, "model": self.model_ref, "base_url": self.base_url,
                "key_from_env": self.key_env, "max_new_tokens": self.max_new_tokens, "temperature": 0}
