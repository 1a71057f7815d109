"""An append-only JSONL cache of model calls, keyed by a hash of (namespace, prompt), so a re-run costs
nothing.

The namespace names what answers: the generator's ``describe()`` (model file hash, decoding, batch size; local
paths dropped so the cache survives a moved checkout), or the extractor LM plus its adapter's weights hash.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def machine_fingerprint() -> dict[str, Any]:
    """This host, its CPU/GPU and torch's thread count: a cached *time* is only valid where it was measured."""
    import platform

    from harness.provenance import hardware

    return {**hardware(), "host": platform.node()}


def _strip_paths(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip_paths(v) for k, v in obj.items() if k != "path"}
    if isinstance(obj, list | tuple):
        return [_strip_paths(v) for v in obj]
    return obj


class CallCache:
    """``get(prompts, compute)``: cached outputs for ``prompts``; ``compute`` runs once on the missing
    ones."""

    def __init__(self, path: str | Path, namespace: dict[str, Any]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.namespace = json.dumps(_strip_paths(namespace), sort_keys=True, default=str)
        self.hits = self.misses = 0
        self._rows: dict[str, Any] = {}
        if self.path.is_file():
            with self.path.open(encoding="utf-8") as f:
                for line in f:
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:  # a torn last line from a kill
                        continue
                    self._rows[row["key"]] = row["value"]

    def key(self, prompt: Any) -> str:
        blob = self.namespace + "\n" + json.dumps(prompt, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def has(self, prompt: Any) -> bool:
        return self.key(prompt) in self._rows

    def get(self, prompts: Sequence[Any], compute: Callable[[list[Any]], list[Any]], chunk: int = 32) -> list[Any]:
        """Outputs for ``prompts``; the missing ones are computed ``chunk`` at a time and appended as they come,
        so an interrupted run keeps what it computed."""
        keys = [self.key(p) for p in prompts]
        missing = list(dict.fromkeys(k for k in keys if k not in self._rows))
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        first = {k: p for k, p in zip(keys, prompts, strict=True)}
        for start in range(0, len(missing), max(chunk, 1)):
            part = missing[start : start + chunk]
            values = compute([first[k] for k in part])
            with self.path.open("a", encoding="utf-8") as f:
                for k, v in zip(part, values, strict=True):
                    self._rows[k] = v
                    f.write(json.dumps({"key": k, "value": v}, ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
        return [self._rows[k] for k in keys]
