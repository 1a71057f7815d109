"""Two rows of the leaderboard, question by question: the paired test's data made visible.

``python -m leaderboard compare RUNS A B --dataset D`` finds the runs of variants ``A`` and ``B`` on dataset ``D``
under ``RUNS`` (one profile and generator block: where several hold both, the block of the newest run, as
``publish`` heads the page, unless ``--generator`` picks another), pairs
their records on the example ids they share, and prints the wins, losses and ties of A against B on SubEM with
the paired bootstrap difference, then every question where their SubEM differs: the question, the gold answers,
both answers with their CR, echo and hedge flags, and each kept context where the run folder holds it (or, for an
archived run keeping only its hash, the archive's store: ``leaderboard.context_store``). Nothing here loads a model.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.metrics import compression_ratio
from harness.records import echoed, hedged
from harness.stats import paired_bootstrap
from leaderboard import context_store
from leaderboard.collect import collect, read_records
from leaderboard.headline import newest_block

WIDTH = 116


class CompareError(ValueError):
    """The two rows cannot be found or paired (the message says which and why)."""


@dataclass
class Comparison:
    """Two runs' records paired on their shared ids (``pairs``: (a, b) record dicts, in A's order)."""

    a: str
    b: str
    dataset: str
    block: tuple[str, str]
    folders: tuple[str, str]
    pairs: list[tuple[dict, dict]]
    others: tuple[str, ...] = ()  # the other generators holding both rows (the newest block was taken)

    @property
    def wins(self) -> int:
        return sum(a["subem"] > b["subem"] for a, b in self.pairs)

    @property
    def losses(self) -> int:
        return sum(a["subem"] < b["subem"] for a, b in self.pairs)

    @property
    def ties(self) -> int:
        return len(self.pairs) - self.wins - self.losses

    def differing(self) -> list[tuple[dict, dict]]:
        return [(a, b) for a, b in self.pairs if a["subem"] != b["subem"]]


def _row(runs: pd.DataFrame, variant: str) -> pd.Series:
    rows = runs[runs.variant == variant]
    if rows.empty:
        raise CompareError(f"no run of variant {variant!r} here; variants: {', '.join(sorted(set(runs.variant)))}")
    return rows.iloc[0]


def compare(root: str | Path, a: str, b: str, dataset: str, generator: str | None = None) -> Comparison:
    """Pair the records of variants ``a`` and ``b`` on ``dataset`` (see the module docstring)."""
    every = collect(root)
    runs = every[every.dataset == dataset]
    if generator is not None:
        runs = runs[runs.generator == generator]
    blocks = [k for k, g in runs.groupby(["profile", "generator"]) if {a, b} <= set(g.variant)]
    if not blocks:
        raise CompareError(f"no profile/generator block under {root} holds both {a!r} and {b!r} on {dataset!r}")
    held = every.set_index(["profile", "generator"]).index.isin(blocks)
    block = newest_block(every[held]) if len(blocks) > 1 else blocks[0]
    others = tuple(k[1] for k in blocks if k != block)
    runs = runs[(runs.profile == block[0]) & (runs.generator == block[1])]
    ra, rb = _row(runs, a), _row(runs, b)
    recs_a = context_store.fill(read_records(ra.folder, None if pd.isna(ra.n) else int(ra.n)), root, dataset)
    recs_b = read_records(rb.folder, None if pd.isna(rb.n) else int(rb.n))
    recs_b = {r["id"]: r for r in context_store.fill(recs_b, root, dataset)}
    pairs = [(r, recs_b[r["id"]]) for r in recs_a if r["id"] in recs_b]
    if not pairs:
        raise CompareError(f"{a!r} and {b!r} share no question on {dataset!r}")
    return Comparison(a, b, dataset, block, (ra.folder, rb.folder), pairs, others)


def _cr(record: dict) -> str:
    cr = compression_ratio(record["original_tokens"], record["compressed_tokens"])
    return "-" if cr is None else f"{cr:.1f}x" + (" (kept nothing)" if record["compressed_tokens"] == 0 else "")


def _context(record: dict) -> str:
    if "context" in record:
        return record["context"] or "(empty)"
    return f"(not kept in this run folder nor the archive's store; sha1 {record.get('context_sha1', '?')})"


def _indent(text: str, head: str) -> str:
    lines = text.splitlines() or [""]
    out = [textwrap.shorten(lines[0], WIDTH - len(head), placeholder=" ...")]
    out += [textwrap.shorten(x, WIDTH - len(head), placeholder=" ...") for x in lines[1:] if x.strip()]
    return "\n".join(head + x if i == 0 else " " * len(head) + x for i, x in enumerate(out))


def report(c: Comparison, contexts: bool = True) -> Iterator[str]:
    """The printed comparison, line by line."""
    t = paired_bootstrap([a["subem"] for a, _ in c.pairs], [b["subem"] for _, b in c.pairs])
    yield f"{c.a} vs {c.b} on {c.dataset} ({c.block[0]} / {c.block[1]}), {len(c.pairs)} shared questions"
    if c.others:
        yield f"  (the block of the newest run; also held by {', '.join(c.others)}: --generator picks one)"
    yield f"  A: {c.folders[0]}"
    yield f"  B: {c.folders[1]}"
    yield (
        f"SubEM: {c.wins} wins, {c.losses} losses, {c.ties} ties for {c.a}; difference {t.delta:+.1f} points "
        f"[{t.lo:+.1f}, {t.hi:+.1f}] (95% paired bootstrap), p={t.p:.3f}"
    )
    for n, (a, b) in enumerate(c.differing(), start=1):
        yield ""
        yield f"[{n}] {a['id']}  {'A wins' if a['subem'] > b['subem'] else 'B wins'}"
        yield _indent(a.get("question", "?"), "  question: ")
        yield _indent(" | ".join(a["answers"]), "  gold:     ")
        for tag, r in (("A", a), ("B", b)):
            flags = (
                f"SubEM {r['subem']:.0f}, CR {_cr(r)}"
                + (", ECHO" if echoed(r) else "")
                + (", HEDGE" if hedged(r) else "")
            )
            yield _indent(r["prediction"] or "(empty)", f"  {tag} {flags}: ")
            if contexts:
                yield _indent(_context(r), f"  {tag} context: ")
