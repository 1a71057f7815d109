"""One persistent cache of language-model calls, shared by every method and process (SQLite, WAL mode).

A row is keyed by SHA-256 of (namespace, operation, prompt, settings): the namespace names what answers (the
weights' SHA-256, the merged adapter's SHA-256, engine and dtype), so other weights never hit it. Every row
keeps the seconds the call took when it was computed: a replayed call reports those seconds, so latency
figures stay what they would be without the cache. Concurrent writers are safe: SQLite serialises them, with
a busy timeout, and an insert that loses a race is ignored (both computed the same value).

``RAG_HARNESS_LM_CACHE=0`` (or ``lm.cache=false`` in a run's config) turns it off; its file is
``$RAG_HARNESS_CACHE/lm-calls.sqlite`` unless ``RAG_HARNESS_LM_CACHE_PATH`` or ``lm.cache_path`` names another.

A cache is never the reason a run cannot go on. A file that is not a database, or fails SQLite's
``quick_check`` when the process first opens it (or reports itself malformed later), is moved aside to
``<file>.corrupt-<time>`` with one warning naming both paths, and a new cache starts in its place. A cache that
cannot be written (a read-only folder or file) leaves the run without a cache, with one warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
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
_UNUSABLE: set[str] = set()  # cache files this process could not write: it runs without them
log = logging.getLogger(__name__)


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


def _open(path: Path) -> sqlite3.Connection:
    """A checked connection: WAL mode, the calls table, and SQLite's ``quick_check`` passed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path, timeout=60, isolation_level=None)
    try:
        _wal(con)
        con.execute("PRAGMA synchronous=NORMAL")
        con.execute(
            "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, value TEXT NOT NULL, seconds REAL NOT NULL)"
        )
        verdict = con.execute("PRAGMA quick_check").fetchone()[0]
        if verdict != "ok":
            first = next((x for x in verdict.splitlines() if not x.startswith("***")), verdict)
            raise sqlite3.DatabaseError(f"integrity check failed: {first}")
    except BaseException:
        con.close()
        raise
    return con


def _set_aside(path: Path, error: Exception) -> None:
    """Move a damaged cache file (and its WAL files) to ``<file>.corrupt-<time>``, with one warning."""
    aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
    for suffix in ("", "-wal", "-shm"):
        part = Path(f"{path}{suffix}")
        if part.exists():
            part.replace(Path(f"{aside}{suffix}"))
    log.warning("LM call cache %s is damaged (%s): moved to %s; a new cache starts", path, error, aside)


def _unusable(path: Path, error: Exception) -> None:
    if str(path) not in _UNUSABLE:
        log.warning("LM call cache %s cannot be written (%s): this run goes on without a cache", path, error)
    _UNUSABLE.add(str(path))


def _connect(path: Path) -> sqlite3.Connection | None:
    """This thread's connection to the cache file, opened (and healed) once; None when it cannot be written."""
    if str(path) in _UNUSABLE:
        return None
    conns = getattr(_LOCAL, "conns", None)
    if conns is None:
        conns = _LOCAL.conns = {}
    key = (str(path), os.getpid())
    if key not in conns:
        try:
            try:
                conns[key] = _open(path)
            except sqlite3.DatabaseError as e:
                if isinstance(e, sqlite3.OperationalError) or not path.is_file():
                    raise
                _set_aside(path, e)
                conns[key] = _open(path)
        except (OSError, sqlite3.OperationalError) as e:
            _unusable(path, e)
            return None
    return conns[key]


def _forget(path: Path) -> None:
    """Drop this thread's connection to ``path`` (after it was set aside)."""
    conn = getattr(_LOCAL, "conns", {}).pop((str(path), os.getpid()), None)
    if conn is not None:
        conn.close()


def call_key(namespace: str, op: str, prompt: Any, settings: dict[str, Any]) -> str:
    blob = json.dumps([namespace, op, prompt, settings], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class Cached:
    """One call's value, the seconds it took when computed, and whether it came from the cache."""

    value: Any
    seconds: float
    replayed: bool


def _uncached(prompts: Sequence[Any], compute: Callable, prepare: Callable[[], Any] | None) -> list[Cached]:
    if prepare is not None:
        prepare()
    t0 = time.perf_counter()
    values = compute(list(prompts))
    each = (time.perf_counter() - t0) / len(prompts)
    return [Cached(v, each, False) for v in values]


def _guarded(path: Path, action: Callable[[], Any]) -> tuple[bool, Any]:
    """``(True, action())``, or ``(False, None)`` when the cache failed under it: a damaged file is set aside
    (the next call starts a new one), an unwritable one is left for the rest of the process."""
    try:
        return True, action()
    except sqlite3.OperationalError as e:
        _forget(path)
        _unusable(path, e)
    except sqlite3.DatabaseError as e:
        _forget(path)
        _set_aside(path, e)
    return False, None


def _lookup(path: Path, con: sqlite3.Connection, unique: list[str]) -> dict[str, Cached] | None:
    found: dict[str, Cached] = {}
    for start in range(0, len(unique), 500):
        part = unique[start : start + 500]
        query = f"SELECT key, value, seconds FROM calls WHERE key IN ({','.join('?' * len(part))})"
        ok, rows = _guarded(path, lambda q=query, p=part: con.execute(q, p).fetchall())
        if not ok:
            return None
        found.update({k: Cached(json.loads(v), s, True) for k, v, s in rows})
    return found


_INSERT = "INSERT OR IGNORE INTO calls (key, value, seconds) VALUES (?, ?, ?)"


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
    engine that a run whose calls all replay never needs). A cache that fails is left out (module docstring)."""
    if not prompts:
        return []
    path = cache_path()
    con = _connect(path) if enabled() else None
    keys = [call_key(namespace, op, p, settings) for p in prompts]
    unique = list(dict.fromkeys(keys))
    found = _lookup(path, con, unique) if con is not None else None
    if found is None:
        return _uncached(prompts, compute, prepare)
    first = dict(zip(keys, prompts, strict=True))
    missing = [k for k in unique if k not in found]
    if missing and prepare is not None:
        prepare()
    storing = True
    for start in range(0, len(missing), max(chunk, 1)):
        part = missing[start : start + chunk]
        t0 = time.perf_counter()
        values = compute([first[k] for k in part])
        each = (time.perf_counter() - t0) / len(part)
        rows = [(k, json.dumps(v), each) for k, v in zip(part, values, strict=True)]
        if storing:
            storing, _ = _guarded(path, lambda r=rows: con.executemany(_INSERT, r))
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
