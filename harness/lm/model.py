"""One language model of the model layer: a tokenizer, an engine and the persistent call cache.

An ``LM`` tokenises (chat template or raw text) and runs four batched operations through its engine, each through
the call cache (``harness.lm.cache``):

- ``generate``: greedy completions;
- ``token_logprobs``: log-probabilities of given tokens as the next token (classifier prompts, e.g. Yes/No);
- ``prompt_logprobs``: log p(token | prefix) of every token from a start position (self-information);
- ``answer_nll``: mean NLL per token of an answer (followed by end-of-turn) after a prompt.

``harness.lm.instances.get_lm`` builds them, one per (weights, adapter, engine, dtype) per process. A prompt is
fitted to ``context_length`` by the callers that know its parts (``harness.lm.fit``); a token-id prompt that
still overflows is cut here by ``fit.fit_ids`` (head and tail kept, a warning logged), so that no call dies on
its length.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.lm import meter
from harness.lm.cache import Cached, cached_calls
from harness.protocols import Messages

log = logging.getLogger(__name__)


@dataclass
class Completion:
    """One greedy completion: decoded text, its token ids (stop token excluded), whether it hit the token cap,
    the seconds it cost when computed, and whether it was replayed from the cache."""

    text: str
    token_ids: list[int]
    hit_limit: bool
    seconds: float = 0.0
    replayed: bool = False


class LM:
    """A tokenizer plus an engine plus the call cache; see the module docstring. ``engine`` may be None with a
    ``start`` function that builds it when a call first needs it (vLLM engines always start so). A
    ``spec_start`` builds a second engine that speculates (``harness.lm.speculative``) for ``generate``, where the
    speculating engine cannot score (vLLM); each engine starts on its first computed call."""

    def __init__(
        self,
        ref: str,
        engine: Any,
        tokenizer: Any,
        info: dict[str, Any],
        start: Callable[[], Any] | None = None,
        spec_start: Callable[[], Any] | None = None,
        context_length: int | None = None,
    ) -> None:
        self.ref, self._engine, self._start, self.tokenizer, self.info = ref, engine, start, tokenizer, info
        # prompt + new tokens must fit it (harness.lm.fit); the tokenizer's own limit where the engine's is unknown
        limit = getattr(tokenizer, "model_max_length", None)
        self.context_length = int(context_length or (limit if limit and limit < 1_000_000 else 2048))
        self._spec_engine, self._spec_start = None, spec_start
        # hub ids have no local digest: the id (and its revision, if pinned in it) keys their calls instead
        weights = info["weights_sha256"] or f"ref:{ref}"
        adapter = info.get("adapter_sha256") or (f"ref:{info['adapter']}" if info.get("adapter") else None)
        self.namespace = f"{weights}|{adapter}|{info['engine']}|{info['dtype']}"
        eos = tokenizer.eos_token_id
        self.stop_ids = [eos] if eos is not None else []

    @property
    def engine(self) -> Any:
        """The engine of the scoring calls (and of generation without a speculating engine), started here if it
        was left for the first computed call."""
        self._ready_scoring()
        return self._engine

    @property
    def generation_engine(self) -> Any:
        """The engine ``generate`` runs on: the speculating one where there is one."""
        self._ready()
        return self._spec_engine if self._spec_start is not None else self._engine

    @property
    def started(self) -> bool:
        return bool(self.engines())

    def engines(self) -> list[Any]:
        """The engines started so far."""
        return [e for e in (self._engine, self._spec_engine) if e is not None]

    def speculation_counts(self) -> dict[str, float]:
        """The speculating engine's counters so far (``VLLMEngine.speculation_counts``); empty where there is none."""
        eng = self._spec_engine
        return eng.speculation_counts() if eng is not None and hasattr(eng, "speculation_counts") else {}

    def _ready(self) -> None:
        """Start the engine ``generate`` runs on (``cached_calls`` does so before it times a computed call; an
        eager ``get_lm`` at once)."""
        if self._spec_start is None:
            self._ready_scoring()
        elif self._spec_engine is None:
            self._spec_engine = self._spec_start()

    def _ready_scoring(self) -> None:
        if self._engine is None:
            assert self._start is not None
            self._engine = self._start()

    # ------------------------------------------------------------------ tokens
    def encode_chat(self, messages: Messages, **template_kwargs: Any) -> list[int]:
        """Token ids of ``messages`` through the chat template, ready for the assistant turn; a completion prompt
        (``harness.prompt.is_completion``) is its text's tokens, with the tokenizer's BOS."""
        from harness.prompt import is_completion

        if is_completion(messages):
            return self.encode(messages[0]["content"])
        enc = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True, **template_kwargs
        )
        return list(enc["input_ids"])

    def encode(self, text: str, special: bool = True) -> list[int]:
        """Token ids of raw text (with the tokenizer's special tokens, e.g. BOS, when ``special``)."""
        return list(self.tokenizer(text, add_special_tokens=special)["input_ids"])

    def newline_ids(self) -> list[int]:
        """The vocabulary's tokens that are only whitespace with a line break in it (the stop of a completion
        prompt: the reply's first line)."""
        if not hasattr(self, "_newline_ids"):
            vocab = self.tokenizer.get_vocab()
            maybe = [i for t, i in vocab.items() if "\n" in t or "Ċ" in t]  # SentencePiece / byte-level BPE
            self._newline_ids = sorted(i for i in maybe if "\n" in (d := self.decode([i])) and not d.strip())
        return self._newline_ids

    def count(self, text: str) -> int:
        return len(self.encode(text, special=False)) if text else 0

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def _ids(self, prompt: list[int] | Messages, room: int | None = None) -> list[int]:
        """Token ids of a prompt (a fitted one's own when fitted with this LM's tokenizer; messages fitted to
        another model, e.g. the generator's prompt scored by another LM, are encoded again), cut to ``room`` tokens
        if given and exceeded (the last resort of ``harness.lm.fit``: head and tail kept, a warning logged)."""
        if isinstance(getattr(prompt, "ids", None), list) and getattr(prompt, "tokenizer", None) is self.tokenizer:
            ids = list(prompt.ids)  # type: ignore[union-attr]
        elif prompt and isinstance(prompt[0], dict):
            ids = self.encode_chat(prompt)  # type: ignore[arg-type]
        else:
            ids = [int(t) for t in prompt]  # type: ignore[union-attr]
        if room is not None and len(ids) > room:
            from harness.lm.fit import fit_ids

            log.warning("%s: a prompt of %d tokens cut to %d (head and tail kept)", self.ref, len(ids), room)
            ids = fit_ids(ids, max(room, 1))[0]
        return ids

    # ------------------------------------------------------------------ operations
    def generate(
        self, prompts: Sequence[list[int] | Messages], max_new_tokens: int, stop_ids: Sequence[int] | None = None
    ) -> list[Completion]:
        """Greedy completions of token-id or chat prompts, in input order."""
        ids = [self._ids(p, self.context_length - int(max_new_tokens)) for p in prompts]
        stops = list(stop_ids) if stop_ids is not None else self.stop_ids
        settings: dict[str, Any] = {"max_new_tokens": int(max_new_tokens), "stop": stops, "greedy": True}
        if self.info.get("speculative") and self.info["dtype"] != "float32":  # where it could change the tokens
            settings["speculative"] = self.info["speculative"]
        with meter.muted():  # the engine's own forward passes are this call's, counted below
            rows = cached_calls(
                self.namespace,
                "generate",
                ids,
                settings,
                lambda ps: [list(x) for x in self.generation_engine.generate(ps, max_new_tokens, stops)],
                prepare=self._ready,
            )
        self._count(
            "generate",
            [[len(p), meter.written_of(r.value[0], bool(r.value[1]))] for p, r in zip(ids, rows, strict=True)],
        )
        return [
            Completion(self.decode(r.value[0]).strip(), list(r.value[0]), bool(r.value[1]), r.seconds, r.replayed)
            for r in rows
        ]

    def _count(self, op: str, each: list[list[int]]) -> None:
        """Tell the open token meters (``harness.lm.meter``) what this call read and wrote."""
        adapter = self.info.get("adapter")
        meter.lm_call(self.ref, None if not adapter else Path(str(adapter)).name, op, each)

    def token_logprobs(self, prompts: Sequence[list[int] | Messages], token_ids: Sequence[int]) -> list[Cached]:
        """Next-token log-probabilities of ``token_ids`` after each prompt (``.value``: one float per id)."""
        ids = [self._ids(p, self.context_length - 1) for p in prompts]
        self._count("token_logprobs", [[len(p), 0] for p in ids])
        with meter.muted():
            return cached_calls(
                self.namespace,
                "token_logprobs",
                ids,
                {"tokens": list(token_ids)},
                lambda ps: self.engine.token_logprobs(ps, list(token_ids)),
                prepare=self._ready_scoring,
            )

    def prompt_logprobs(self, prompts: Sequence[list[int]], start: Sequence[int] | int = 0) -> list[Cached]:
        """log p(token j | tokens < j) for j = start + 1 .. len - 1 (``.value``: a list of floats)."""
        starts = [start] * len(prompts) if isinstance(start, int) else list(start)
        items = [[list(p), int(s)] for p, s in zip(prompts, starts, strict=True)]
        self._count("prompt_logprobs", [[len(i[0]), 0] for i in items])
        with meter.muted():
            return cached_calls(
                self.namespace,
                "prompt_logprobs",
                items,
                {},
                lambda its: self.engine.prompt_logprobs([i[0] for i in its], [i[1] for i in its]),
                prepare=self._ready_scoring,
            )

    def answer_ids(self, answer: str) -> list[int]:
        """An answer's tokens followed by end-of-turn, as the generator would emit it."""
        return self.encode(answer, special=False) + self.stop_ids[:1]

    def answer_nll(self, prompts: Sequence[list[int] | Messages], answers: Sequence[str]) -> list[float]:
        """Mean NLL per token of each answer (and its end-of-turn) teacher-forced after its prompt."""
        seqs, starts = [], []
        for p, a in zip(prompts, answers, strict=True):
            head = self._ids(p, self.context_length - len(self.answer_ids(a)) - 1)
            seqs.append(head + self.answer_ids(a))
            starts.append(len(head) - 1)
        return [-sum(r.value) / len(r.value) for r in self.prompt_logprobs(seqs, starts)]

    def describe(self) -> dict[str, Any]:
        return {"ref": self.ref, **self.info}
