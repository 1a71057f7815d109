"""Keep the runs behind the published snapshot inside the repository, slimmed, so the snapshot can be rebuilt.

``python -m leaderboard archive <results> [<results> ...] leaderboard/runs`` copies the newest run of every
(profile, generator, dataset, variant) under the results roots into ``leaderboard/runs/<same relative path>``:
``summary.json``, ``run.json``, the Hydra ``override_dirname`` (what names a variant) and the prediction records
cut to what the leaderboard reads (id, question, answers, prediction, echo flag, scores, token counts, latencies,
a hash of the context: no passage text) and the generator's raw reply (a run can be re-scored under another answer
rule, ``harness.metrics.ANSWER_RULES``, without running it again). A run already archived under the same key is
replaced only by a newer one, so runs of several sessions accumulate;
``python -m leaderboard publish leaderboard/runs leaderboard/snapshot`` then rebuilds every table, plot and the
page from the repository alone. Nothing here loads a model.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from harness.records import slim_record
from leaderboard.collect import KEY, PREDICTIONS, RUN, SUMMARY, collect, read_records

KEEP = (
    "id",
    "question",
    "answers",
    "prediction",
    "raw_output",
    "echo",
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
)


def _clear(folder: Path) -> None:
    """Remove an archived run's files only: a run without overrides lives in the folder its variants nest in."""
    for name in (SUMMARY, RUN, PREDICTIONS, ".hydra/hydra.yaml"):
        (folder / name).unlink(missing_ok=True)


def _write_run(row: pd.Series, dest: Path) -> None:
    src = Path(row.folder)
    _clear(dest)
    (dest / ".hydra").mkdir(parents=True, exist_ok=True)
    shutil.copy2(src / SUMMARY, dest / SUMMARY)
    if (src / RUN).is_file():
        shutil.copy2(src / RUN, dest / RUN)
    od = row.overrides or ""
    (dest / ".hydra" / "hydra.yaml").write_text(f"hydra:\n  job:\n    override_dirname: {json.dumps(od)}\n")
    n = None if pd.isna(row.n) else int(row.n)
    # the records the summary was computed from, as written (not through pandas, which turns a column with
    # gaps into floats and fills the gaps with NaN)
    with (dest / PREDICTIONS).open("w", encoding="utf-8") as f:
        for rec in read_records(src, n):
            slim = slim_record(rec, KEEP)
            meta = rec.get("meta")
            diagnostics = meta.get("diagnostics") if isinstance(meta, dict) else None
            if diagnostics:  # kept so the summary of a run resumed from the archive still averages them
                slim["meta"] = {"diagnostics": diagnostics}
            f.write(json.dumps(slim, ensure_ascii=False) + "\n")


def archive(results: str | Path | Iterable[str | Path], dest: str | Path) -> list[Path]:
    """Copy the newest run of each key under ``results`` into ``dest`` (see the module docstring); returns the
    folders written. A key already in ``dest`` with a run at least as new is left as it is."""
    dest = Path(dest)
    incoming = collect(results)
    have = collect(dest) if dest.is_dir() else pd.DataFrame()
    archived = {tuple(r[k] for k in KEY): (r.finished, r.folder) for _, r in have.iterrows() if "folder" in r}
    written = []
    for _, row in incoming.iterrows():
        key = tuple(row[k] for k in KEY)
        if key in archived:
            finished, folder = archived[key]
            if not pd.isna(finished) and not pd.isna(row.finished) and finished >= row.finished:
                continue
            _clear(Path(folder))  # the superseded run of this key, wherever it was archived
        target = dest / row.relpath
        _write_run(row, target)
        written.append(target)
    return written
