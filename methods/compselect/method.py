"""CompSelect inference: clue extractor -> clue reranker -> adaptive truncator (000 section 4, Fig. 3)."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.lm.cache import REPLAYS
from harness.lm.fit import truncated_meta
from harness.protocols import Compressor, Messages, MethodEnv
from harness.text import passage_sentences, rank_desc
from harness.types import Compressed, Example, Passage, Unit
from methods.compselect.cascade import cascade
from methods.compselect.context import CLUE_CONTEXTS, clue_documents
from methods.compselect.parsing import DEFAULT_THRESHOLD, Clue, map_clues, parse_truncation
from methods.compselect.prompts import OUTPUTS, extractor_messages, truncator_messages
from methods.compselect.truncator import truncator_decision

TRUNCATIONS = ("adaptive", "none", "random")
RERANKER_INPUTS = ("clue", "titled")  # what the clue reranker reads: the clue (000), or the clue under its title
REMAKE = "python -m methods.compselect.train"  # what re-makes the adapters (README)


@dataclass
class ExtractorInput:
    """The extractor prompt of one example and the sentences it shows (a prefix of all, if the budget cut
    some)."""

    messages: list[dict[str, str]]
    units: list[Unit]
    sentences: list[str]
    shown: int
    truncated: dict[str, int] = field(default_factory=dict)


def extractor_input(
    lm: Any, example: Example, max_input_tokens: int | None, max_new_tokens: int = 256
) -> ExtractorInput:
    """The Table 9 prompt over the sentences of the example's passages, dropping trailing sentences (last
    passage first) until the chat-formatted prompt fits ``max_input_tokens`` (the authors truncate the input
    at 2048) and the LM's context with ``max_new_tokens`` to spare; a question that alone overflows is cut then
    (the model layer's rule, ``harness.lm.fit``). ``truncated``: the tokens cut per part where the engine forced
    it (the question, or documents beyond the method's own window)."""
    from harness.lm.fit import budget, fit_prompt

    per_passage = passage_sentences(example.passages)
    units = [Unit(p, s) for p, sents in enumerate(per_passage) for s in range(len(sents))]
    flat = [s for sents in per_passage for s in sents]

    def build(shown: int, question: str = example.question) -> list[dict[str, str]]:
        docs, used = [], 0
        for sents in per_passage:
            take = sents[: max(0, shown - used)]
            used += len(sents)
            if take:
                docs.append(" ".join(take))
        return extractor_messages(question, docs)

    engine = budget(lm, max_new_tokens)
    room = min(engine, int(max_input_tokens)) if max_input_tokens else engine
    shown = len(flat)
    messages = build(shown)
    total = len(lm.encode_chat(messages))
    while total > room and shown > 0:
        over = total - room
        while over > 0 and shown > 0:  # drop about enough sentences, then re-measure
            shown -= 1
            over -= lm.count(flat[shown]) + 1
        messages = build(shown)
        total = len(lm.encode_chat(messages))
    # the documents cut by the method's own window (max_input_tokens) are its design (meta.sentences_shown); a
    # cut that the engine's context forced is recorded
    forced = shown < len(flat) and room == engine and not (max_input_tokens and engine == int(max_input_tokens))
    cut = {"documents": sum(lm.count(s) for s in flat[shown:])} if forced else {}
    if total > room:  # the question alone overflows
        fit = fit_prompt(lm, lambda question: build(0, question), {"question": example.question}, max_new_tokens)
        messages, cut = fit.prompt, {**cut, **fit.cut}
    return ExtractorInput(messages, units, flat, shown, cut)


class CompSelect(Compressor):
    """Compact clue selection (Zhang et al., "Less is More: Compact Clue Selection for Efficient RAG
    Reasoning", 000; FineFilter 003 is its earlier version). See ``methods/compselect/__init__.py`` for
    defaults and departures.

    ``extractor``/``truncator`` are LoRA adapter folders on the instruct LM ``lm`` (``extractor=None``: the
    un-tuned LM with the extractor prompt). ``reranker`` is a scorer built from config (``None``: the
    extractor's order). ``truncation``: ``adaptive`` (the truncator), ``none`` (keep every clue) or ``random``
    (K uniform in [0, n], seeded per example). ``truncator_output``: ``text`` (CompSelect) or ``index``
    (FineFilter's K). ``empty_threshold`` (``None``: the paper's greedy output): the truncator keeps nothing only
    when its first-token probability of the empty set reaches this value (``truncator_decision``), a departure
    for a weak truncator whose greedy output is almost always empty.

    The LM calls go through the model layer (``harness.lm``: vLLM by default, each adapter merged into derived
    weights, every call in the shared call cache): the ablations that share an extractor (no reranker, no
    truncator, random truncation) run it once. A replayed output brings the seconds it was measured at (the
    runner adds them to the compression time, and the ``extract`` stage time here includes them); the record
    flags ``extract_cached``.
    """

    name = "compselect"

    def __init__(
        self,
        lm: str,
        extractor: str | None = None,
        truncator: str | None = None,
        reranker: Any = None,
        truncation: str = "adaptive",
        truncator_output: str = "text",
        max_input_tokens: int | None = 2048,
        extractor_max_new_tokens: int = 256,
        truncator_max_new_tokens: int = 256,
        empty_threshold: float | None = None,
        match_threshold: float = DEFAULT_THRESHOLD,
        lm_batch_size: int = 8,
        dtype: str = "auto",
        device: str = "cpu",
        seed: int = 0,
        trust_remote_code: bool = False,
        engine: str = "vllm",
        clue_context: str = "sentence",
        reranker_input: str = "clue",
    ) -> None:
        super().__init__()
        if clue_context not in CLUE_CONTEXTS:
            raise ValueError(f"clue_context={clue_context!r}; valid: {', '.join(CLUE_CONTEXTS)}")
        if reranker_input not in RERANKER_INPUTS:
            raise ValueError(f"reranker_input={reranker_input!r}; valid: {', '.join(RERANKER_INPUTS)}")
        self.clue_context, self.reranker_input = clue_context, reranker_input
        if truncation not in TRUNCATIONS:
            raise ValueError(f"truncation={truncation!r}; valid: {', '.join(TRUNCATIONS)}")
        if truncator_output not in OUTPUTS:
            raise ValueError(f"truncator_output={truncator_output!r}; valid: {', '.join(OUTPUTS)}")
        if truncation == "adaptive" and not truncator:
            raise ValueError("truncation=adaptive needs a truncator adapter (truncator: <dir>)")
        if empty_threshold is not None and not 0.0 < float(empty_threshold) <= 1.0:
            raise ValueError(f"empty_threshold={empty_threshold!r}; valid: null or a probability in (0, 1]")
        self.empty_threshold = None if empty_threshold is None else float(empty_threshold)
        self.lm_ref, self.extractor, self.truncator, self.reranker = lm, extractor, truncator, reranker
        self.truncation, self.truncator_output = truncation, truncator_output
        self.max_input_tokens, self.match_threshold = max_input_tokens, match_threshold
        self.extractor_max_new_tokens, self.truncator_max_new_tokens = (
            extractor_max_new_tokens,
            truncator_max_new_tokens,
        )
        self.lm_batch_size, self.dtype, self.device, self.seed = lm_batch_size, dtype, device, seed
        self.trust_remote_code, self.engine = trust_remote_code, engine
        self.lms: dict[str, Any] = {}
        self._cuts: dict[str, dict[str, dict[str, int]]] = {}

    def bind(self, env: MethodEnv) -> None:
        super().bind(env)
        from pathlib import Path

        from harness.artifacts import ArtifactError, check_artifact, warn_if_trained_elsewhere
        from harness.lm import get_lm

        adapters = self._stages()
        for name, path in adapters.items():
            if path:  # checked against its manifest before it loads (harness.artifacts)
                check_artifact(path, REMAKE)
            if path and not (Path(path) / "adapter_config.json").is_file():
                raise ArtifactError(f"LoRA adapter {name!r} not found at {path}: train it with `{REMAKE}`")
            self.lms[name] = get_lm(
                self.lm_ref,
                engine=self.engine,
                dtype=self.dtype,
                adapter=path,
                device=self.device,
                batch_size=self.lm_batch_size,
                trust_remote_code=self.trust_remote_code,
            )
        trained = [p for p in adapters.values() if p]  # the committed stages share one manifest: one warning
        if trained:
            warn_if_trained_elsewhere(self.name, trained[0], env.generator, REMAKE)
        if self.reranker is not None and hasattr(self.reranker, "load"):
            self.reranker.load()

    @property
    def lm(self) -> Any:
        """The extractor's LM (tokenisation and budgets: an adapter leaves the tokenizer as it is)."""
        return self.lms.get("extractor")

    # -- stages ----------------------------------------------------------------------------------------------
    def _generate_clues(self, prompts: list[Messages]) -> tuple[list[str], list[bool]]:
        """The extractor's raw outputs and, per prompt, whether the call cache answered it."""
        assert self.lms, "bind() first"
        outs = self.lms["extractor"].generate(prompts, self.extractor_max_new_tokens)
        return [o.text for o in outs], [o.replayed for o in outs]

    def extract(
        self, examples: Sequence[Example]
    ) -> tuple[list[ExtractorInput], list[list[Clue]], list[list[str]], list[bool]]:
        """Stage 1: generate clue lines and map them to source sentences (clue.source indexes
        ``inputs[i].units``); last, whether each example's extraction was replayed from the call cache."""
        assert self.lm is not None, "bind() first"
        inputs = [extractor_input(self.lm, e, self.max_input_tokens, self.extractor_max_new_tokens) for e in examples]
        outs, replayed = self._generate_clues([x.messages for x in inputs])
        mapped = [map_clues(o, x.sentences[: x.shown], self.match_threshold) for o, x in zip(outs, inputs, strict=True)]
        return inputs, [m[0] for m in mapped], [m[1] for m in mapped], replayed

    def rerank(
        self, question: str, clues: list[Clue], titles: Sequence[str] | None = None
    ) -> tuple[list[Clue], list[float] | None]:
        """Stage 2: clues by descending reranker score (ties and ``reranker=None`` keep the extractor's
        order). ``titles`` (one per clue): the reranker reads each clue under its passage's title."""
        if self.reranker is None or not clues:
            return clues, None
        texts = [c.text for c in clues]
        if titles is not None:
            texts = [Passage(x, t).render() for t, x in zip(titles, texts, strict=True)]
        scores = self.reranker.score(question, texts)
        order = rank_desc(scores)
        return [clues[i] for i in order], [float(scores[i]) for i in order]

    def truncate(
        self, examples: Sequence[Example], ranked: list[list[Clue]]
    ) -> tuple[list[int], list[str | None], list[float | None]]:
        """Stage 3: K per example (the number of ranked clues kept), the truncator's raw output and, under
        ``empty_threshold``, its P(empty set)."""
        none: list[float | None] = [None] * len(ranked)
        if self.truncation == "none":
            return [len(r) for r in ranked], [None] * len(ranked), none
        if self.truncation == "random":
            return (
                [
                    random.Random(f"{self.seed}:{e.id}").randint(0, len(r))
                    for e, r in zip(examples, ranked, strict=True)
                ],
                [None] * len(ranked),
                none,
            )
        assert self.lms, "bind() first"
        todo = [i for i, r in enumerate(ranked) if r]
        fits = [self._truncator_prompt(examples[i].question, [c.text for c in ranked[i]]) for i in todo]
        lists = [list(f.parts["documents"]) for f in fits]
        prompts = [f.prompt for f in fits]
        for i, f in zip(todo, fits, strict=True):
            self._cuts.setdefault(examples[i].id, {}).update(truncated_meta("truncator", f.cut))
        ks, raw, p_empty = [0] * len(ranked), [None] * len(ranked), list(none)
        if self.empty_threshold is None:
            outs = [o.text for o in self.lms["truncator"].generate(prompts, self.truncator_max_new_tokens)]
            for i, o, texts in zip(todo, outs, lists, strict=True):
                raw[i] = o
                ks[i] = parse_truncation(o, texts, self.truncator_output, self.match_threshold)
            return ks, raw, p_empty
        decisions = truncator_decision(
            self.lms["truncator"],
            prompts,
            lists,
            self.truncator_output,
            self.empty_threshold,
            self.truncator_max_new_tokens,
            self.match_threshold,
        )
        for i, d in zip(todo, decisions, strict=True):
            ks[i], raw[i], p_empty[i] = d.k, d.output, d.p_empty
        return ks, raw, p_empty

    def _truncator_prompt(self, question: str, texts: list[str]) -> Any:
        """The truncator's prompt over the ranked clue texts, fitted to its LM (``harness.lm.fit``: the clues cut
        from the end first; one more new token for the decision's first token)."""
        from harness.lm.fit import fit_prompt

        return fit_prompt(
            self.lms["truncator"],
            lambda documents, question: truncator_messages(question, documents),
            {"documents": texts, "question": question},
            self.truncator_max_new_tokens + 1,
        )

    # -- the Compressor contract -----------------------------------------------------------------------------
    def compress(self, example: Example) -> Compressed:
        return self.compress_batch([example])[0]

    def compress_batch(self, examples: Sequence[Example]) -> list[Compressed]:
        n = max(len(examples), 1)
        self._cuts = {}  # meta.truncated per example (truncator stage)
        r0 = REPLAYS.seconds
        t0 = time.perf_counter()
        inputs, clues, dropped, replayed = self.extract(examples)
        t1 = time.perf_counter()
        extract_replayed = REPLAYS.seconds - r0  # measured when first computed; the runner adds them too
        reranked = [
            self.rerank(e.question, c, self._titles(e, x, c) if self.reranker_input == "titled" else None)
            for e, x, c in zip(examples, inputs, clues, strict=True)
        ]
        t2 = time.perf_counter()
        r2 = REPLAYS.seconds
        ks, raw, p_empty = self.truncate(examples, [r[0] for r in reranked])
        t3 = time.perf_counter()
        truncate_replayed = REPLAYS.seconds - r2
        timings = {
            "extract": (t1 - t0 + extract_replayed) / n,
            "rerank": (t2 - t1) / n,
            "truncate": (t3 - t2 + truncate_replayed) / n,
        }
        results = []
        for e, x, c, d, (r, scores), k, o, pe, cached in zip(
            examples, inputs, clues, dropped, reranked, ks, raw, p_empty, replayed, strict=True
        ):
            comp = self._result(e, x, c, d, r, scores, k, o, timings, self.clue_context)
            if cached:
                comp.meta["extract_cached"] = True
            if pe is not None:
                comp.meta["truncator_p_empty"] = round(pe, 5)
            cuts = {**truncated_meta("extractor", x.truncated), **self._cuts.get(e.id, {})}
            if cuts:
                comp.meta["truncated"] = cuts
            results.append(comp)
        return results

    @staticmethod
    def _titles(e: Example, x: ExtractorInput, clues: list[Clue]) -> list[str]:
        """The title of each clue's passage."""
        return [e.passages[x.units[c.source].passage].title for c in clues]

    @staticmethod
    def _result(
        e: Example,
        x: ExtractorInput,
        extracted: list[Clue],
        dropped: list[str],
        ranked: list[Clue],
        scores: list[float] | None,
        k: int,
        output: str | None,
        timings: dict[str, float],
        clue_context: str = "sentence",
    ) -> Compressed:
        """The kept clues as documents (ranked order; ``clue_context``: what is shown of each, ``context.py``)
        and the per-example record of every stage."""
        kept = ranked[:k]

        def unit(c: Clue) -> list[int | None]:
            return [x.units[c.source].passage, x.units[c.source].sentence]

        meta: dict[str, Any] = {
            "extracted": [
                {
                    "unit": unit(c),
                    "text": c.text,
                    "match": c.score,
                    **({"generated": c.generated} if c.score < 1 else {}),
                }
                for c in extracted
            ],
            "dropped": dropped,
            "ranked": [
                {"unit": unit(c), **({"score": round(scores[j], 5)} if scores else {})} for j, c in enumerate(ranked)
            ],
            "kept": [unit(c) for c in kept],
            "k": k,
            "n_clues": len(ranked),
            "sentences_shown": [x.shown, len(x.sentences)],
            "diagnostics": cascade(  # Table 6 cascading-error flags; the summary averages them
                [p.text for p in e.passages],
                [c.text for c in extracted],
                [c.text for c in ranked],
                [c.text for c in kept],
                e.answers,
            ),
        }
        if output is not None:
            meta["truncator_output"] = output
        documents, units = clue_documents(e.passages, [x.units[c.source] for c in kept], clue_context)
        return Compressed(
            documents=documents,
            units=units,
            timings=dict(timings),
            meta=meta,
        )

    def _stages(self) -> dict[str, str | None]:
        """The LM stages this configuration loads, each with its adapter (None: the un-tuned LM)."""
        stages = {"extractor": self.extractor}
        if self.truncation == "adaptive":
            stages["truncator"] = self.truncator
        return stages

    def _trained_through(self) -> str | None:
        """The generator whose replies labelled the trained stages (their manifest), None for untuned ones."""
        from harness.artifacts import trained_through

        return next((g for p in self._stages().values() if p and (g := trained_through(p))), None)

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "name": self.name,
            "extractor": "lora" if self.extractor else "untuned",
            "truncation": self.truncation,
            "truncator_output": self.truncator_output if self.truncation == "adaptive" else None,
            "empty_threshold": self.empty_threshold if self.truncation == "adaptive" else None,
            "max_input_tokens": self.max_input_tokens,
            "max_new_tokens": {
                "extractor": self.extractor_max_new_tokens,
                "truncator": self.truncator_max_new_tokens,
            },
            "match_threshold": self.match_threshold,
            "clue_context": self.clue_context,
            "reranker_input": self.reranker_input,
            "seed": self.seed,
            "reranker": None if self.reranker is None else self.reranker.describe(),
            "trained_through": self._trained_through(),
        }
        if self.lms:
            info["lm"] = self.lm.describe()
            info["adapters"] = {
                k: {"path": v.info["adapter"], "sha256": v.info["adapter_sha256"]}
                for k, v in self.lms.items()
                if v.info["adapter"]
            }
        return info
