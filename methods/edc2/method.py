"""EDC²-RAG (paper 004, Li et al.; code Tsinghua-dhy/EDC-2-RAG): cluster the retrieved passages dynamically,
compress each cluster with a query-aware LLM extraction, drop the summaries that say there is nothing to
extract, and answer from the surviving summaries, or from all the raw passages when none survive.

Defaults: Algorithm 1 as the paper gives it (``cluster.dynamic_clusters``, tau = 3 for QA, cap 20), cosine
over the encoder's normalised embeddings of the passages and the question; the section 4.3 prompt verbatim,
zero-shot (``escape_line=False``, ``edc2_no_escape``: without its "No content to extract" line); the released
code's drop rule. Each surviving summary becomes one document of the harness's shared
prompt (the code numbers them ``1.{s}`` in its own answer prompt); the fallback shows the passages as
``Full`` does.
All clusters of a batch of examples go to the LLM together. ``meta`` records the clusters, the summaries,
which survived, ``llm_calls`` (one per cluster) and whether the fallback fired.
Departures: the embedder is the profile's sentence encoder (paper: unspecified; code: a BERT pooler output);
passages are shown to the LLM as ``{title}: {text}`` (the code passes text only); the answer prompt is the
harness's, not EDC²'s "Please refer to the following text..." (papers.md 4.10); no LLM rewrite of answers.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from harness.lm.fit import truncated_meta
from harness.protocols import Compressor, MethodEnv
from harness.types import Compressed, Example, Passage, Unit

from .cluster import VARIANTS, dynamic_clusters
from .prompts import compress_prompt, keep_summary


def sum_cuts(cuts: Iterable[dict[str, int]]) -> dict[str, int]:
    """The tokens cut per part over an example's cluster prompts."""
    total: dict[str, int] = {}
    for cut in cuts:
        for part, n in cut.items():
            total[part] = total.get(part, 0) + n
    return total


def passage_text(p: Passage) -> str:
    return f"{p.title}: {p.text}" if p.title else p.text


class EDC2(Compressor):
    name = "edc2"

    def __init__(
        self,
        llm: Any,
        encoder: str,
        tau: int = 3,
        cap: int = 20,
        variant: str = "paper",
        few_shot: Sequence[str] = (),
        drop_question_marks: bool = True,
        escape_line: bool = True,
    ) -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"variant={variant!r}; valid: {', '.join(VARIANTS)}")
        self.llm, self.encoder_ref = llm, encoder
        self.tau, self.cap, self.variant = tau, cap, variant
        self.few_shot, self.drop_question_marks = list(few_shot), drop_question_marks
        self.escape_line = escape_line
        self._encoder = None

    def bind(self, env: MethodEnv) -> None:
        super().bind(env)
        from harness.lm.encoders import sentence_encoder

        self._encoder = sentence_encoder(self.encoder_ref)
        self.llm.load()

    def clusters(self, example: Example) -> list[list[int]]:
        import numpy as np

        if not example.passages:
            return []
        texts = [passage_text(p) for p in example.passages]
        vecs = np.asarray(
            self._encoder.encode([example.question, *texts], normalize_embeddings=True, show_progress_bar=False)
        )
        return dynamic_clusters(vecs[0], vecs[1:], self.tau, self.cap, self.variant)

    def compress(self, example: Example) -> Compressed:
        return self.compress_batch([example])[0]

    def compress_batch(self, examples: Sequence[Example]) -> list[Compressed]:
        if self._encoder is None:
            raise RuntimeError("EDC2 was not bound to a run (call bind(MethodEnv(...)))")
        t0 = time.perf_counter()
        groups = [self.clusters(ex) for ex in examples]
        t1 = time.perf_counter()
        render = lambda documents, question: compress_prompt(  # noqa: E731
            question, documents, self.few_shot, self.escape_line
        )
        fits = [
            self.llm.fit(render, {"documents": [passage_text(ex.passages[i]) for i in cl], "question": ex.question})
            for ex, cls in zip(examples, groups, strict=True)
            for cl in cls
        ]
        summaries = self.llm.complete([f.prompt for f in fits]) if fits else []
        t2 = time.perf_counter()
        n = max(len(examples), 1)
        out, k = [], 0
        for ex, cls in zip(examples, groups, strict=True):
            mine = summaries[k : k + len(cls)]
            cut = sum_cuts(f.cut for f in fits[k : k + len(cls)])
            k += len(cls)
            kept = [keep_summary(s, self.drop_question_marks) for s in mine]
            fallback = not any(kept)
            docs = (
                [p.render() for p in ex.passages] if fallback else [s for s, ok in zip(mine, kept, strict=True) if ok]
            )
            out.append(
                Compressed(
                    documents=docs,
                    units=[Unit(i) for i in range(len(ex.passages))] if fallback else None,
                    timings={"cluster": (t1 - t0) / n, "summarize": (t2 - t1) / n},
                    meta={
                        "clusters": cls,
                        "summaries": mine,
                        "kept": kept,
                        "llm_calls": len(cls),
                        "fallback": fallback,
                        **({"truncated": truncated_meta("edc2", cut)} if cut else {}),
                        # averaged by the run's summary: LLM calls per question, share of raw-passage fallbacks
                        "diagnostics": {
                            "llm_calls": len(cls),
                            "fallback": float(fallback),
                            "summaries_kept": sum(kept),
                        },
                    },
                )
            )
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tau": self.tau,
            "cap": self.cap,
            "variant": self.variant,
            "few_shot": len(self.few_shot),
            "drop_question_marks": self.drop_question_marks,
            **({} if self.escape_line else {"escape_line": False}),  # the default's records as before
            "encoder": self.encoder_ref,
            "llm": self.llm.describe(),
        }
