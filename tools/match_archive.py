"""Do the runs of a results root give the archived records back? Reproducibility check of re-made runs.

``python -m tools.match_archive RESULTS [ARCHIVE]`` (ARCHIVE defaults to ``leaderboard/runs``) pairs every run
folder under RESULTS with the archived folder of the same relative path and prints, per run, the example ids both
hold and how many of them have the same context (its SHA-1, as the archive keeps it) and the same prediction;
with ``--generator NAME`` a run is matched with the archived run of NAME instead of its own generator (a second
reader's runs against the first reader's contexts). Exit status 1 when any shared example differs in context (or,
under its own generator, in prediction), 0 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.provenance import REPO_ROOT
from harness.records import PREDICTIONS, read_jsonl, slim_record


def _by_id(folder: Path) -> dict[str, dict]:
    return {r["id"]: slim_record(r, ("prediction",)) for r in read_jsonl(folder / PREDICTIONS) if "error" not in r}


def _same(now: dict[str, dict], then: dict[str, dict], ids: list[str], field: str) -> int:
    return sum(now[i][field] == then[i].get(field) for i in ids)


def match(results: Path, archive: Path, generator: str | None = None) -> list[dict]:
    """One row per run folder of ``results`` with an archived counterpart: ``run`` (its relative path), ``n``
    (shared ids), ``same_context``, ``same_prediction`` (None when matched across generators)."""
    rows = []
    for pred in sorted(results.rglob(PREDICTIONS)):
        rel = pred.parent.relative_to(results)
        other = rel if generator is None else Path(rel.parts[0], generator, *rel.parts[2:])
        if not (archive / other / PREDICTIONS).is_file():
            continue
        now, then = _by_id(pred.parent), _by_id(archive / other)
        ids = [i for i in now if i in then]
        rows.append(
            {
                "run": str(rel),
                "n": len(ids),
                "same_context": _same(now, then, ids, "context_sha1"),
                "same_prediction": _same(now, then, ids, "prediction") if generator is None else None,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.match_archive", description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("archive", nargs="?", default=str(REPO_ROOT / "leaderboard" / "runs"))
    ap.add_argument("--generator", help="match against this generator's archived runs (contexts only)")
    a = ap.parse_args(argv)
    rows = match(Path(a.results), Path(a.archive), a.generator)
    bad = 0
    for r in rows:
        pred = "" if r["same_prediction"] is None else f", same prediction {r['same_prediction']}"
        print(f"{r['run']}: {r['n']} shared, same context {r['same_context']}{pred}")
        bad += r["same_context"] < r["n"] or (r["same_prediction"] is not None and r["same_prediction"] < r["n"])
    print(f"{len(rows)} runs matched, {bad} with a difference")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
