"""Compress once, read many: a run takes the compressed contexts an earlier run of the same method already made.

On the embedded profile a method's context does not depend on the reader, so a run under another generator reads
it back instead of compressing again (the compressor is then never bound: no compressor model loads when every
context is there). What is redone is what belongs to the reader: the prompt, the answer, its scores, and CR,
whose token counts are recounted with this generator's tokenizer. ``compress_s`` and ``stages`` stay the figures
measured by the run that made the context (batched ones in ``predictions.jsonl``, batch-1 ones in
``latency.jsonl``), and each record names its source under ``reused``.

**The context key** (``identity``): the run's key config (``harness.runner.key_config``) without the generator,
where every absolute path that exists (the dataset file, trained artifacts) is replaced by the SHA-256 of its
content, every ``embedded:`` model reference gets the SHA-256 of its weights, and every ``_target_`` the SHA-256
of its code (the method's module, or its package's ``.py`` files; ``source_digest``). It holds the method's config
(knobs, artifacts, code), the dataset (file, split, ``top_k``, rank, sample and seed), the profile and the
``models`` block (the methods' own LMs and encoders, their engine and dtype: configured apart from the
generator); a context is then matched by example id. The core's shared code (``harness.text``'s sentence
splitter, ``harness.influence``) is not in it: a change there calls for ``reuse=false``.

**A method that reads the generator** (``Compressor.reads_generator``: the CI oracle scores with it, a
token-budget reranker counts with its tokenizer) has no context key and is always computed. Trained artifacts
labelled through a generator (CompSelect, FineFilter, CSM) are reused: the artifact is fixed, so recomputing under
another reader gives the same context; their ``trained_through`` stays in ``method_info``.

**Where contexts come from**: the run folders under ``results_dir/<profile>/<generator>/<dataset>/<method>`` of
another generator whose ``run.json`` holds the same context key (``contexts.key``, written by every run since this
module exists; archived runs keep no context text): a rerun under the same generator computes, as before; and
the file of ``contexts=FILE`` (``python -m leaderboard export-contexts``), which must hold every context the run
needs. ``reuse=false`` computes every context (the regression gate runs so).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.prompt import render_documents
from harness.protocols import Compressor
from harness.records import LATENCY, PREDICTIONS, RUN, config_key, read_jsonl
from harness.types import Compressed, Example, Unit
from harness.validate import ConfigError

log = logging.getLogger(__name__)

EMBEDDED = "embedded:"


# -- the context key ---------------------------------------------------------------------------------------------
def path_digest(path: Path) -> str:
    """SHA-256 of a file, or of a folder's (relative path, file SHA-256) list."""
    from harness.lm.models import _cached_hash

    if path.is_file():
        return _cached_hash(path)
    files = sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    listing = [[str(p.relative_to(path)), _cached_hash(p)] for p in files]
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()


def _model_digest(ref: str) -> str | None:
    from harness.lm.models import resolve

    try:
        return resolve(ref).sha256
    except (OSError, ValueError) as e:  # the package is missing: no digest, so no match
        log.warning("reuse: %s cannot be resolved (%s); its contexts are not reused", ref, e)
        return None


def source_digest(target: str) -> str | None:
    """SHA-256 of the code behind a ``_target_``: its module's file, or every ``.py`` file of its package when the
    module sits in a method's package (``methods/<name>/``); None when it cannot be found."""
    import importlib.util

    module = target.rsplit(".", 1)[0]
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    origin = Path(spec.origin)
    files = sorted(origin.parent.glob("*.py")) if (origin.parent / "__init__.py").is_file() else [origin]
    if origin.parent.name == "methods":  # a single-file method: its own file only
        files = [origin]
    listing = [[f.name, hashlib.sha256(f.read_bytes()).hexdigest()] for f in files]
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()


def _content(node: Any) -> Any:
    """``node`` with existing absolute paths replaced by their content's digest, model refs given theirs and
    ``_target_`` classes the digest of their code."""
    if isinstance(node, dict):
        out = {k: _content(v) for k, v in node.items()}
        if isinstance(node.get("_target_"), str):
            out["_target_"] = {"target": node["_target_"], "source_sha256": source_digest(node["_target_"])}
        return out
    if isinstance(node, list):
        return [_content(v) for v in node]
    if isinstance(node, str) and node.startswith(EMBEDDED):
        return {"ref": node, "sha256": _model_digest(node)}
    if isinstance(node, str) and node.startswith("/") and Path(node).exists():
        return {"sha256": path_digest(Path(node))}
    return node


