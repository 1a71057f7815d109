"""Hydra/OmegaConf resolvers used by ``conf/`` (paths relative to the repository, the run folder's override
string with the dataset sample in it, and a generator's name with its prompt in it), the profile's process
environment, and ``compose_config``: the one way a script outside a Hydra app (the regression gate, benchmarks,
research) builds a config from ``conf/``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from omegaconf import OmegaConf

if TYPE_CHECKING:
    from omegaconf import DictConfig

from harness.provenance import REPO_ROOT


def _repo_path(rel: str) -> str:
    return str((REPO_ROOT / rel).resolve())


def run_overrides(override_dirname: str, sample: str, seed: int, shard: str | None = None) -> str:
    """The last part of a run folder: Hydra's override string (which leaves ``dataset.sample``,
    ``dataset.seed`` and ``shard`` out) with the sample added back only when it is not the default ``first``, so
    that runs on the split's first examples keep the folders they had before samples existed, whatever the seed;
    a shard (``shard=i/n``) runs in ``shards/i-of-n`` under the folder of the unsharded run (``harness.shards``)."""
    if sample == "first":
        out = str(override_dirname)
    else:
        items = [o for o in str(override_dirname).split(",") if o]
        out = ",".join(sorted([*items, f"dataset.sample={sample}", f"dataset.seed={seed}"]))
    from harness.shards import Shard

    parsed = Shard.parse(shard)
    if parsed is None:
        return out
    return f"{out}/{parsed.subfolder}" if out else parsed.subfolder


def generator_name(base: str, prompt: str = "paper", answer: str = "paper") -> str:
    """A generator's name with its prompt template and answer rule in it where they are not the paper's
    (``smollm2-135m-instruct-vllm`` -> ``smollm2-135m-instruct-vllm-documents_first-first_line``): the name heads
    the run folder and the leaderboard block, so runs asked another way never mix with the paper prompt's."""
    parts = [base] + [v for v in (prompt, answer) if v != "paper"]
    return "-".join(parts)


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("repo"):
        OmegaConf.register_new_resolver("repo", _repo_path)
    if not OmegaConf.has_resolver("run_overrides"):
        OmegaConf.register_new_resolver("run_overrides", run_overrides)
    if not OmegaConf.has_resolver("generator_name"):
        OmegaConf.register_new_resolver("generator_name", generator_name)


def apply_profile_env(cfg) -> None:
    """Process environment a profile asks for: an offline profile never touches the hub (the paper profile may);
    the speculative decoding of every LM a method starts (``models.speculative``, ``harness.lm.speculative``)."""
    import os

    if cfg.profile.offline:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from harness.lm import speculative

    speculative.configure((cfg.get("models") or {}).get("speculative"))


def compose_config(name: str = "config", overrides: Sequence[str] = (), profile_env: bool = True) -> DictConfig:
    """The config ``conf/<name>.yaml`` composes to with ``overrides`` (as ``python -m harness <overrides>`` or a
    training script's ``--config-name <name>`` would build it), the resolvers registered; ``profile_env`` applies
    the profile's environment (``apply_profile_env``: an offline profile never touches the hub) before anything
    loads a model."""
    from hydra import compose, initialize_config_dir

    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose(name, overrides=list(overrides))
    if profile_env:
        apply_profile_env(cfg)
    return cfg
