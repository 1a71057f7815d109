"""Prompting a causal LM in batches for methods that generate (abstractive compressors, prompted stand-ins).

A shared utility, not a method: greedy decoding, prompts sorted by length and left-padded, outputs returned
in input order. Models come from ``harness.resources`` so that a method prompting the generator's model
(``${models.lm}``) shares its one instance. A PEFT adapter (``adapter=``) is applied to a private copy of
the base model, so that a shared instance is never wrapped in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness import resources
from harness.protocols import Messages


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_causal_lm(
    ref: str, dtype: str = "float32", adapter: str | None = None, trust_remote_code: bool = False
) -> tuple[Any, Any]:
    """(model, tokenizer): the shared instance of ``ref``, or ``ref`` with the LoRA ``adapter`` merged in."""
    if adapter is None:
        return resources.causal_lm(ref, dtype, trust_remote_code)

    def build():
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from harness.models import resolve

        path = resolve(ref).path
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        base = AutoModelForCausalLM.from_pretrained(
            path, dtype=getattr(torch, dtype), trust_remote_code=trust_remote_code
        ).to(default_device())
        model = PeftModel.from_pretrained(base, resolve(adapter).path, is_trainable=False).eval()
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        return model, tok

    return resources.shared(("peft_causal_lm", ref, adapter, dtype), build)


@dataclass
class Output:
    """One generation: the decoded text and how many tokens were generated (end-of-turn excluded)."""

    text: str
    tokens: int
    hit_limit: bool


class BatchedLM:
    """Greedy generation over many prompts at once; prompts are chat messages or raw strings."""

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 8) -> None:
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size

    def encode_chat(self, messages: Messages) -> list[int]:
        """Token ids of ``messages`` through the model's chat template, ready for the assistant turn."""
        enc = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True
        )
        return list(enc["input_ids"])

    def encode_raw(self, text: str) -> list[int]:
        """Token ids of a raw prompt string (the tokenizer's special tokens, e.g. BOS, included)."""
        return list(self.tokenizer(text)["input_ids"])

    def count(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0

    def generate(self, prompts: Sequence[list[int]], max_new_tokens: int) -> list[Output]:
        """Greedy continuation of each tokenised prompt, in input order."""
        import torch

        out: list[Output | None] = [None] * len(prompts)
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        pad = self.tokenizer.pad_token_id
        eos = self.tokenizer.eos_token_id
        device = next(self.model.parameters()).device
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            width = max(len(prompts[i]) for i in idx)
            ids = torch.full((len(idx), width), pad, dtype=torch.long)
            att = torch.zeros((len(idx), width), dtype=torch.long)
            for row, i in enumerate(idx):
                n = len(prompts[i])
                ids[row, width - n :] = torch.tensor(prompts[i], dtype=torch.long)
                att[row, width - n :] = 1
            with torch.inference_mode():
                gen = self.model.generate(
                    input_ids=ids.to(device), attention_mask=att.to(device), max_new_tokens=max_new_tokens,
                    do_sample=False, num_beams=1, pad_token_id=pad, eos_token_id=eos,
                )
            for row, i in enumerate(idx):
                new = gen[row, width:].tolist()
                ended = eos in new
                if ended:
                    new = new[: new.index(eos)]
                while new and new[-1] == pad:
                    new.pop()
                text = self.tokenizer.decode(new, skip_special_tokens=True).strip()
                out[i] = Output(text, len(new), not ended and len(new) >= max_new_tokens)
        return out  # type: ignore[return-value]
