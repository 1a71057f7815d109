"""Hydra/OmegaConf resolvers used by ``conf/``: paths relative to the repository, and the run folder's override
string with the dataset sample in it."""

from __future__ import annotations

from omegaconf import OmegaConf

from harness.provenance import REPO_ROOT


def _repo_path(rel: str) -> str:
    return str((REPO_ROOT / rel).resolve())


def run_overrides(override_dirname: str, sample: str, seed: int) -> str:
    """The last part of a run folder: Hydra's override string (which leaves ``dataset.sample`` and
    ``dataset.seed`` out) with the sample added back only when it is not the default ``first``, so that runs on
    the split's first examples keep the folders they had before samples existed, whatever the seed."""
    if sample == "first":
        return override_dirname
    items = [o for o in str(override_dirname).split(",") if o]
    return ",".join(sorted([*items, f"dataset.sample={sample}", f"dataset.seed={seed}"]))


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("repo"):
        OmegaConf.register_new_resolver("repo", _repo_path)
    if not OmegaConf.has_resolver("run_overrides"):
        OmegaConf.register_new_resolver("run_overrides", run_overrides)


def apply_profile_env(cfg) -> None:
    """Process environment a profile asks for: an offline profile never touches the hub (the paper profile may)."""
    import os

    if cfg.profile.offline:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
