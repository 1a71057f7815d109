"""CSM's local layer (paper 002, section 4.1): a BERT-family encoder over each (question, unit) pair,
mean-pooled over tokens, truncated to 512 tokens (only the unit is cut). The encoder is frozen here, as in the
released ``csm.py``, so pair features can be computed once and cached for training."""

from __future__ import annotations

from collections.abc import Sequence

from harness.lm.encoders import hf_encoder


class PairEncoder:
    """Mean-pooled last hidden states of ``[CLS] q [SEP] unit [SEP]``; ``dim`` is the encoder width."""

    def __init__(self, ref: str, max_length: int = 512, batch_size: int = 32) -> None:
        self.ref, self.max_length, self.batch_size = ref, max_length, batch_size
        self.model, self.tokenizer = hf_encoder(ref)
        self.dim = int(self.model.config.hidden_size)

    def encode(self, questions: Sequence[str], texts: Sequence[str]):
        """A float32 tensor (len(texts), dim) of pair features, in input order. Pairs are batched by length
        (longest first) so that a batch pads little; the mask keeps padding out of every pair's features."""
        import torch

        if not texts:
            return torch.zeros(0, self.dim)
        order = sorted(range(len(texts)), key=lambda i: -(len(questions[i]) + len(texts[i])))
        out = []
        for s in range(0, len(order), self.batch_size):
            idx = order[s : s + self.batch_size]
            enc = self.tokenizer(
                [questions[i] for i in idx],
                [texts[i] for i in idx],
                truncation="only_second",
                max_length=self.max_length,
                padding=True,
                return_tensors="pt",
            )
            with torch.inference_mode():
                h = self.model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            out.append((h * m).sum(1) / m.sum(1).clamp(min=1.0))
        feats = torch.empty(len(texts), self.dim)
        feats[torch.tensor(order)] = torch.cat(out).float()
        return feats
