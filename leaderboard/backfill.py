"""``python -m leaderboard backfill-contexts <results> leaderboard/runs``: give archived runs made before run folders
held a context key (or whose texts the archive never saw) their context texts, from runs made again.

A run of ``results`` backs an archived run of the same key (profile, generator, dataset, variant) when, on every
question both hold, its context has the hash the archived record keeps: the same compressor made the same text.
Then its texts for those questions go into the archive's store (``leaderboard.context_store``) and the archived
``run.json`` gains the remade run's context key under ``contexts`` with ``backfilled`` (the remaking commit, how
many questions, how many predictions also agree), so ``export-contexts`` can read it (``--limit`` to the questions
backed). A run whose contexts differ on any question backs nothing, and says so; the archived records, summary and
figures are never touched. Nothing here loads a model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from leaderboard import context_store
from leaderboard.collect import KEY, RUN, collect, read_records


@dataclass(frozen=True)
class Backed:
    """What one remade run did for its archived run: ``status`` is ``backfilled``, ``differs``, ``disjoint`` (no
    question in common) or ``no key``."""

    key: tuple[str, ...]
    status: str
    questions: int
    same_predictions: int
    differing: tuple[str, ...] = ()

    def line(self) -> str:
        what = "/".join(self.key)
        if self.status == "backfilled":
            return f"{what}: {self.questions} contexts backed ({self.same_predictions} predictions also equal)"
        if self.status == "differs":
            return f"{what}: {len(self.differing)} of {self.questions} contexts differ (first {self.differing[0]})"
        if self.status == "disjoint":
            return f"{what}: no question in common with the archived run"
        return f"{what}: the remade run holds no context key (a method that reads the generator): not backed"


def _context_key(folder: Path) -> dict[str, Any] | None:
    run = json.loads((folder / RUN).read_text()) if (folder / RUN).is_file() else {}
    contexts = run.get("contexts") or {}
    return contexts if contexts.get("key") else None


def _back(made: pd.Series, kept: pd.Series, archive: Path) -> Backed:
    key = tuple(str(made[k]) for k in KEY)
    contexts = _context_key(Path(made.folder))
    records = [r for r in read_records(Path(made.folder)) if "context" in r]
    archived = {r["id"]: r for r in read_records(Path(kept.folder))}
    both = [r for r in records if r["id"] in archived]
    if contexts is None:
        return Backed(key, "no key", len(both), 0)
    differing = tuple(
        r["id"] for r in both if context_store.sha1(r["context"]) != archived[r["id"]].get("context_sha1")
    )
    same = sum(r.get("prediction") == archived[r["id"]].get("prediction") for r in both)
    if not both:
        return Backed(key, "disjoint", 0, 0)
    if differing:
        return Backed(key, "differs", len(both), same, differing)
    context_store.add(archive, str(made.dataset), both)
    run_file = Path(kept.folder) / RUN
    run = json.loads(run_file.read_text()) if run_file.is_file() else {}
    backfilled = {"commit": made.commit, "questions": len(both), "same_predictions": same}
    run["contexts"] = {**contexts, "backfilled": backfilled}
    run_file.write_text(json.dumps(run, indent=1))
    return Backed(key, "backfilled", len(both), same)


def backfill(results: str | Path, archive: str | Path) -> list[Backed]:
    """Back every archived run of ``archive`` that a run of ``results`` remade (see the module docstring)."""
    archive = Path(archive)
    have = collect(archive)
    kept = {tuple(r[k] for k in KEY): r for _, r in have.iterrows()}
    out = []
    for _, made in collect(results).iterrows():
        twin = kept.get(tuple(made[k] for k in KEY))
        if twin is not None and Path(twin.folder).resolve() != Path(made.folder).resolve():
            out.append(_back(made, twin, archive))
    return out
