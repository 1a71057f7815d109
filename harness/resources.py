"""One model instance per process, handed to whoever asks for the same model.

The generator's model, a method's token scorer and a classifier prompt on the same LM all share one copy;
a Hydra multirun in one process loads each model once.
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


def causal_lm(ref: str, dtype: str = "float32", trust_remote_code: bool = False):
    """(model, tokenizer) of a causal LM on the CPU, in eval mode: ``harness.lm.loading.load_hf``'s instance."""
    from harness.lm.loading import load_hf

    return load_hf(ref, dtype, "cpu", trust_remote_code)


def sentence_encoder(ref: str, device: str = "cpu", trust_remote_code: bool = False):
    """A sentence-transformers encoder, shared per (ref, device)."""

    def build():
        from sentence_transformers import SentenceTransformer

        from harness.models import resolve

        return SentenceTransformer(resolve(ref).path, device=device, trust_remote_code=trust_remote_code)

    return shared(("sentence_encoder", ref, device), build)
