"""CSM-e2e (paper 002, section 4.3): train CSM through the frozen generator with a relaxed context mask.

The mask of unit i is ``M_i = BinaryConcrete((s_i + 1) / 2, temperature)`` from CSM's tanh score (the
released ``fit_e2e``; the paper writes Gumbel(M)). Two losses, ``L = L_suf + lambda * L_nec`` (lambda = 1):

- sufficiency: teacher-forced mean NLL of the gold answer (first alias, as the code) given the units gated by
  ``M``, under the shared prompt (same tokens as ``AnswerScorer.answer_nll``);
- necessity: with the complement ``1 - M``, the generator should not find the answer: the code's form, the
  negative entropy ``sum p log p`` of the next-token distribution at the last prompt position (KL(p || U) up
  to a constant; the paper's KL(U || p) is unstable on tiny probabilities, papers.md 2.6).

Making "unit i is in the context" differentiable, two gates (``gate``):

- ``attention`` (default): every query's attention logit to the key tokens of unit i gets ``+ log M_i`` (a 4-D
  additive attention mask). ``M_i = 1`` leaves the forward pass bit-identical to the ungated prompt and
  ``M_i -> 0`` removes the unit from every later token's view (it still occupies positions, so later tokens
  keep their RoPE offsets: the relaxation is exact at 1 and exact-up-to-position-gaps at 0). ``M`` is clamped
  at 1e-6 so the gradient ``1/M`` stays finite.
- ``embedding``: the paper's literal ``M ⊙ f_tok(C)``: the input embeddings of unit i's tokens are scaled
  by ``M_i``. At 0 the tokens become zero vectors the model still attends to: "removed" only approximately.

The released code detaches the gated embeddings before the generator (``input_suf.detach()``), which cuts the
gradient to CSM; here it flows. Units are the documents of the shared prompt (``DocK: ...`` lines); a unit's
tokens are those whose first character falls inside its line, newline included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from harness.prompt import build_messages

GATES = ("attention", "embedding")


@dataclass
class Encoded:
    ids: torch.Tensor  # (L,) prompt + answer + eos
    unit_of: torch.Tensor  # (L,) unit index per token, -1 outside the units
    prompt_len: int
    n_units: int


def binary_concrete(
    scores: torch.Tensor, temperature: float = 1.0, eps: float = 1e-6, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Relaxed Bernoulli sample with probability ``(s + 1) / 2`` for tanh scores ``s``."""
    p = ((scores + 1) / 2).clamp(eps, 1 - eps)
    # the noise is drawn on the CPU (one stream whatever device the scores are on) and moved to them
    u1 = torch.rand(p.shape, generator=generator).clamp(eps, 1 - eps).to(p.device)
    u2 = torch.rand(p.shape, generator=generator).clamp(eps, 1 - eps).to(p.device)
    g = -torch.log(-torch.log(u1)) + torch.log(-torch.log(u2))
    return torch.sigmoid((torch.log(p) - torch.log1p(-p) + g) / temperature)


class SoftMaskLM:
    """The frozen generator LM with a differentiable per-unit gate."""

    def __init__(self, model, tokenizer, gate: str = "attention", prompt: str = "paper") -> None:
        if gate not in GATES:
            raise ValueError(f"gate={gate!r}; valid: {', '.join(GATES)}")
        self.model, self.tok, self.gate, self.prompt = model, tokenizer, gate, prompt
        for p in self.model.parameters():
            p.requires_grad_(False)

    def encode(self, question: str, docs: Sequence[str], answer: str | None) -> Encoded:
        msgs = build_messages(question, docs, self.prompt)  # the generator's template
        text = self.tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        enc = self.tok(text, add_special_tokens=False, return_offsets_mapping=True)
        user = msgs[-1]["content"]
        base = text.rfind(user)
        if base < 0:
            raise ValueError("the chat template does not contain the user message verbatim")
        spans, pos = [], base + user.index("Documents:\n") + len("Documents:\n") if docs else base
        for j, d in enumerate(docs, start=1):
            line = f"Doc{j}: {d}"
            start = text.index(line, pos)
            end = start + len(line) + (1 if j < len(docs) else 0)
            spans.append((start, end))
            pos = end
        unit_of = []
        for s, _ in enc["offset_mapping"]:
            unit_of.append(next((j for j, (a, b) in enumerate(spans) if a <= s < b), -1))
        ids = list(enc["input_ids"])
        prompt_len = len(ids)
        if answer is not None:
            ids += self.tok(answer, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
            unit_of += [-1] * (len(ids) - prompt_len)
        return Encoded(torch.tensor(ids), torch.tensor(unit_of), prompt_len, len(docs))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _forward(self, e: Encoded, gate: torch.Tensor, length: int) -> torch.Tensor:
        dev = self.device
        ids = e.ids[:length].to(dev)
        unit_of = e.unit_of[:length].to(dev)
        gate = gate.to(dev)
        per_token = torch.ones(length, dtype=gate.dtype, device=dev)
        inside = unit_of >= 0
        if e.n_units:
            per_token = torch.where(inside, gate[unit_of.clamp(min=0)], per_token)
        causal = torch.full((length, length), float("-inf"), device=dev).triu(1)
        if self.gate == "attention":
            bias = torch.log(per_token.clamp(min=1e-6))
            mask = (causal + bias[None, :])[None, None]
            return self.model(input_ids=ids[None], attention_mask=mask).logits[0]
        emb = self.model.get_input_embeddings()(ids[None])
        return self.model(inputs_embeds=emb * per_token[None, :, None], attention_mask=causal[None, None]).logits[0]

    def sufficiency(self, e: Encoded, gate: torch.Tensor) -> torch.Tensor:
        """Mean NLL per answer token with units gated by ``gate``."""
        logits = self._forward(e, gate, len(e.ids))
        tgt = e.ids[e.prompt_len :].to(logits.device)
        return F.cross_entropy(logits[e.prompt_len - 1 : -1].float(), tgt)

    def necessity(self, e: Encoded, gate: torch.Tensor) -> torch.Tensor:
        """Negative entropy of the next-token distribution after the prompt with units gated by ``gate``."""
        logits = self._forward(e, gate, e.prompt_len)[-1].float()
        logp = F.log_softmax(logits, dim=-1)
        return (logp.exp() * logp).sum()
