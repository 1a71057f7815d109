"""Add each archived record's question and echo flag (``harness.metrics.echo``) to the slimmed prediction records
under ``leaderboard/runs``, for runs archived before records kept them, so the leaderboard counts the echo of
every row, the archived ones included, by the same definition as a new run.

``python -m tools.archive_questions leaderboard/runs`` reads the questions from the datasets' files by example id
(``RAG_HARNESS_DATA``, default ``../shared/data`` beside the repository); a record that already has both is left
alone. No model is loaded.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
from pathlib import Path

from harness.metrics import echo
from harness.provenance import REPO_ROOT
from harness.records import PREDICTIONS, read_jsonl

DATASETS = ("nq", "triviaqa", "hotpotqa")


def questions(root: Path) -> dict[str, str]:
    """Example id -> question over every split file of the shipped datasets."""
    out: dict[str, str] = {}
    for ds in DATASETS:
        for path in sorted((root / ds).glob("*.jsonl.gz")):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                out.update((r["id"], r["question"]) for r in map(json.loads, f))
    return out


def add_questions(runs: Path, asked: dict[str, str]) -> int:
    """Rewrite each ``predictions.jsonl`` under ``runs`` whose records lack ``question`` or ``echo``; returns how
    many files were rewritten."""
    done = 0
    for path in sorted(runs.rglob(PREDICTIONS)):
        rows = read_jsonl(path)
        if all("question" in r and "echo" in r for r in rows):
            continue
        for r in rows:
            r.setdefault("question", asked[r["id"]])
            r.setdefault("echo", echo(r["prediction"], r["question"]))
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        done += 1
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path)
    args = ap.parse_args()
    root = Path(os.environ.get("RAG_HARNESS_DATA", REPO_ROOT.parent / "shared" / "data"))
    print(f"{add_questions(args.runs, questions(root))} prediction files updated")


if __name__ == "__main__":
    main()
