"""Shared token prefixes among prompts: how much of a batch a prefix cache can save.

The leave-one-out prompts of CI-value scoring (the full context, then the context without unit i) and the
answers scored after one prompt share long prefixes; engines that reuse a prefix's key/value cache
(``hf_engine.TransformersEngine._shared_prefix_logprobs``) ask ``mostly_shared`` whether it pays.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_BASES = 4  # recent prompts whose cache a later prompt may extend


def lcp(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def best_base(ids: Sequence[int], bases: Sequence[Sequence[int]]) -> tuple[int, int]:
    """(index, shared length) of the base sharing the longest prefix with ``ids``; (-1, 0) when none does."""
    best, at = 0, -1
    for i, b in enumerate(bases):
        n = lcp(ids, b)
        if n > best:
            best, at = n, i
    return at, best


def mostly_shared(prompts: Sequence[Sequence[int]], share: float = 0.5) -> bool:
    """Whether at least ``share`` of the tokens of ``prompts`` (in order) repeat a prefix of one of the
    ``MAX_BASES`` prompts before them."""
    total = sum(len(p) for p in prompts)
    if len(prompts) < 2 or not total:
        return False
    shared = sum(best_base(p, prompts[max(0, i - MAX_BASES) : i])[1] for i, p in enumerate(prompts))
    return shared >= share * total
