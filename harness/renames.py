"""The names a run's key keeps from before a module or an artifact folder moved, so that run folders keyed before
the move (``leaderboard/runs``) still resume.

A run's key (``harness.runner.key_config``, kept in ``run.json``) hashes the resolved config: the method's
``_target_`` and every model path of the profile, artifact folders included. Moving a method's code or its
trained weights changes nothing a run computes (the weights' SHA-256 are checked apart:
``RunRecords.check_weights``), but it would change those strings, and with them every key. ``as_keyed`` maps the
new names back to the ones runs were keyed with, in the key only: configs, records and ``describe()`` carry the
new names. A later move adds its pairs here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.provenance import REPO_ROOT

# issue 52 (one layout for every method): method classes now live in their packages' method.py
TARGETS = {
    "methods.exit.method.Exit": "methods.exit.Exit",
    "methods.compselect.method.CompSelect": "methods.compselect.CompSelect",
    "methods.edc2.method.EDC2": "methods.edc2.EDC2",
    "methods.csm.method.CSMSelect": "methods.ci_value.CSMSelect",
    "methods.ci_oracle.CIOracle": "methods.ci_value.CIOracle",
}
# repository folders that moved, as the ``${repo:...}`` resolver writes them (absolute, under the checkout)
FOLDERS = {
    "methods/exit/artifacts": "methods/exit_artifacts",
    "methods/csm/artifacts": "methods/ci_value/artifacts",
}


def _as_keyed_text(value: str) -> str:
    if value in TARGETS:
        return TARGETS[value]
    for new, old in FOLDERS.items():
        here = str((REPO_ROOT / new).resolve())
        if value == here or value.startswith(here + "/"):
            return str((REPO_ROOT / old).resolve()) + value[len(here) :]
    return value


def as_keyed(node: Any) -> Any:
    """A copy of a resolved config with every moved name replaced by the one runs were keyed with."""
    if isinstance(node, dict):
        return {k: as_keyed(v) for k, v in node.items()}
    if isinstance(node, list):
        return [as_keyed(v) for v in node]
    return _as_keyed_text(node) if isinstance(node, str) else node


def _pairs(old: Any, new: Any, out: list[tuple[str, str]]) -> bool:
    """Walk two configs side by side: ``False`` if they differ other than in strings, else collect the differing
    string pairs in ``out``."""
    if isinstance(old, dict) and isinstance(new, dict):
        return old.keys() == new.keys() and all(_pairs(old[k], new[k], out) for k in new)
    if isinstance(old, list) and isinstance(new, list):
        return len(old) == len(new) and all(_pairs(o, n, out) for o, n in zip(old, new, strict=True))
    if isinstance(old, str) and isinstance(new, str) and old != new:
        out.append((old, new))
        return True
    return old == new


def _old_root(old: str, new: str) -> tuple[int, str] | None:
    """Where ``old`` was written, if ``new`` is the same path under this checkout (level 0: the old checkout folder)
    or under the folder that holds it (level 1, as ``../shared/data``: the old checkout's parent)."""
    for level, here in enumerate((REPO_ROOT.resolve(), REPO_ROOT.resolve().parent)):
        rel = new[len(str(here)) :]
        if new.startswith(f"{here}/") and old.endswith(rel) and len(old) > len(rel):
            return level, old[: len(old) - len(rel)]
    return None


def relocated(old: Any, new: Any) -> bool:
    """Whether the key config ``old`` (a run folder's ``run.json``) is ``new`` made in another checkout folder: the
    same in everything but the absolute paths under the checkout (and beside it, as ``../shared/data``), all
    moved from one old checkout folder (and its parent). A run folder made in another clone then resumes here."""
    pairs: list[tuple[str, str]] = []
    if not _pairs(old, new, pairs) or not pairs:
        return False
    roots = [_old_root(o, n) for o, n in pairs]
    if None in roots:
        return False
    checkout = {r for level, r in roots if level == 0}
    parent = {r for level, r in roots if level == 1}
    # one old checkout; what sat beside it moved with it (paths beside an unmoved checkout did not move)
    return len(checkout) == 1 and parent <= {str(Path(next(iter(checkout))).parent)}
