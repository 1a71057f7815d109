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
