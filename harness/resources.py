"""One instance per process, handed to whoever asks for the same key: the registry behind the model layer.

The model layer (``harness.lm``) keeps its models here, so the generator's model, a method's token scorer and a
classifier prompt on the same LM share one copy, and a Hydra multirun in one process loads each model once; the
run loop keeps its generator here too, one at a time (a switch releases the last: ``runner.release_generators``).
A method may share an object it builds on a model-layer model (a compressor wrapping the shared LM) with
``shared(key, build)``; it never loads weights of its own here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_REGISTRY: dict[tuple, Any] = {}
_LOCK = threading.RLock()  # re-entrant: a factory may ask for another shared model


def shared(key: tuple, factory: Callable[[], T]) -> T:
    """Return the instance registered under ``key``, building it with ``factory`` the first time."""
    with _LOCK:
        if key not in _REGISTRY:
            _REGISTRY[key] = factory()
        return _REGISTRY[key]


def drop(keep: Callable[[tuple, Any], bool]) -> list[Any]:
    """Forget the instances for which ``keep(key, instance)`` is false and return them (to be closed)."""
    with _LOCK:
        gone = [k for k, v in _REGISTRY.items() if not keep(k, v)]
        return [_REGISTRY.pop(k) for k in gone]


def get(key: tuple) -> Any:
    return _REGISTRY[key]


def loaded() -> list[tuple]:
    """Keys of the instances alive in this process (used by tests and records)."""
    return list(_REGISTRY)
