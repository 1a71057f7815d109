"""RAG context-compression benchmark harness: the core (types, data, generator, metrics, records, run loop).

The core knows no method: methods live in ``methods/`` and are built from Hydra configs by ``_target_``.
``harness.evaluate(method, dataset, ...)`` runs one configuration from Python (``harness.api``), imported on
first use so that ``import harness`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.api import Evaluation, evaluate

__version__ = "0.1.0"
__all__ = ["Evaluation", "__version__", "evaluate"]
_LAZY = {"evaluate", "Evaluation"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from harness import api

        return getattr(api, name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
