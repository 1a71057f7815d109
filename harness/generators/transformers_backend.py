"""The transformers backend of the shared generator: batched greedy decoding with left padding."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from harness.metrics import postprocess
from harness.protocols import Messages
from harness.types import Generation

log = logging.getLogger(__name__)


class TransformersGenerator:
    """Greedy chat generation with a Hugging Face causal LM through its chat template.

    Prompts are sorted by length and run in batches of ``batch_size`` (left-padded), then returned in input
    order. A prompt longer than ``max_input_tokens`` keeps its head and tail (a warning is logged); the papers
    truncate the input at 8192 tokens, which a top-5 prompt never reaches.
    """

    backend = "transformers"

    def __init__(
        self,
        model: str,
        name: str,
        dtype: str = "float32",
        max_new_tokens: int = 32,
        batch_size: int = 8,
        max_input_tokens: int = 8192,
        threads: int | None = None,
        trust_remote_code: bool = False,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        import torch

        from harness import resources

        self.name, self.model_ref, self.dtype = name, model, dtype
        self.max_new_tokens, self.batch_size, self.max_input_tokens = max_new_tokens, batch_size, max_input_tokens
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        # unset: OMP_NUM_THREADS when the environment sets it (parallel jobs), else every core
        torch.set_num_threads(threads or int(os.environ.get("OMP_NUM_THREADS") or 0) or os.cpu_count() or 1)
        self.model, self.tokenizer = resources.causal_lm(model, dtype, trust_remote_code)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0

    def _encode(self, messages: Messages) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True, **self.chat_template_kwargs
        )["input_ids"]
        if len(ids) > self.max_input_tokens:
            half = self.max_input_tokens // 2
            log.warning("prompt of %d tokens truncated to %d (head and tail kept)", len(ids), self.max_input_tokens)
            ids = ids[:half] + ids[-(self.max_input_tokens - half) :]
        return list(ids)

    def generate(self, prompts: Sequence[Messages]) -> list[Generation]:
        import torch

        encoded = [self._encode(m) for m in prompts]
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        out: list[Generation | None] = [None] * len(encoded)
        pad = self.tokenizer.pad_token_id
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            width = max(len(encoded[i]) for i in idx)
            input_ids = torch.full((len(idx), width), pad, dtype=torch.long)
            attention = torch.zeros((len(idx), width), dtype=torch.long)
            for row, i in enumerate(idx):
                ids = encoded[i]
                input_ids[row, width - len(ids) :] = torch.tensor(ids)
                attention[row, width - len(ids) :] = 1
            with torch.inference_mode():
                gen = self.model.generate(
                    input_ids=input_ids,
                    attention_mask=attention,
                    max_new_tokens=self.max_new_tokens,
                    do_sample=False,
                    num_beams=1,
                    pad_token_id=pad,
                    eos_token_id=self.tokenizer.eos_token_id,
                )
            for row, i in enumerate(idx):
                new = gen[row, width:].tolist()
                while new and new[-1] == pad:
                    new.pop()
                text = self.tokenizer.decode(new, skip_special_tokens=True)
                out[i] = Generation(text, postprocess(text), len(encoded[i]), len(new))
        return out  # type: ignore[return-value]

    def answer_nll(self, prompts: Sequence[Messages], answers: Sequence[str]) -> list[float]:
        """Teacher-forced mean NLL per token of each answer (followed by end-of-turn) after its chat prompt.

        Batched like ``generate`` (sorted by length, left-padded); used by CI-value selection and labelling.
        """
        import torch

        eos = self.tokenizer.eos_token_id
        pairs = []
        for m, a in zip(prompts, answers, strict=True):
            target = self.tokenizer(a, add_special_tokens=False)["input_ids"] + [eos]
            pairs.append((self._encode(m), target))
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        out = [0.0] * len(pairs)
        pad = self.tokenizer.pad_token_id
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            width = max(len(pairs[i][0]) + len(pairs[i][1]) for i in idx)
            ids = torch.full((len(idx), width), pad, dtype=torch.long)
            att = torch.zeros((len(idx), width), dtype=torch.long)
            labels = torch.full((len(idx), width), -100, dtype=torch.long)
            for row, i in enumerate(idx):
                p, t = pairs[i]
                seq = p + t
                ids[row, width - len(seq) :] = torch.tensor(seq)
                att[row, width - len(seq) :] = 1
                labels[row, width - len(t) :] = torch.tensor(t)
            with torch.inference_mode():
                logits = self.model(input_ids=ids, attention_mask=att).logits[:, :-1].float()
            tgt = labels[:, 1:]
            nll = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.size(-1)), tgt.reshape(-1), ignore_index=-100, reduction="none"
            ).view(tgt.shape)
            mask = (tgt != -100).float()
            per = (nll * mask).sum(1) / mask.sum(1)
            for row, i in enumerate(idx):
                out[i] = float(per[row])
        return out

    def describe(self) -> dict[str, Any]:
        from harness.models import resolve

        return {
            "name": self.name,
            "backend": self.backend,
            "model": resolve(self.model_ref).describe(),
            "dtype": self.dtype,
            "decoding": {"greedy": True, "max_new_tokens": self.max_new_tokens},
            "batch_size": self.batch_size,
            "max_input_tokens": self.max_input_tokens,
            "chat_template_kwargs": self.chat_template_kwargs,
        }
