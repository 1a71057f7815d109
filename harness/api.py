"""The harness from Python: ``evaluate("bm25", "nq", limit=50)`` is ``python -m harness method=bm25 dataset=nq
limit=50``.

The config is composed by Hydra from the same ``conf/`` and the run goes through Hydra's own job runner, so the
run folder (``hydra.run.dir``: results, profile, generator, dataset, method and the override string) and its
``.hydra/`` files (``config.yaml``, ``hydra.yaml``, ``overrides.yaml``) are the ones the command line makes for the
same overrides: either resumes a run the other started. Unlike the command line it leaves the process's logging
alone (no ``<job>.log`` in the folder) and raises errors (``ConfigError``, ``DatasetError``, ``DiskFull``,
``RunFolderMismatch``) instead of printing them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    from omegaconf import DictConfig

# hydra.job.name of `python -m harness` (Hydra names a job after its script), so hydra.yaml reads alike.
JOB_NAME = "__main__"
_PLAIN = re.compile(r"[A-Za-z0-9_./:+\-]+")  # a string value the override grammar reads as written


@dataclass
class Evaluation:
    """One run's results: ``summary`` (``summary.json``), ``records`` (its examples' ``predictions.jsonl`` rows,
    one per example, in dataset order) and the run ``folder``."""

    summary: dict[str, Any]
    records: pd.DataFrame
    folder: Path


def override_value(value: Any) -> str:
    """``value`` in Hydra's override grammar, as one would type it on the command line (``true``, ``null``,
    ``0.25``, ``[a,b]``; a string quoted only when it needs to be)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str):
        if _PLAIN.fullmatch(value) and value.lower() not in ("true", "false", "null"):
            return value
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, Sequence):
        return "[" + ",".join(override_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} {value!r} as an override")


def settings_overrides(settings: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``key=value`` overrides for keyword settings; a mapping becomes dotted keys (``latency={"samples": 0}``:
    ``latency.samples=0``), as does a ``__`` in a keyword's name (``latency__samples=0``)."""
    out: list[str] = []
    for key, value in settings.items():
        dotted = prefix + key.replace("__", ".")
        if isinstance(value, Mapping):
            out += settings_overrides(value, dotted + ".")
        else:
            out.append(f"{dotted}={override_value(value)}")
    return out


def run_overrides(
    method: str, dataset: str, limit: int | None = None, overrides: Sequence[str] = (), **settings: Any
) -> list[str]:
    """The command line's overrides for these arguments, in the order ``evaluate`` passes them, ending, as
    Hydra's command line does for a single run, in ``hydra.mode=RUN`` (kept in ``hydra.yaml``)."""
    out = [f"method={method}", f"dataset={dataset}"]
    if limit is not None:
        out.append(f"limit={override_value(limit)}")
    out += [*overrides, *settings_overrides(settings)]
    if not any(o.startswith("hydra.mode=") for o in out):
        out.append("hydra.mode=RUN")
    return out


def evaluate(
    method: str, dataset: str, limit: int | None = None, overrides: Sequence[str] = (), **settings: Any
) -> Evaluation:
    """Run ``method`` on ``dataset`` as ``python -m harness method=<method> dataset=<dataset> [limit=N] <overrides>
    <settings>`` would, into the same run folder (resuming what is there), and return its results.

    ``overrides`` are command-line overrides as typed (``"method.top_k=2"``, ``"profile=paper"``,
    ``"hydra.run.dir=..."``); ``settings`` are the same as keywords (``batch_size=4``, ``results_dir="out"``,
    ``latency={"samples": 0}``).
    """
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.utils import JobStatus

    from harness.config import register_resolvers
    from harness.provenance import REPO_ROOT

    register_resolvers()
    outcome: dict[str, Any] = {}

    def task(cfg: DictConfig) -> None:
        try:
            outcome["result"] = _run(cfg)
        except Exception as e:  # Hydra's job runner would swallow it: raised again below
            outcome["error"] = e

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), job_name=JOB_NAME, version_base="1.3"):
        app = GlobalHydra.instance().hydra
        assert app is not None
        job = app.run(
            config_name="config",
            task_function=task,
            overrides=run_overrides(method, dataset, limit, overrides, **settings),
            with_log_configuration=False,
        )
    if "error" in outcome:
        raise outcome["error"]
    if job.status != JobStatus.COMPLETED:
        raise RuntimeError(f"the run did not complete: {job.status}")
    summary, folder = outcome["result"]
    return Evaluation(summary, read_run_records(folder, summary["n"]), folder)


def _run(cfg: DictConfig) -> tuple[dict[str, Any], Path]:
    """The command line's job (``harness.__main__.main``) without its printing: validate, run, return."""
    from hydra.core.hydra_config import HydraConfig

    from harness.config import apply_profile_env
    from harness.validate import validate_config

    validate_config(cfg)  # before the data and any model
    apply_profile_env(cfg)
    from harness.runner import run

    folder = Path(HydraConfig.get().runtime.output_dir)
    return run(cfg, folder), folder


def read_run_records(folder: str | Path, n: int | None = None) -> pd.DataFrame:
    """The prediction records of a run folder as a table: one row per example id (its last record), in the
    order the examples were first recorded, the first ``n`` of them (a run's summary covers its first ``n``)."""
    import pandas as pd

    from harness.records import PREDICTIONS, read_jsonl

    by_id = {r["id"]: r for r in read_jsonl(Path(folder) / PREDICTIONS)}
    return pd.DataFrame(list(by_id.values())[:n])
