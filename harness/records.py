"""Run records: ``predictions.jsonl`` appended as the run goes, ``latency.jsonl`` for the batch-1 sample,
``summary.json`` at the end, and ``run.json`` holding the key that makes a folder resumable.
A folder made in another checkout folder resumes too: its key differs only by the paths under the checkout
(``harness.renames.relocated``); ``run.json`` keeps the key it was made with.

Resuming: a record is written (and flushed to disk) once its example is fully scored, so a killed run leaves
complete lines plus at most one torn last line, which is dropped on the next start. Records already present are
not redone, and the summary is always computed from the records of the selected examples, so a resumed run and
an uninterrupted one give the same summary. A full disk (``ENOSPC``, or ``EDQUOT`` over quota) stops the run with
``DiskFull``, one line naming the file and the records kept; the failed append is cut back off, so freeing space
and re-running resumes from them.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from harness.metrics import corpus_cr, echo, hedge
from harness.renames import relocated

PREDICTIONS, LATENCY, SUMMARY, RUN = "predictions.jsonl", "latency.jsonl", "summary.json", "run.json"
LOCK = ".run.lock"  # one writer per run folder (harness/runlock.py)
SHARDS, SHARD_SUMMARY = "shards", "shard.json"  # shard=i/n folders and their summaries (harness/shards.py)


FULL_DISK = (errno.ENOSPC, errno.EDQUOT)  # no space left on the device; disk quota exceeded


class RunFolderMismatch(RuntimeError):
    """The folder holds records of a different configuration."""


class DiskFull(RuntimeError):
    """A run folder's file could not be written: its filesystem is full or over quota."""


def disk_full(error: OSError, path: str | Path, kept: int) -> DiskFull | None:
    """``DiskFull`` for a write of ``path`` that failed with ``error``, naming the records kept; None when
    ``error`` is not a full disk or quota."""
    if error.errno not in FULL_DISK:
        return None
    why = error.strerror or os.strerror(error.errno)
    return DiskFull(f"{path}: {why.lower()} ({kept} records kept); free space and re-run to resume")


def folder_disk_full(error: OSError, folder: str | Path) -> DiskFull | None:
    """``disk_full`` for any write under a run ``folder`` (the file the error names, else its records)."""
    kept = len(read_jsonl(Path(folder) / PREDICTIONS))
    return disk_full(error, error.filename or Path(folder) / PREDICTIONS, kept)