def identity(key_cfg: dict[str, Any], compressor: Compressor) -> str | None:
    """The context key of a run (see the module docstring); None for a method that reads the generator."""
    if getattr(compressor, "reads_generator", False):
        return None
    return config_key(_content({k: v for k, v in key_cfg.items() if k != "generator"}))


# -- documents <-> the rendered context --------------------------------------------------------------------------
def split_documents(context: str) -> list[str]:
    """The documents of a context rendered by ``render_documents`` (``Doc1: ...\\nDoc2: ...``). Exact whenever
    no document holds the next ``\\nDocN: `` marker itself; a record keeps its ``documents`` where it is not."""
    if not context:
        return []
    if not context.startswith("Doc1: "):
        raise ValueError("a rendered context starts with 'Doc1: '")
    docs, start, j = [], len("Doc1: "), 2
    while (end := context.find(f"\nDoc{j}: ", start)) >= 0:
        docs.append(context[start:end])
        start, j = end + len(f"\nDoc{j}: "), j + 1
    return [*docs, context[start:]]


def documents_field(documents: Sequence[str]) -> dict[str, list[str]]:
    """``{"documents": [...]}`` for a record whose context does not split back into its documents, else ``{}``."""
    docs = list(documents)
    return {} if split_documents(render_documents(docs)) == docs else {"documents": docs}


# -- the store ---------------------------------------------------------------------------------------------------
@dataclass
class Stored:
    """One example's context as an earlier run made it, with that run's timings and its name (``source``)."""

    documents: list[str]
    units: list[list[int | None]] | None
    compress_s: float
    stages: dict[str, float]
    meta: dict[str, Any]
    source: dict[str, Any]
    tokens: list[dict[str, Any]] | None = None  # the source's compress-stage token groups (``harness.lm.meter``)

    def compressed(self) -> Compressed:
        units = None if self.units is None else [Unit(p, s) for p, s in self.units]
        return Compressed(list(self.documents), units, dict(self.stages or {}), _without_generator_cut(self.meta))


def _without_generator_cut(meta: dict[str, Any] | None) -> dict[str, Any]:
    """A record's ``meta`` without the generator's prompt cut (``truncated.generator``): the new reader adds its."""
    meta = dict(meta or {})
    cuts = {k: v for k, v in (meta.get("truncated") or {}).items() if k != "generator"}
    meta.pop("truncated", None)
    return {**meta, "truncated": cuts} if cuts else meta


def stored_of(record: dict[str, Any], source: dict[str, Any]) -> Stored | None:
    """The context of a full prediction record (None for a failed or slimmed one)."""
    if "error" in record or "context" not in record:
        return None
    docs = record.get("documents") or split_documents(record["context"] or "")
    if render_documents(docs) != (record["context"] or ""):
        return None
    return Stored(
        docs,
        record.get("units"),
        float(record["compress_s"]),
        record.get("stages") or {},
        record.get("meta") or {},
        record.get("reused") or source,
        compress_tokens(record),
    )


