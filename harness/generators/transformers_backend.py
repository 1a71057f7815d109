"""The transformers engine behind the shared generator (``generator=smollm2_transformers``)."""

from __future__ import annotations

from typing import Any

from harness.generators.lm_generator import LMGenerator


class TransformersGenerator(LMGenerator):
    """``LMGenerator`` on the transformers engine (padded batches of ``batch_size``); fp32 unless told."""

    def __init__(self, model: str, name: str, dtype: str = "float32", **kwargs: Any) -> None:
        super().__init__(model, name, engine="transformers", dtype=dtype, **kwargs)
