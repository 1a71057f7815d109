"""EDC²-RAG's document clustering (paper 004, Algorithm 1, "Document Clustering Based on Graph Consistency").

``variant="paper"`` (default): every cluster is rooted at the remaining document most similar to the query;
the first cluster holds the ``tau`` remaining documents most similar to its root (the root included), each
later cluster ``min(2 x |previous cluster|, cap)`` of them, until no document is left. ``variant="code"``
(the released ``get_tag_doc_doc_similarity_dynamic.py``): roots in retrieval order, each cluster is the root
plus its ``length`` most similar remaining documents, ``length`` starting at ``tau`` and doubling up to
``cap``. Similarity is cosine; ties go to the earlier document. Clusters list documents in retrieval order.
"""

from __future__ import annotations

import numpy as np

VARIANTS = ("paper", "code")


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def _nearest(root: int, candidates: list[int], docs: np.ndarray, k: int) -> list[int]:
    """The root plus the ``k - 1`` candidates most similar to it (stable: ties keep retrieval order)."""
    others = [i for i in candidates if i != root]
    sims = docs[others] @ docs[root] if others else np.zeros(0)
    order = sorted(range(len(others)), key=lambda j: (-float(sims[j]), others[j]))
    return [root] + [others[j] for j in order[: max(k - 1, 0)]]


def dynamic_clusters(
    query: np.ndarray, docs: np.ndarray, tau: int = 3, cap: int = 20, variant: str = "paper"
) -> list[list[int]]:
    """Indices of ``docs`` grouped into clusters, in the order the algorithm builds them."""
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r}; valid: {', '.join(VARIANTS)}")
    if tau < 1 or cap < 1:
        raise ValueError(f"tau and cap must be >= 1 (got tau={tau}, cap={cap})")
    n = len(docs)
    if n == 0:
        return []
    d = _unit(docs)
    q_sims = d @ _unit(query)
    remaining = list(range(n))
    clusters: list[list[int]] = []
    size = tau
    while remaining:
        if variant == "paper":
            root = min(remaining, key=lambda i: (-float(q_sims[i]), i))
            take = size if not clusters else min(2 * len(clusters[-1]), cap)
        else:
            root = remaining[0]
            take = size + 1
            size = size * 2 if size * 2 < cap else cap
        members = _nearest(root, remaining, d, take)
        clusters.append(sorted(members))
        remaining = [i for i in remaining if i not in set(members)]
    return clusters
