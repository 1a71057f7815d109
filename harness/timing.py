"""Wall-clock timing of stages with a monotonic clock."""

from __future__ import annotations

import time
from contextlib import contextmanager


class Stopwatch:
    """Accumulates seconds per named stage: ``with sw("extract"): ...``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - t0

    def per_item(self, n: int) -> dict[str, float]:
        """Each stage's seconds divided over ``n`` items (amortised per example in a batch)."""
        return {k: v / max(n, 1) for k, v in self.seconds.items()}
