"""Keep the runs behind the published snapshot inside the repository, slimmed, so the snapshot can be rebuilt.

``python -m leaderboard archive <results> [<results> ...] leaderboard/runs`` copies the newest run of every
(profile, generator, dataset, variant) under the results roots into ``leaderboard/runs/<same relative path>``:
``summary.json``, ``run.json``, ``latency.jsonl``, the Hydra ``override_dirname`` (what names a variant) and the
prediction records cut to what the leaderboard reads (id, question, answers, prediction, flags, scores, token
counts, latencies and their stages, the kept units, a hash of the context) and the generator's raw reply (a run can
be re-scored under another answer rule, ``harness.metrics.ANSWER_RULES``, without running it again). The context
texts go once each into ``<dest>/contexts/<dataset>.jsonl.gz`` (``leaderboard.context_store``), found by that hash:
a clone exports them with ``export-contexts`` and any generator reads them back without running the compressor. A
run already archived under the same key is replaced only by a newer one, so runs of several sessions accumulate;
``python -m leaderboard publish leaderboard/runs leaderboard/snapshot`` then rebuilds every table, plot and the page
from the repository alone. ``archive --shards <results> leaderboard/pending/shards`` keeps the finished shards of
runs not merged yet the same way (``archive_shards``), so a cell too long for one session goes on elsewhere. Nothing
here loads a model.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from harness.records import LATENCY, SHARD_SUMMARY, SHARDS, read_jsonl, slim_record
from leaderboard import context_store
from leaderboard.collect import KEY, PREDICTIONS, RUN, SUMMARY, collect, read_records

KEEP = (
    "id",
    "question",
    "answers",
    "prediction",
    "raw_output",
    "echo",
    "hedge",
    "subem",
    "em",
    "f1",
    "original_tokens",
    "compressed_tokens",
    "prompt_tokens",
    "completion_tokens",
    "compress_s",
    "generate_s",
    "batch",
    "threads",
    "units",
    "stages",
    "tokens",
)


SUMMARY_META = ("diagnostics", "truncated")  # the record's ``meta`` that ``harness.records.summarize`` averages


def _clear(folder: Path) -> None:
    """Remove an archived run's files only: a run without overrides lives in the folder its variants nest in."""
    for name in (SUMMARY, RUN, PREDICTIONS, LATENCY, ".hydra/hydra.yaml"):
        (folder / name).unlink(missing_ok=True)


def _write_run(row: pd.Series, dest: Path) -> list[dict]:
    """The run of ``row`` slimmed into ``dest``; returns its records as read (with their context texts)."""
    src = Path(row.folder)
    _clear(dest)
    (dest / ".hydra").mkdir(parents=True, exist_ok=True)
    shutil.copy2(src / SUMMARY, dest / SUMMARY)
    if (src / RUN).is_file():
        shutil.copy2(src / RUN, dest / RUN)
    if (src / LATENCY).is_file():  # the batch-1 sample's own compress_s and stages, which a reader of the
        # archived contexts records as theirs (``harness.reuse``); no context text in it
        rows = [{k: v for k, v in r.items() if k != "context"} for r in read_jsonl(src / LATENCY)]
        (dest / LATENCY).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    od = row.overrides or ""
    (dest / ".hydra" / "hydra.yaml").write_text(f"hydra:\n  job:\n    override_dirname: {json.dumps(od)}\n")
    n = None if pd.isna(row.n) else int(row.n)
    # the records the summary was computed from, as written (not through pandas, which turns a column with
    # gaps into floats and fills the gaps with NaN)
    records = read_records(src, n)
    _write_records(records, dest / PREDICTIONS)
    return records


def _write_records(records: Iterable[dict], path: Path) -> None:
    """``records`` slimmed (``KEEP``, the context's hash instead of its text) into ``path``."""
    with path.open("w", encoding="utf-8") as f:
        for rec in records:
            slim = slim_record(rec, KEEP)
            meta = rec.get("meta") if isinstance(rec.get("meta"), dict) else {}
            # what a summary recomputed from these records reads (a run resumed from the archive, merged shards)
            if kept := {k: meta[k] for k in SUMMARY_META if meta.get(k)}:
                slim["meta"] = kept
            f.write(json.dumps(slim, ensure_ascii=False) + "\n")


def archive(
    results: str | Path | Iterable[str | Path], dest: str | Path, generators: Iterable[str] | None = None
) -> list[Path]:
    """Copy the newest run of each key under ``results`` into ``dest`` (see the module docstring); returns the
    folders written. A key already in ``dest`` with a run at least as new is left as it is. ``generators``: only
    the runs of these generator blocks (a results root that also holds remade runs of an archived block, which
    would replace its larger runs)."""
    dest = Path(dest)
    incoming = collect(results)
    if generators is not None and not incoming.empty:
        incoming = incoming[incoming.generator.isin(list(generators))]
    have = collect(dest) if dest.is_dir() else pd.DataFrame()
    archived = {tuple(r[k] for k in KEY): (r.finished, r.folder) for _, r in have.iterrows() if "folder" in r}
    written, texts = [], {}
    for _, row in incoming.iterrows():
        key = tuple(row[k] for k in KEY)
        if key in archived:
            finished, folder = archived[key]
            if not pd.isna(finished) and not pd.isna(row.finished) and finished >= row.finished:
                continue
            _clear(Path(folder))  # the superseded run of this key, wherever it was archived
        target = dest / row.relpath
        texts.setdefault(row.dataset, []).extend(_write_run(row, target))
        written.append(target)
    for dataset, records in texts.items():  # the store read and appended once per dataset, not once per run
        context_store.add(dest, dataset, records)
    return written


def archive_shards(results: str | Path | Iterable[str | Path], dest: str | Path) -> list[Path]:
    """The finished shards (``shards/i-of-n/`` holding ``shard.json``, ``harness.shards``) under ``results`` whose
    run folder is not merged yet, into ``dest`` at the same relative paths: ``shard.json``, ``run.json``,
    ``latency.jsonl``, ``.hydra/`` and the records slimmed as a run's are. A cell too long for one session goes on
    from them elsewhere: copy the folders under a results root, run the missing shards, and the last one merges
    the set. A shard already there is replaced. Returns the folders written."""
    dest, written = Path(dest), []
    for root in [results] if isinstance(results, (str, Path)) else results:
        root = Path(root)
        for done in sorted(root.rglob(f"{SHARDS}/*/{SHARD_SUMMARY}")):
            src = done.parent
            if (src.parent.parent / SUMMARY).is_file():
                continue  # merged: archive the run instead
            target = dest / src.relative_to(root)
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            for name in (SHARD_SUMMARY, RUN, LATENCY):
                if (src / name).is_file():
                    shutil.copy2(src / name, target / name)
            if (src / ".hydra").is_dir():
                shutil.copytree(src / ".hydra", target / ".hydra")
            _write_records(read_jsonl(src / PREDICTIONS), target / PREDICTIONS)
            written.append(target)
    return written