def config_key(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def read_jsonl(path: str | Path, repair: bool = False) -> list[dict[str, Any]]:
    """The complete JSON lines of a record file, in file order (``[]`` when it does not exist). Reading stops at
    a torn line (a killed run leaves at most one, last); ``repair`` also cuts it off the file, as a run resuming
    into the folder does before appending."""
    path = Path(path)
    if not path.is_file():
        return []
    rows, good_bytes = [], 0
    with path.open("rb") as f:
        for raw in f:
            try:
                rows.append(json.loads(raw))
            except (json.JSONDecodeError, UnicodeDecodeError):
                break
            good_bytes += len(raw)
    if repair and good_bytes != path.stat().st_size:
        with path.open("r+b") as f:
            f.truncate(good_bytes)
    return rows


class RunRecords:
    """The record files of one run folder."""

    def __init__(self, folder: str | Path, key: str, key_config: dict[str, Any]) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        run_file = self.folder / RUN
        if run_file.is_file():
            old = json.loads(run_file.read_text())
            if old.get("key") != key and not relocated(old.get("config"), key_config):
                raise RunFolderMismatch(
                    f"{self.folder} holds records of another configuration (key {old.get('key')} != {key}); "
                    "use another run folder (hydra.run.dir=...) or delete it"
                )
        else:
            run_file.write_text(json.dumps({"key": key, "config": key_config}, indent=1, default=str))
        self.predictions = {r["id"]: r for r in read_jsonl(self.folder / PREDICTIONS, repair=True)}
        self.latency = {r["id"]: r for r in read_jsonl(self.folder / LATENCY, repair=True)}

    def check_weights(self, digests: Sequence[str]) -> None:
        """Refuse to resume a run whose models' weights (the SHA-256 digests the method and generator
        describe) differ from those of the records already here: mixing two models' outputs in one run would
        be silent. A run folder from before this check (no digests stored) gets them now."""
        run_file = self.folder / RUN
        run = json.loads(run_file.read_text())
        digests = sorted(set(digests))
        if "weights" in run and run["weights"] != digests and self.predictions:
            raise RunFolderMismatch(
                f"{self.folder} holds records made with other model weights (sha256 {run['weights']} != "
                f"{digests}); use another results_dir or delete the folder"
            )
        if run.get("weights") != digests:
            run["weights"] = digests
            run_file.write_text(json.dumps(run, indent=1, default=str))

    def note_server(self, server: dict[str, Any]) -> None:
        """Add the server a generator calls (its base URL and model; never a key) to ``run.json``'s ``servers``,
        once: a run resumed against another server lists both."""
        self.note("servers", server)

    def note(self, field: str, value: Any) -> None:
        """Add ``value`` to the list ``field`` of ``run.json`` unless it is there: how a run was executed (servers,
        speculative decoding), which is not part of its key; a run resumed under other settings lists each."""
        run_file = self.folder / RUN
        run = json.loads(run_file.read_text())
        if value not in run.setdefault(field, []):
            run[field].append(value)
            run_file.write_text(json.dumps(run, indent=1, default=str))

    def mark(self, field: str, value: Any) -> None:
        """Set ``field`` of ``run.json`` to ``value`` (not part of the key): e.g. the run's context key and the
        weights of the method that made its contexts (``harness.reuse``)."""
        run_file = self.folder / RUN
        run = json.loads(run_file.read_text())
        if run.get(field) != value:
            run[field] = value
            run_file.write_text(json.dumps(run, indent=1, default=str))

    def _append(self, name: str, rows: Iterable[dict[str, Any]]) -> None:
        """Append ``rows`` and flush them to disk; on a full disk, cut the file back to its last whole record and
        raise ``DiskFull``."""
        path = self.folder / name
        start = path.stat().st_size if path.is_file() else 0
        try:
            with path.open("a", encoding="utf-8") as f:
                for r in rows:
                    f.write(json.dumps(r, ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            full = disk_full(e, path, len(self.predictions))
            if full is None:
                raise
            with contextlib.suppress(OSError):  # cutting frees space; a torn line is repaired on resume anyway
                os.truncate(path, start)
            raise full from e

    def add_predictions(self, rows: Sequence[dict[str, Any]]) -> None:
        self._append(PREDICTIONS, rows)
        self.predictions.update((r["id"], r) for r in rows)

    def add_latency(self, rows: Sequence[dict[str, Any]]) -> None:
        self._append(LATENCY, rows)
        self.latency.update((r["id"], r) for r in rows)

    def write_summary(self, summary: dict[str, Any]) -> Path:
        path = self.folder / SUMMARY
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(summary, indent=1, ensure_ascii=False, default=str))
        tmp.replace(path)
        return path


def kept_nothing(predictions: Sequence[dict[str, Any]]) -> float | None:
    """Share of examples whose compressed context is empty (the generator answered closed-book)."""
    return sum(r["compressed_tokens"] == 0 for r in predictions) / len(predictions) if predictions else None


def cr_nonempty(predictions: Sequence[dict[str, Any]]) -> float | None:
    """CR (ratio of sums) over the examples whose compressed context is non-empty: what the generator was
    actually given compressed; None when every context is empty (or there are no examples)."""
    kept = [r for r in predictions if r["compressed_tokens"] > 0]
    return sum(r["original_tokens"] for r in kept) / sum(r["compressed_tokens"] for r in kept) if kept else None


def echoed(record: dict[str, Any]) -> bool:
    """The record's ``echo`` flag (``harness.metrics.echo``), recounted from its prediction and question (when it
    has one) for records written before the flag."""
    if "echo" in record:
        return bool(record["echo"])
    return echo(record.get("prediction") or "", record.get("question") or "", record.get("context") or "")


def _share(predictions: Sequence[dict[str, Any]], flag: Callable[[dict[str, Any]], bool]) -> float | None:
    """Percent of examples whose record is flagged."""
    return 100.0 * sum(map(flag, predictions)) / len(predictions) if predictions else None


def _points(predictions: Sequence[dict[str, Any]], flag: Callable[[dict[str, Any]], bool]) -> float | None:
    """The points of SubEM (percent of all examples) earned by the flagged records."""
    return 100.0 * sum(r["subem"] for r in predictions if flag(r)) / len(predictions) if predictions else None


def echo_share(predictions: Sequence[dict[str, Any]]) -> float | None:
    """Percent of examples whose prediction echoes the prompt instead of answering."""
    return _share(predictions, echoed)


def subem_from_echo(predictions: Sequence[dict[str, Any]]) -> float | None:
    """The points of SubEM (percent of all examples) earned by predictions that echo the prompt."""
    return _points(predictions, echoed)


def hedged(record: dict[str, Any]) -> bool:
    """The record's ``hedge`` flag (``harness.metrics.hedge``), recounted from its prediction, question and gold
    answers for records written before the flag."""
    flag = record.get("hedge")
    if flag is not None and flag == flag:  # a table's missing value (NaN) is recounted too
        return bool(flag)
    return hedge(record.get("prediction") or "", record.get("question") or "", record.get("answers") or ())


def hedge_share(predictions: Sequence[dict[str, Any]]) -> float | None:
    """Percent of examples whose prediction names more than one option of a comparison question (``hedged``)."""
    return _share(predictions, hedged)


def subem_from_hedge(predictions: Sequence[dict[str, Any]]) -> float | None:
    """The points of SubEM (percent of all examples) earned by predictions that hedge."""
    return _points(predictions, hedged)


def strict_subem(record: dict[str, Any]) -> float:
    """One record's SubEM for an answer that chooses: 0 where it hedges or echoes the prompt."""
    return 0.0 if hedged(record) or echoed(record) else float(record["subem"])


def subem_strict(predictions: Sequence[dict[str, Any]]) -> float | None:
    """SubEM (percent) with hedged and echoed predictions scored 0: "SubEM (answers that choose)"."""
    return 100.0 * sum(map(strict_subem, predictions)) / len(predictions) if predictions else None


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarize(predictions: Sequence[dict[str, Any]], latency: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The metric part of ``summary.json``, recomputable by a reader from the record files alone.

    Records of examples that failed (``error``: the run's ``on_error: skip``) are counted (``failed_examples``,
    ``failed_ids``, the first 100) and left out of every figure; ``n`` counts the scored examples.

    ``subem``/``em``/``f1`` are percentages; ``echo`` is the percent of predictions that echo the prompt
    (``harness.metrics.echo``) and ``subem_from_echo`` the SubEM points they earned; ``hedge`` and ``subem_from_hedge``
    the same for predictions that name more than one option of a comparison question (``harness.metrics.hedge``), and
    ``subem_strict`` SubEM with hedged and echoed predictions scored 0. ``cr`` is the ratio of sums over every example
    (an empty context counts its original tokens against zero compressed ones), ``cr_nonempty`` the same over the
    examples whose context is non-empty, ``kept_nothing`` the share whose context is empty. Two timing protocols, never
    mixed: latency (``compress_s``, ``online_latency_s`` = generation, ``total_latency_s``) comes only from the batch-1
    sample (``latency_protocol: batch1``; None without one), throughput only from the accuracy pass, amortised over its
    batches (``batched``: seconds per example, with ``uniform`` false when its records were timed at more than one batch
    size or thread count, e.g. a run resumed under other settings).
    """
    failed = [r["id"] for r in predictions if "error" in r]
    predictions = [r for r in predictions if "error" not in r]
    n = len(predictions)
    out: dict[str, Any] = {"n": n, "failed_examples": len(failed), "failed_ids": failed[:100]}
    for m in ("subem", "em", "f1"):
        out[m] = None if n == 0 else 100.0 * sum(r[m] for r in predictions) / n
    out["echo"], out["subem_from_echo"] = echo_share(predictions), subem_from_echo(predictions)
    out["hedge"], out["subem_from_hedge"] = hedge_share(predictions), subem_from_hedge(predictions)
    out["subem_strict"] = subem_strict(predictions)
    out["cr"], out["cr_mean"] = corpus_cr(
        [r["original_tokens"] for r in predictions], [r["compressed_tokens"] for r in predictions]
    )
    out["original_tokens"] = _mean([r["original_tokens"] for r in predictions])
    out["compressed_tokens"] = _mean([r["compressed_tokens"] for r in predictions])
    out["kept_nothing"] = kept_nothing(predictions)
    out["cr_nonempty"] = cr_nonempty(predictions)
    out["timed_at"] = timing_conditions(predictions)
    uniform = all(len(v) == 1 and "unknown" not in v for v in out["timed_at"].values())
    out["batched"] = {
        "compress_s": _mean([r["compress_s"] for r in predictions]),
        "generate_s": _mean([r["generate_s"] for r in predictions]),
        "uniform": uniform,
    }
    out["latency_protocol"] = "batch1" if latency else None
    out["latency_n"] = len(latency)
    out["latency_threads"] = sorted({r["threads"] for r in latency if r.get("threads") is not None})
    out["compress_s"] = _mean([r["compress_s"] for r in latency])
    out["generate_s"] = _mean([r["generate_s"] for r in latency])
    out["online_latency_s"] = out["generate_s"]
    out["total_latency_s"] = None if out["compress_s"] is None else out["compress_s"] + out["generate_s"]
    out["diagnostics"] = aggregate_diagnostics(predictions)
    out["truncated_examples"], out["truncated"] = truncation_counts(predictions)
    return out


def truncation_counts(predictions: Sequence[dict[str, Any]]) -> tuple[int, dict[str, dict[str, int]]]:
    """How many examples had a prompt cut to fit its model (``meta.truncated``, ``harness.lm.fit``), and per
    stage and part, in how many examples and how many tokens in all: ``{stage: {"examples": n, part: tokens}}``."""
    per: dict[str, dict[str, int]] = {}
    n = 0
    for r in predictions:
        cuts = (r.get("meta") or {}).get("truncated") or {}
        n += bool(cuts)
        for stage, parts in cuts.items():
            row = per.setdefault(stage, {"examples": 0})
            row["examples"] += 1
            for part, tokens in (parts or {}).items():
                row[part] = row.get(part, 0) + int(tokens)
    return n, per


def timing_conditions(predictions: Sequence[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """How many records were timed at each batch size and thread count (``unknown`` for records made before
    these were kept). A run resumed under other settings mixes them, and its mean latency with them."""
    out: dict[str, dict[str, int]] = {"batch": {}, "threads": {}}
    for r in predictions:
        for k in out:
            key = count_key(r.get(k))
            out[k][key] = out[k].get(key, 0) + 1
    return out


def count_key(value: Any) -> str:
    """The name a batch size or thread count is counted under: ``unknown`` for None, and a whole number the same
    whether a record holds it as ``1`` or as ``1.0`` (a table with gaps in a column makes pandas write floats)."""
    if value is None:
        return "unknown"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def aggregate_diagnostics(predictions: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Means of the numbers a method reports per example under ``meta["diagnostics"]`` (e.g. CompSelect's
    cascading-error flags, EDC2's LLM calls). An example that reports ``None`` for a key is left out of that
    key's mean, so a subset metric (e.g. only where the passages hold an answer) averages over its subset."""
    sums: dict[str, list[float]] = {}
    for r in predictions:
        for k, v in ((r.get("meta") or {}).get("diagnostics") or {}).items():
            if isinstance(v, bool | int | float) and v is not None:
                sums.setdefault(k, []).append(float(v))
    return {k: {"mean": sum(v) / len(v), "n": len(v)} for k, v in sorted(sums.items())}


def slim_record(record: dict[str, Any], keep: Sequence[str]) -> dict[str, Any]:
    """The fields ``keep`` of a prediction record (those it has) and, instead of the context's text, its hash
    (a record already slimmed keeps the hash it has)."""
    out = {k: record[k] for k in keep if k in record}
    if "context" in record or "context_sha1" not in record:
        out["context_sha1"] = hashlib.sha1((record.get("context") or "").encode()).hexdigest()[:12]
    else:
        out["context_sha1"] = record["context_sha1"]
    return out
