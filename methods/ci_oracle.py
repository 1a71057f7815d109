"""Oracle CI-value selection (paper 002, section 3 and the "oracle CI val." row of Table 1).

Keeps every unit with positive Contextual Influence value (``harness.influence``), in retrieval order;
there is no top-k. It reads the gold answers, so it is an upper bound: ``oracle: true`` in ``describe()`` and
in every record's meta. Nothing positive means closed-book generation (an empty document list), as the
released code does (the paper is silent; papers.md 2.12 item 7).

Defaults: passage units; duplicates removed first (exact after whitespace/case normalisation, then MiniLM
cosine >= 0.95, the rule papers.md recommends since the paper gives none); at most 5 gold aliases scored.
Cost: (n+1) x aliases teacher-forced passes per question; no decoding. The scorer is the run's generator
(``AnswerScorer.answer_nll``, through the model layer); a generator without ``answer_nll`` (a remote server)
needs ``scorer_model``, the same model loaded by the model layer. The engines reuse shared prefixes: vLLM reads
its prefix cache for the answer tokens, transformers continues the key/value cache of the leave-one-out prompt
sharing most (``harness.lm``); same values as the padded batch (tested).
Departures: CI is computed under the run's generator prompt (harness.prompt), not FlashRAG's template, and the
answer is scored followed by end-of-turn (the harness scorer), where the code appends ``str(answer)`` alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.influence import (
    GRANULARITIES,
    UnitList,
    ci_values,
    documents,
    example_units,
    mark_duplicates_batch,
    positive,
)
from harness.prompt import messages_of
from harness.protocols import AnswerScorer, Compressor, MethodEnv, answer_scorer
from harness.types import Compressed, Example


class CIOracle(Compressor):
    name = "ci_oracle"
    reads_generator = True  # CI values are the generator's losses under its prompt (harness.reuse)

    def __init__(
        self,
        granularity: str = "passage",
        max_answers: int | None = 5,
        dedup_encoder: str | None = None,
        dedup_threshold: float = 0.95,
        min_words: int = 5,
        with_titles: bool = False,
        scorer_model: str | None = None,
    ) -> None:
        super().__init__()
        if granularity not in GRANULARITIES:
            raise ValueError(f"granularity={granularity!r}; valid: {', '.join(GRANULARITIES)}")
        self.granularity, self.max_answers = granularity, max_answers
        self.dedup_encoder, self.dedup_threshold = dedup_encoder, dedup_threshold
        self.min_words, self.with_titles, self.scorer_model = min_words, with_titles, scorer_model
        self.scorer: AnswerScorer | None = None
        self._encoder = None

    def bind(self, env: MethodEnv) -> None:
        super().bind(env)
        self.scorer = resolve_scorer(env, self.scorer_model)
        if self.dedup_encoder:
            from harness.lm.encoders import sentence_encoder

            self._encoder = sentence_encoder(self.dedup_encoder)

    def units(self, examples: Sequence[Example]) -> list[UnitList]:
        lists = [example_units(ex, self.granularity, self.min_words) for ex in examples]
        return mark_duplicates_batch(lists, self._encoder, self.dedup_threshold)

    def compress(self, example: Example) -> Compressed:
        return self.compress_batch([example])[0]

    def compress_batch(self, examples: Sequence[Example]) -> list[Compressed]:
        if self.scorer is None:
            raise RuntimeError("CIOracle was not bound to a run (call bind(MethodEnv(...)))")
        items = list(zip(examples, self.units(examples), strict=True))
        ask = messages_of(self.env.generator if self.env and self.env.generator else self.scorer)
        results = ci_values(self.scorer, items, self.max_answers, self.with_titles, ask)
        out = []
        for (ex, ul), res in zip(items, results, strict=True):
            kept = positive(res.values)
            out.append(
                Compressed(
                    documents=documents(ex, ul, kept, self.with_titles),
                    units=[ul.units[i] for i in kept],
                    meta={
                        "oracle": True,
                        "ci": [round(v, 6) for v in res.values],
                        "dropped": {str(i): why for i, why in ul.dropped.items()},
                        "answers_scored": len(res.answers),
                        "full_loss": round(res.full_loss, 6),
                    },
                )
            )
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "oracle": True,
            "granularity": self.granularity,
            "max_answers": self.max_answers,
            "dedup": {"encoder": self.dedup_encoder, "threshold": self.dedup_threshold},
            "min_words": self.min_words if self.granularity == "sentence" else None,
            "scorer": "generator" if self.scorer_model is None else self.scorer_model,
        }


def resolve_scorer(env: MethodEnv, scorer_model: str | None) -> AnswerScorer:
    """The run's generator when it can score answers; otherwise ``scorer_model`` from the model layer."""
    if scorer_model is None:
        return answer_scorer(
            env.generator,
            "ci_oracle",
            "set method.scorer_model to a local ref of the same model to score with the model layer",
        )
    from harness.lm import get_lm

    return get_lm(scorer_model, speculative=None)  # it scores answers, never generates
