"""Reranking baselines (BM25, BGE-reranker, RECOMP-extractive): score units against the question, keep the
best, restore the original order.

This is the retrieval-baseline protocol of LongLLMLingua (LLMLingua #3): units are whole passages or their
sentences; the best are kept by ``top_k`` (a count) or by ``rate`` (a token budget of ``rate`` x the original
tokens, filled greedily in score order, stopping at the first unit that does not fit), and the kept units are
shown in their original order. The scorer is composed from config (``methods.scorers``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.protocols import Compressor, MethodEnv
from harness.text import assemble, rank_desc, sentence_units
from harness.types import Compressed, Example, Unit

GRANULARITIES = ("passage", "sentence")


def select_units(ranked: Sequence[int], unit_tokens: Sequence[int], top_k: int | None, budget: int | None) -> list[int]:
    """Indices kept from ``ranked`` (best first): at most ``top_k``, and within ``budget`` tokens."""
    kept, used = [], 0
    for i in ranked:
        if top_k is not None and len(kept) >= top_k:
            break
        if budget is not None and used + unit_tokens[i] > budget:
            break
        kept.append(i)
        used += unit_tokens[i]
    return kept


class RerankSelect(Compressor):
    """Score units with ``scorer``; keep the best by ``top_k`` and/or ``rate``; original order."""

    def __init__(
        self,
        scorer: Any,
        granularity: str = "passage",
        top_k: int | None = None,
        rate: float | None = None,
        with_titles: bool = False,
    ) -> None:
        super().__init__()
        if granularity not in GRANULARITIES:
            raise ValueError(f"granularity={granularity!r}; valid: {', '.join(GRANULARITIES)}")
        if top_k is None and rate is None:
            raise ValueError("set top_k, rate or both")
        if rate is not None and not 0 < rate <= 1:
            raise ValueError(f"rate must be in (0, 1], got {rate}")
        self.scorer, self.granularity = scorer, granularity
        self.top_k, self.rate, self.with_titles = top_k, rate, with_titles

    @property
    def reads_generator(self) -> bool:  # type: ignore[override]
        """A ``rate`` budget counts tokens with the generator's tokenizer (harness.reuse)."""
        return self.rate is not None

    def bind(self, env: MethodEnv) -> None:
        super().bind(env)
        self.scorer.load()

    def _units(self, example: Example) -> tuple[list[Unit], list[str]]:
        if self.granularity == "passage":
            return [Unit(i) for i in range(len(example.passages))], [p.render() for p in example.passages]
        return sentence_units(example.passages)

    def compress(self, example: Example) -> Compressed:
        units, texts = self._units(example)
        if not units:
            return Compressed(documents=[], units=[], meta={"scores": []})
        scores = self.scorer.score(example.question, texts)
        budget = None
        tokens = [0] * len(texts)
        if self.rate is not None:
            tokens = [self.count_tokens(t) for t in texts]
            budget = int(self.rate * sum(tokens))
        kept_idx = select_units(rank_desc(scores), tokens, self.top_k, budget)
        kept = [units[i] for i in sorted(kept_idx)]
        return Compressed(
            documents=assemble(example.passages, kept, self.with_titles),
            units=kept,
            meta={
                "scores": [round(float(s), 5) for s in scores],
                "requested": {"top_k": self.top_k, "rate": self.rate},
            },
        )

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "granularity": self.granularity,
            "top_k": self.top_k,
            "rate": self.rate,
            **self.scorer.describe(),
        }
