"""What the CPU can do, and the engine settings that follow from it (dtype, thread binding).

bf16 runs natively only where the CPU has ``avx512_bf16`` or ``amx_bf16`` (or on a GPU); elsewhere PyTorch
emulates it and it is about 10x slower than fp32, so ``dtype: auto`` picks fp32 there.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from functools import cache

NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@cache
def cpu_flags() -> frozenset[str]:
    """The flags of the first CPU in ``/proc/cpuinfo`` (empty where there is no such file)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def native_bf16() -> bool:
    return any(f in cpu_flags() for f in NATIVE_BF16_FLAGS)


def pick_dtype(requested: str = "auto") -> str:
    """``auto``: bfloat16 on a GPU or a CPU with native bf16, float32 otherwise; anything else unchanged."""
    if requested != "auto":
        return requested
    return "bfloat16" if has_cuda() or native_bf16() else "float32"


def usable_cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def thread_count(threads: int | None = None) -> int:
    """``threads``, else ``OMP_NUM_THREADS`` when the environment sets it (parallel jobs), else every core."""
    return int(threads or int(os.environ.get("OMP_NUM_THREADS") or 0) or len(usable_cores()))


def describe() -> dict[str, object]:
    """For records: the CPU flags that decide the engine settings."""
    flags = cpu_flags()
    keep = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx512_vnni", "fma")
    return {
        "cpu_flags": sorted(f for f in keep if f in flags),
        "native_bf16": native_bf16(),
        "cores": len(usable_cores()),
    }


def cpu_label() -> str:
    """The CPU's model name and what it runs natively: ``native bf16 (amx_bf16, avx512_bf16)``, ``AVX-512, no
    native bf16``, ``AVX2 only`` (bf16 emulated, about 10x slower than fp32). Latency passes record it (timings
    are compared only within one label: ``tools.latency_pass``), and so does the regression baseline (a gate run
    on the other kind shows whether the fp32 predictions hold across CPU kinds: ``tools.regress``)."""
    from harness.provenance import hardware

    return f"{hardware().get('cpu')}, {cpu_kind(describe()['cpu_flags'])}"  # type: ignore[arg-type]


def cpu_kind(flags: Iterable[str]) -> str:
    """What a CPU with these flags runs natively (``describe()['cpu_flags']``, as runs record them)."""
    flags = set(flags)
    if native := sorted(flags & set(NATIVE_BF16_FLAGS)):
        return f"native bf16 ({', '.join(native)})"
    if "avx512f" in flags:
        return "AVX-512, no native bf16"
    return "AVX2 only" if "avx2" in flags else "no AVX2"
