"""Sharded runs: ``shard=i/n`` runs the i-th of n interleaved pieces of a run's examples (positions i, i+n,
i+2n, ... of the limit-ed, sampled list) into ``<run folder>/shards/i-of-n``, and the n shards merge into the run
folder itself, which then reads like the folder of the unsharded run (same records, same summary metrics).

A shard folder holds the usual ``run.json`` (the unsharded run's key: ``shard`` is an execution setting),
``predictions.jsonl`` and ``latency.jsonl`` (its part of the batch-1 sample, the first ``latency.samples`` of the
whole list), and ``shard.json`` instead of ``summary.json`` (so that readers of run folders, the leaderboard
first, never count a shard as a run). The shard that finishes last merges the set (``merge_if_complete``);
``python -m harness.merge <run folder>`` does the same by hand, e.g. after shards ran on several machines.

Merging appends the shards' records that the run folder lacks (records already there win, as on a resume), in
the order of the unsharded list, and writes ``summary.json`` from them, under the run folder's lock.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.records import (
    LATENCY,
    PREDICTIONS,
    RUN,
    SHARD_SUMMARY,
    SHARDS,
    RunFolderMismatch,
    RunRecords,
    read_jsonl,
    summarize,
)
from harness.runlock import run_lock

log = logging.getLogger(__name__)

_NAME = re.compile(r"(\d+)-of-(\d+)")


class ShardsIncomplete(RuntimeError):
    """Not every shard of a set has finished (or a run folder has no shards)."""


@dataclass(frozen=True)
class Shard:
    """The ``index``-th of ``count`` interleaved pieces of a run's examples."""

    index: int
    count: int

    @staticmethod
    def parse(value: Any) -> Shard | None:
        """``"i/n"`` as a shard (None for None or ""); ``ConfigError`` unless ``0 <= i < n``."""
        if value is None or str(value).strip() == "":
            return None
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(value))
        if not m or not int(m[1]) < int(m[2]):
            from harness.validate import ConfigError

            raise ConfigError(f"shard={value!r}: must be i/n with 0 <= i < n (shard=0/2 is the first of two)")
        return Shard(int(m[1]), int(m[2]))

    @property
    def name(self) -> str:
        return f"{self.index}-of-{self.count}"

    @property
    def subfolder(self) -> str:
        """The shard folder, relative to the run folder."""
        return f"{SHARDS}/{self.name}"

    def folder(self, out_dir: str | Path) -> Path:
        """The shard folder of the run folder ``out_dir`` (``out_dir`` itself when it is one already, as Hydra's
        run directory is: ``harness.config.run_overrides``)."""
        out = Path(out_dir)
        return out if out.parts[-2:] == (SHARDS, self.name) else out / SHARDS / self.name

    @staticmethod
    def run_folder(shard_folder: str | Path) -> Path:
        """The run folder a shard folder merges into."""
        return Path(shard_folder).parent.parent

    def take(self, items: Sequence[Any]) -> list[Any]:
        """This shard's share of ``items``: positions index, index+count, ..."""
        return list(items[self.index :: self.count])

    def describe(self, examples: Sequence[Any], mine: Sequence[Any]) -> dict[str, Any]:
        """``shard.json``'s ``shard`` entry: which examples, of which list, this shard holds."""
        return {
            "index": self.index,
            "count": self.count,
            "ids": [e.id for e in mine],
            "examples": len(examples),
            "examples_sha": ids_digest([e.id for e in examples]),
        }


def ids_digest(ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]


def write_shard_summary(folder: str | Path, summary: dict[str, Any]) -> Path:
    """``shard.json`` (written whole or not at all): a finished shard."""
    path = Path(folder) / SHARD_SUMMARY
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=1, ensure_ascii=False, default=str))
    tmp.replace(path)
    return path


def shard_sets(run_folder: str | Path) -> dict[int, dict[int, Path]]:
    """The shard folders under a run folder: ``{count: {index: folder}}``, finished or not."""
    out: dict[int, dict[int, Path]] = {}
    base = Path(run_folder) / SHARDS
    for f in sorted(base.iterdir()) if base.is_dir() else []:
        m = _NAME.fullmatch(f.name)
        if m and f.is_dir():
            out.setdefault(int(m[2]), {})[int(m[1])] = f
    return out


def _pick_count(run_folder: Path, count: int | None) -> tuple[int, dict[int, Path]]:
    sets = shard_sets(run_folder)
    if not sets:
        raise ShardsIncomplete(f"{run_folder} has no shard folders ({SHARDS}/i-of-n)")
    if count is None:
        if len(sets) > 1:
            raise ShardsIncomplete(f"{run_folder} holds shards of several counts {sorted(sets)}: name one")
        count = next(iter(sets))
    if count not in sets:
        raise ShardsIncomplete(f"{run_folder} has no shards of {count} (has {sorted(sets)})")
    folders = sets[count]
    done = {i for i, f in folders.items() if (f / SHARD_SUMMARY).is_file()}
    missing = [f"{i}-of-{count}" for i in range(count) if i not in done]
    if missing:
        raise ShardsIncomplete(f"{run_folder}: shards not finished: {', '.join(missing)}")
    return count, folders