def compress_tokens(record: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A record's compress-stage token groups (None where it predates token accounting)."""
    return (record.get("tokens") or {}).get("compress")


@dataclass
class ContextStore:
    """Contexts by example id (accuracy pass) and batch-1 timings by id (latency pass), under one context key;
    ``method`` holds the source's ``method_weights`` and ``method_info`` (its ``run.json`` ``contexts``)."""

    key: str | None
    records: dict[str, Stored] = field(default_factory=dict)
    latency: dict[str, dict[str, Any]] = field(default_factory=dict)
    method: dict[str, Any] = field(default_factory=dict)

    def missing(self, todo: Sequence[Example], lat_todo: Sequence[Example]) -> list[str]:
        """The ids this store cannot serve: contexts of ``todo``, contexts or batch-1 timings of ``lat_todo``."""
        out = [e.id for e in todo if e.id not in self.records]
        return out + [e.id for e in lat_todo if e.id not in self.records or e.id not in self.latency]

    def add_run(self, folder: Path, run: dict[str, Any]) -> None:
        source = {"run": str(folder), "run_key": run.get("key"), "generator": _generator_of(run)}
        for r in read_jsonl(folder / PREDICTIONS):
            if r.get("id") not in self.records and (s := stored_of(r, source)) is not None:
                self.records[r["id"]] = s
        for r in read_jsonl(folder / LATENCY):
            self.latency.setdefault(r["id"], r)
        self.method = self.method or {k: v for k, v in run["contexts"].items() if k != "key"}


def _generator_of(run: dict[str, Any]) -> str | None:
    return ((run.get("config") or {}).get("generator") or {}).get("name")


def _run_files(root: Path, profile: str, dataset: str, method: str) -> Iterator[Path]:
    base = root / profile
    if base.is_dir():
        for gen in sorted(p for p in base.iterdir() if p.is_dir()):
            folder = gen / dataset / method
            if folder.is_dir():
                yield from sorted(folder.rglob(RUN))


def from_results(root: str | Path, key: str, where: tuple[str, str, str], generator: str) -> ContextStore:
    """The contexts under ``root/<profile>/*/<dataset>/<method>`` (``where``) made under ``key`` by runs of another
    generator than ``generator`` (this run's)."""
    store = ContextStore(key)
    for run_file in _run_files(Path(root), *where):
        try:
            run = json.loads(run_file.read_text())
        except (OSError, ValueError):
            continue
        if (run.get("contexts") or {}).get("key") == key and _generator_of(run) != generator:
            store.add_run(run_file.parent, run)
    return store


# -- the contexts file (``python -m leaderboard export-contexts``) -------------------------------------------------
def read_contexts_file(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The manifest (first line) and rows of a contexts file; one ``ConfigError`` line when it is not one."""
    path = Path(path)
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lines = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError, EOFError) as e:
        raise ConfigError(f"contexts={path}: not a contexts file ({type(e).__name__}: {e})") from None
    if not lines or "manifest" not in lines[0]:
        raise ConfigError(
            f"contexts={path}: line 1 holds no manifest (write it with python -m leaderboard export-contexts)"
        )
    return lines[0]["manifest"], lines[1:]


def from_file(path: str | Path, key: str | None, method: str, dataset: str) -> ContextStore:
    """The contexts of ``method`` on ``dataset`` in a contexts file; a ``ConfigError`` line when the file holds the
    row under another context key (other artifacts, models, data or knobs than this run's)."""
    manifest, rows = read_contexts_file(path)
    entry = next((r for r in manifest.get("rows", []) if (r["method"], r["dataset"]) == (method, dataset)), None)
    if entry is None:
        held = sorted({f"{r['method']}/{r['dataset']}" for r in manifest.get("rows", [])})
        raise ConfigError(f"contexts={path}: no contexts of {method} on {dataset}; the file holds {', '.join(held)}")
    if key is None or entry["key"] != key:
        why = "the method reads the generator" if key is None else f"context key {key} != the file's {entry['key']}"
        raise ConfigError(
            f"contexts={path}: {method}/{dataset} cannot be read back ({why}: other knobs, artifacts, models or "
            "data than the run that made them)"
        )
    store = ContextStore(key, method={k: entry.get(k) for k in ("method_weights", "method_info")})
    source = {"file": str(path), "commit": manifest.get("commit"), "run_key": entry.get("run_key")}
    source["generator"] = entry.get("generator")
    for r in rows:
        if (r["method"], r["dataset"]) != (method, dataset):
            continue
        src = r.get("reused") or source
        store.records[r["id"]] = Stored(
            r["documents"],
            r.get("units"),
            float(r["compress_s"]),
            r.get("stages") or {},
            r.get("meta") or {},
            src,
            compress_tokens(r),
        )
        if r.get("latency"):
            store.latency[r["id"]] = {"id": r["id"], **r["latency"]}
    return store


# -- reading a stored context back ---------------------------------------------------------------------------------
class StoredContexts(Compressor):
    """A compressor that hands back stored contexts: it loads nothing."""

    def __init__(self, store: ContextStore, name: str) -> None:
        super().__init__()
        self.store, self.name = store, name

    def compress_batch(self, examples: Sequence[Example]) -> list[Compressed]:
        return [self.store.records[e.id].compressed() for e in examples]


def stamp(rows: list[dict[str, Any]], store: ContextStore, latency: bool = False) -> list[dict[str, Any]]:
    """Rows scored from stored contexts given the source's measured ``compress_s`` and ``stages`` (the batch-1
    ones for the latency pass) and its name under ``reused``."""
    for row in rows:
        if "error" in row:
            continue
        s = store.records[row["id"]]
        timed = store.latency[row["id"]] if latency else {"compress_s": s.compress_s, "stages": s.stages}
        row["compress_s"], row["stages"], row["reused"] = timed["compress_s"], timed.get("stages") or {}, s.source
        made = compress_tokens(timed) if latency else s.tokens  # what the source's compression read and wrote
        row["tokens"] = {**(row.get("tokens") or {}), "compress": made}
        if latency and timed.get("threads") is not None:
            row["compress_threads"] = timed["threads"]
    return rows
