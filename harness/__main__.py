"""``python -m harness method=<name> dataset=<name> [limit=N] [-m for a sweep]``."""

from __future__ import annotations

import os

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from harness.config import register_resolvers
from harness.provenance import REPO_ROOT

register_resolvers()


@hydra.main(version_base="1.3", config_path=str(REPO_ROOT / "conf"), config_name="config")
def main(cfg: DictConfig) -> None:
    if cfg.profile.offline:  # the embedded profile never touches the hub; the paper profile may
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from harness.runner import format_summary, run

    out_dir = HydraConfig.get().runtime.output_dir
    summary = run(cfg, out_dir)
    print(format_summary(summary))
    print(f"records: {out_dir}")


if __name__ == "__main__":
    main()