def _full_list(run_folder: Path, summaries: list[dict[str, Any]]) -> list[str]:
    """The unsharded run's example ids, put back together from the shards' (interleaved) shares."""
    count = len(summaries)
    parts = [s["shard"] for s in summaries]
    total, digest = parts[0]["examples"], parts[0]["examples_sha"]
    if any((p["examples"], p["examples_sha"]) != (total, digest) for p in parts):
        raise RunFolderMismatch(
            f"{run_folder}: its shards ran on different example lists (another limit or sample); re-run the odd "
            "ones or delete them"
        )
    full = [parts[p % count]["ids"][p // count] for p in range(total)]
    if ids_digest(full) != digest:
        raise RunFolderMismatch(f"{run_folder}: the shards' examples do not make up the list they name")
    return full


def merge(run_folder: str | Path, count: int | None = None) -> dict[str, Any]:
    """Merge the finished shards (of ``count``; any, when there is one set) into ``run_folder`` and return its
    summary. Raises ``ShardsIncomplete`` while a shard is missing and ``RunFolderMismatch`` when shards (or the
    run folder) belong to different configurations or example lists."""
    run_folder = Path(run_folder)
    count, folders = _pick_count(run_folder, count)
    shards = [folders[i] for i in range(count)]
    summaries = [json.loads((f / SHARD_SUMMARY).read_text()) for f in shards]
    runs = [json.loads((f / RUN).read_text()) for f in shards]
    if len({r["key"] for r in runs}) != 1 or len({json.dumps(r.get("weights")) for r in runs}) != 1:
        raise RunFolderMismatch(f"{run_folder}: its shards hold runs of different configurations or weights")
    full = _full_list(run_folder, summaries)
    samples = max(int(s["config"]["latency"]["samples"]) for s in summaries)
    preds, lats = {}, {}
    for f in shards:
        preds.update((r["id"], r) for r in read_jsonl(f / PREDICTIONS))
        lats.update((r["id"], r) for r in read_jsonl(f / LATENCY))
    if missing := [i for i in full if i not in preds]:
        raise ShardsIncomplete(f"{run_folder}: the shards hold no record of {len(missing)} examples ({missing[:3]})")

    with run_lock(run_folder, wait=True):
        records = RunRecords(run_folder, runs[0]["key"], runs[0]["config"])
        records.check_weights(runs[0].get("weights") or [])
        if runs[0].get("contexts"):  # the context key (harness.reuse): the merged records can be read back
            records.mark("contexts", runs[0]["contexts"])
        for server in runs[0].get("servers") or []:
            records.note_server(server)
        records.add_predictions([preds[i] for i in full if i not in records.predictions])
        records.add_latency([lats[i] for i in full[:samples] if i in lats and i not in records.latency])
        if not (run_folder / ".hydra").exists() and (shards[0] / ".hydra").is_dir():
            shutil.copytree(shards[0] / ".hydra", run_folder / ".hydra")  # the variant's overrides, for readers
        summary = merged_summary(summaries, records, full, samples, [f.name for f in shards])
        records.write_summary(summary)
    log.info("merged %d shards into %s", count, run_folder)
    return summary


def merged_summary(
    summaries: list[dict[str, Any]], records: RunRecords, full: list[str], samples: int, names: list[str]
) -> dict[str, Any]:
    """The run folder's summary: the first shard's, with the metrics of the merged records and the shards' run
    figures (wall clock: the longest shard's; model seconds and examples computed: their sums)."""
    first = summaries[0]
    runs = [s["run"] for s in summaries]
    wall_s, model_s = max(r["wall_s"] for r in runs), sum(r["model_s"] for r in runs)
    lats = [records.latency[i] for i in full[:samples] if i in records.latency]
    summary = {k: v for k, v in first.items() if k not in ("shard", "merged_into")}
    summary.update(summarize([records.predictions[i] for i in full], lats))
    summary["run"] = {
        **first["run"],
        "wall_s": wall_s,
        "model_s": model_s,
        "load_s": max(r["load_s"] for r in runs),
        "generator_loaded_here": any(r["generator_loaded_here"] for r in runs),
        "examples_computed": sum(r["examples_computed"] for r in runs),
        "overhead": wall_s / model_s if model_s > 0 else None,
        "shard_wall_s": [r["wall_s"] for r in runs],
    }
    summary["config"] = {**first["config"], "shard": None}
    summary["shards"] = {"count": len(summaries), "folders": [f"{SHARDS}/{n}" for n in names]}
    summary["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return summary


def merge_if_complete(run_folder: str | Path, count: int) -> str | None:
    """Merge when every shard of ``count`` has finished (the last one to finish calls this); the run folder, or
    None while some shard is still missing or when the set does not fit together (logged: merge by hand)."""
    try:
        merge(run_folder, count)
    except ShardsIncomplete as e:
        log.info("not merging yet: %s", e)
        return None
    except RunFolderMismatch as e:
        log.warning("shards not merged: %s", e)
        return None
    return str(run_folder)
