"""``python -m harness method=<name> dataset=<name> [limit=N] [-m for a sweep]``."""

from __future__ import annotations

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from harness.config import apply_profile_env, register_resolvers
from harness.provenance import REPO_ROOT

register_resolvers()


@hydra.main(version_base="1.3", config_path=str(REPO_ROOT / "conf"), config_name="config")
def main(cfg: DictConfig) -> None:
    apply_profile_env(cfg)
    from harness.runner import format_summary, run

    out_dir = HydraConfig.get().runtime.output_dir
    summary = run(cfg, out_dir)
    print(format_summary(summary))
    print(f"records: {out_dir}")


if __name__ == "__main__":
    main()
