"""``python -m harness method=<name> dataset=<name> [limit=N] [-m for a sweep]``.

A bad setting (``ConfigError``), bad input data (``DatasetError``) or a run folder of another configuration
(``RunFolderMismatch``) ends the run with one ``error: ...`` line on stderr and exit status 2, before any model
loads for the first two; so does a generator's server that cannot answer (``ServerError``: unreachable after its
retries, an error status, a timeout), and an example whose compression or generation raises (``ExampleError``,
naming the example, the method and the stage; ``on_error=skip`` records it and goes on), and a full disk
(``DiskFull``: the file, the records kept, free space and re-run to resume). ``hydra.verbose=true`` shows the
traceback instead.
"""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from harness.config import apply_profile_env, register_resolvers
from harness.data import DatasetError
from harness.lm.server import ServerError
from harness.provenance import REPO_ROOT
from harness.records import DiskFull, RunFolderMismatch
from harness.runlock import RunFolderBusy
from harness.validate import ConfigError, validate_config
from harness.workers import prepare_worker

register_resolvers()

USER_ERRORS = (ConfigError, DatasetError, RunFolderMismatch, ServerError)
USER_ERRORS += (RunFolderBusy,)  # a second process on the same run folder (harness.runlock)
USER_ERRORS += (DiskFull,)  # the run folder's filesystem is full or over quota (harness.records)


@hydra.main(version_base="1.3", config_path=str(REPO_ROOT / "conf"), config_name="config")
def main(cfg: DictConfig) -> None:
    prepare_worker()  # a launcher's worker process (joblib, Ray, submitit): harness.workers
    from harness.runner import ExampleError

    try:
        validate_config(cfg)  # before the data and any model
        apply_profile_env(cfg)
        from harness.runner import format_summary, run

        out_dir = HydraConfig.get().runtime.output_dir
        summary = run(cfg, out_dir)
    except (*USER_ERRORS, ExampleError) as e:
        if HydraConfig.get().verbose:
            raise
        print("error: " + " ".join(str(e).splitlines()), file=sys.stderr)
        sys.exit(2)
    print(format_summary(summary))
    print(f"records: {out_dir}")
    if summary.get("merged_into"):
        print(f"all {summary['shard']['count']} shards done, merged into: {summary['merged_into']}")


if __name__ == "__main__":
    main()
