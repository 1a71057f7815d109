"""Hydra/OmegaConf resolvers used by ``conf/``: paths relative to the repository."""

from __future__ import annotations

from omegaconf import OmegaConf

from harness.provenance import REPO_ROOT


def _repo_path(rel: str) -> str:
    return str((REPO_ROOT / rel).resolve())


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("repo"):
        OmegaConf.register_new_resolver("repo", _repo_path)


def apply_profile_env(cfg) -> None:
    """Process environment a profile asks for: an offline profile never touches the hub (the paper profile may)."""
    import os

    if cfg.profile.offline:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
