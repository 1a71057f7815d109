"""CompSelect's training manifest (``train.py``): the reports of the stages a run did not re-train carried over
from the manifest already in ``out_dir`` (marked stale when their weights changed since), the record of the
runs that wrote it before, and the configuration as resolved.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("compselect.train")
RUN_KEYS = ("created", "times", "total", "config", "packages", "git", "hardware")  # what one training run adds


def previous_manifest(out: Path) -> dict[str, Any]:
    old = out / "manifest.json"
    return json.loads(old.read_text()) if old.is_file() else {}


def stage_reports(manifest: dict[str, Any]) -> dict[str, Any]:
    """The stage reports of ``manifest``: every entry with a ``train`` report, which includes a truncator saved
    under another ``truncator.name``."""
    return {k: v for k, v in manifest.items() if isinstance(v, dict) and "train" in v}


def previous_reports(out: Path) -> dict[str, Any]:
    """The stage reports of the manifest already in ``out`` (empty when there is none)."""
    return stage_reports(previous_manifest(out))


def carried_reports(prev: dict[str, Any], digests: dict[str, str | None]) -> dict[str, Any]:
    """The stage reports of a previous manifest ``prev``, each marked ``stale`` when its adapter's digest now
    (``digests``) is not the one that manifest recorded: weights replaced outside this command (copied in, say)
    are not what the report describes, and the manifest must not say they are."""
    before = prev.get("artifacts", {})
    out = {}
    for stage, report in stage_reports(prev).items():
        if before.get(stage) != digests.get(stage):
            log.warning("%s: its weights changed since its report; run stages=[%s] again", stage, stage)
            report = {**report, "stale": "the weights in this folder are not the ones this report describes"}
        out[stage] = report
    return out


def earlier_runs(out: Path) -> list[dict[str, Any]]:
    """The run records (time, configuration, code, machine) of the trainings that wrote ``out`` before, oldest
    first, so that re-training one stage does not erase how the others were made."""
    prev = previous_manifest(out)
    if not prev:
        return []
    return [*prev.get("earlier_runs", []), {k: prev[k] for k in RUN_KEYS if k in prev}]


def resolved_config(cfg: DictConfig) -> dict[str, Any]:
    """The training keys resolved (other methods' entries under ``models`` may need a dataset: left out)."""
    out = {
        k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
        for k, v in ((k, cfg[k]) for k in cfg if k != "models")
    }
    out["models"] = {"compselect": OmegaConf.to_container(cfg.models.compselect, resolve=True)}
    return out
