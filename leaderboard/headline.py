"""Which block heads the leaderboard, and which variants repeat another row for row.

- **Headline**: one (profile, generator) block opens ``leaderboard.md`` and ``index.html``; every other block goes
  under "Archive" after it. ``publish(headline=...)`` (``--headline GENERATOR`` or ``PROFILE/GENERATOR``) names it;
  by default it is the block holding the newest run (``finished_at``), i.e. the generator the latest session ran,
  among the blocks that made their own contexts: a block that only read another block's contexts back (a second
  reader, ``harness.reuse``) stands beside the block it read, never in its place.
- **Aliases**: a variant whose records repeat another variant's (same example ids answered with the same
  prediction from the same context, on every dataset either ran) is the same pipeline on this profile (e.g. two
  reranker configs that load the same stand-in model): it is shown once, under the first variant in the papers'
  order, with the others named as its aliases. Decided from the records, never from a list of names.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable

import pandas as pd

from leaderboard.collect import read_records
from leaderboard.reference import variant_order


def newest_block(runs: pd.DataFrame) -> tuple[str, str]:
    """The (profile, generator) block holding the newest run (ties and undated runs: the first block in order),
    leaving out reader blocks (most of their examples' contexts read back from another block's runs) when any
    other block is left."""
    if "reused_contexts" in runs:
        sums = runs.groupby(["profile", "generator"], sort=False)[["reused_contexts", "n"]].sum()
        made = set(sums[sums.reused_contexts < 0.5 * sums.n].index)
        keep = runs[[(p, g) in made for p, g in zip(runs.profile, runs.generator, strict=True)]]
        runs = keep if len(keep) else runs
    finished = pd.to_datetime(runs["finished_at"], errors="coerce", utc=True, format="ISO8601")
    blocks = runs.assign(_f=finished).groupby(["profile", "generator"], sort=False)["_f"].max()
    if blocks.isna().all():
        return tuple(runs[["profile", "generator"]].iloc[0])  # type: ignore[return-value]
    return tuple(blocks.idxmax())  # type: ignore[return-value]


def pick_headline(runs: pd.DataFrame, choice: str | None = None) -> tuple[str, str]:
    """The headline block: ``choice`` (``generator`` or ``profile/generator``) or, without one, ``newest_block``."""
    if not choice:
        return newest_block(runs)
    blocks = list(runs[["profile", "generator"]].drop_duplicates().itertuples(index=False, name=None))
    hits = [b for b in blocks if choice in (b[1], f"{b[0]}/{b[1]}")]
    if len(hits) != 1:
        names = ", ".join(f"{p}/{g}" for p, g in blocks)
        why = "matches several blocks" if hits else "names no block"
        raise SystemExit(f"--headline {choice!r} {why}; blocks: {names}")
    return hits[0]


def _context_key(record: dict) -> str | None:
    """The context a record was answered from, as the archive hashes it (None when the record keeps neither)."""
    if "context_sha1" in record:
        return record["context_sha1"]
    if "context" in record:
        return hashlib.sha1((record["context"] or "").encode()).hexdigest()[:12]
    return None


def _signature(folder: str, n: float) -> dict[Hashable, tuple] | None:
    """Per example id: (prediction, context); None when a record keeps no context to compare."""
    out = {}
    for r in read_records(folder, None if pd.isna(n) else int(n)):
        ctx = _context_key(r)
        if ctx is None:
            return None
        out[r["id"]] = (r.get("prediction"), ctx)
    return out


def _same(a: dict | None, b: dict | None) -> bool:
    """Two runs' records agree on every shared id, and one run's ids are all in the other's."""
    if not a or not b:
        return False
    shared = a.keys() & b.keys()
    return len(shared) == min(len(a), len(b)) and all(a[i] == b[i] for i in shared)


def aliases(runs: pd.DataFrame) -> dict[tuple[str, str, str], str]:
    """``(profile, generator, alias) -> kept variant`` for every variant that repeats another row for row on
    every dataset of its block (see the module docstring); the kept one comes first in the papers' order."""
    out: dict[tuple[str, str, str], str] = {}
    for (profile, gen), g in runs.groupby(["profile", "generator"], sort=False):
        sigs = {(r.variant, r.dataset): _signature(r.folder, r.n) for r in g.itertuples()}
        dsets = {v: set(g[g.variant == v].dataset) for v in g.variant.unique()}
        kept: list[str] = []
        for v in variant_order(list(g.variant.unique())):
            twin = next(
                (k for k in kept if dsets[k] == dsets[v] and all(_same(sigs[(k, d)], sigs[(v, d)]) for d in dsets[v])),
                None,
            )
            if twin is None:
                kept.append(v)
            else:
                out[(profile, gen, v)] = twin
    return out


def mark_aliases(runs: pd.DataFrame, found: dict[tuple[str, str, str], str]) -> pd.DataFrame:
    """``runs`` with ``alias_of`` (the kept variant, on an alias's rows) and ``aliases`` (on a kept row: the
    variants it stands for, comma-separated)."""
    key = list(zip(runs.profile, runs.generator, runs.variant, strict=True))
    alias_of = [found.get(k) for k in key]
    named: dict[tuple[str, str, str], list[str]] = {}
    for (p, g, v), kept in found.items():
        named.setdefault((p, g, kept), []).append(v)
    return runs.assign(alias_of=alias_of, aliases=[", ".join(named.get(k, [])) or None for k in key])
