"""One persistent cache of language-model calls, shared by every method and process (SQLite, WAL mode).

A row is keyed by SHA-256 of (namespace, operation, prompt, settings): the namespace names what answers (the
weights' SHA-256, the merged adapter's SHA-256, engine and dtype), so other weights never hit it. Every row
keeps the seconds the call took when it was computed: a replayed call reports those seconds, so latency
figures stay what they would be without the cache. Concurrent writers are safe: SQLite serialises them, with
a busy timeout, and an insert that loses a race is ignored (both computed the same value).

``RAG_HARNESS_LM_CACHE=0`` (or ``lm.cache=false`` in a run's config) turns it off; its file is
``$RAG_HARNESS_CACHE/lm-calls.sqlite`` unless ``RAG_HARNESS_LM_CACHE_PATH`` or ``lm.cache_path`` names another.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SETTINGS: dict[str, Any] = {"enabled": None, "path": None, "bypass": False}
_LOCAL = threading.local()


@dataclass
class Replays:
    """Calls answered from the cache in this process, with the seconds they were measured at."""

    calls: int = 0
    seconds: float = 0.0


REPLAYS = Replays()


def configure(enabled: bool | None = None, path: str | None = None) -> None:
    """Turn the cache on or off and choose its file (None: the environment's or the default)."""
    _SETTINGS["enabled"], _SETTINGS["path"] = enabled, path


@contextmanager
def bypassed():
    """Inside the block every call computes (nothing read or written), whatever the settings: a batch-1 latency
    pass must not replay the seconds a call took in a batch."""
    old = _SETTINGS["bypass"]
    _SETTINGS["bypass"] = True
    try:
        yield
    finally:
        _SETTINGS["bypass"] = old


def enabled() -> bool:
    if _SETTINGS["bypass"]:
        return False
    if _SETTINGS["enabled"] is not None:
        return bool(_SETTINGS["enabled"])
    return os.environ.get("RAG_HARNESS_LM_CACHE", "1").lower() not in ("0", "false", "no", "off")


def cache_path() -> Path:
    from harness.lm.models import cache_dir

    return Path(_SETTINGS["path"] or os.environ.get("RAG_HARNESS_LM_CACHE_PATH") or cache_dir() / "lm-calls.sqlite")


def _wal(con: sqlite3.Connection, tries: int = 60) -> None:
    """WAL mode; switching to it needs the database to itself, and SQLite reports a concurrent opener as busy at
    once (its busy timeout does not cover a journal-mode change), so retry for up to about a minute."""
    for i in range(tries):
        try:
            con.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or i == tries - 1:
                raise
            time.sleep(min(1.0, 0.05 * (i + 1)))


def _connect(path: Path) -> sqlite3.Connection:
    conns = getattr(_LOCAL, "conns", None)
    if conns is None:
        conns = _LOCAL.conns = {}
    key = (str(path), os.getpid())
    if key not in conns:
        path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(path, timeout=60, isolation_level=None)
        _wal(con)
        con.execute("PRAGMA synchronous=NORMAL")
        con.execute(
            "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, value TEXT NOT NULL, seconds REAL NOT NULL)"
        )
        conns[key] = con
    return conns[key]


def call_key(namespace: str, op: str, prompt: Any, settings: dict[str, Any]) -> str:
    blob = json.dumps([namespace, op, prompt, settings], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class Cached:
    """One call's value, the seconds it took when computed, and whether it came from the cache."""

    value: Any
    seconds: float
    replayed: bool


def cached_calls(
    namespace: str,
    op: str,
    prompts: Sequence[Any],
    settings: dict[str, Any],
    compute: Callable[[list[Any]], list[Any]],
    chunk: int = 64,
    prepare: Callable[[], Any] | None = None,
) -> list[Cached]:
    """Values of ``compute`` over ``prompts``: cached ones read, missing ones computed ``chunk`` at a time and
    stored as they come (an interrupted run keeps what it computed). A chunk's seconds are split evenly over
    its calls. ``prepare`` runs once before the first computed call, outside the timing (e.g. starting an
    engine that a run whose calls all replay never needs)."""
    if not prompts:
        return []
    if not enabled():
        if prepare is not None:
            prepare()
        t0 = time.perf_counter()
        values = compute(list(prompts))
        each = (time.perf_counter() - t0) / len(prompts)
        return [Cached(v, each, False) for v in values]
    con = _connect(cache_path())
    keys = [call_key(namespace, op, p, settings) for p in prompts]
    found: dict[str, Cached] = {}
    unique = list(dict.fromkeys(keys))
    for start in range(0, len(unique), 500):
        part = unique[start : start + 500]
        rows = con.execute(
            f"SELECT key, value, seconds FROM calls WHERE key IN ({','.join('?' * len(part))})", part
        ).fetchall()
        found.update({k: Cached(json.loads(v), s, True) for k, v, s in rows})
    first = dict(zip(keys, prompts, strict=True))
    missing = [k for k in unique if k not in found]
    if missing and prepare is not None:
        prepare()
    for start in range(0, len(missing), max(chunk, 1)):
        part = missing[start : start + chunk]
        t0 = time.perf_counter()
        values = compute([first[k] for k in part])
        each = (time.perf_counter() - t0) / len(part)
        con.executemany(
            "INSERT OR IGNORE INTO calls (key, value, seconds) VALUES (?, ?, ?)",
            [(k, json.dumps(v), each) for k, v in zip(part, values, strict=True)],
        )
        found.update({k: Cached(v, each, False) for k, v in zip(part, values, strict=True)})
    out = []
    seen: set[str] = set()
    for k in keys:
        c = found[k]
        if k in seen:  # a duplicate prompt in the same call costs nothing more
            c = Cached(c.value, 0.0, c.replayed)
        seen.add(k)
        if c.replayed:
            REPLAYS.calls += 1
            REPLAYS.seconds += c.seconds
        out.append(c)
    return out
