r"""EXIT: context-aware extractive compression (Hwang et al. 2024, arXiv 2412.12559; code ThisIsHwang/EXIT).

Every passage is split into sentences; each sentence is classified with its whole passage (title and text) as
context by a causal LM answering EXIT's prompt (paper Table 6; ``build_user`` and ``QUESTION``, verbatim)::

    Query:\n{query}\nFull context:\n{context}\nSentence:\n{sentence}\n
    Is this sentence useful in answering the query? Answer only "Yes" or "No".

The score is P(Yes) = the softmax of the next-token logits of "Yes" and "No" (each must be one token), and
the sentences with P(Yes) >= ``threshold`` (0.5, as in the paper) are kept in original order, grouped by
passage without titles (EXIT's reassembly). An example may keep nothing.

Profiles: paper: ``google/gemma-2b-it`` with the LoRA ``doubleyyh/exit-gemma-2b`` (peft, loaded lazily) and
``prompt: literal``, EXIT's Gemma turn markers verbatim (``<start_of_turn>user\n...<end_of_turn>\n``
``<start_of_turn>model\n`` after the tokenizer's BOS; Gemma's own chat template renders the same text).
Embedded: the same user turn zero-shot on SmolLM2-135M-Instruct through its chat template (``prompt: chat``,
which adds SmolLM2's default system turn), on the shared model instance. A LoRA is applied to a private copy
of the base, never to the shared instance.

Batching: the sentences of a passage share the prompt's head (query, passage, "Sentence:" marker). With
``share_prefix`` (default) the head runs once per passage and its KV cache serves all its sentences, whose
tails go through right-padded batches; without it, full prompts go through left-padded batches of
``batch_size`` (EXIT's scheme). Both give the same scores (the tests pin it); the token sequence is EXIT's
up to the tokenisation boundary after "Sentence:\n" (EXIT also encodes head, context and tail apart).

Departures, and why: sentences come from the harness splitter (pysbd; EXIT uses spaCy's rule-based
sentencizer) so that every method sees the same sentences; weights run in ``dtype`` (EXIT loads the base in
4-bit, which needs bitsandbytes and a GPU); a context longer than ``max_length`` keeps its head and tail, as
EXIT does. The threshold is not restricted to [0, 1] (above 1 keeps nothing, 0 keeps everything).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness import resources
from harness.protocols import Compressor, MethodEnv
from harness.text import split_sentences
from harness.types import Compressed, Example, Unit

QUESTION = 'Is this sentence useful in answering the query? Answer only "Yes" or "No".'
SENTENCE_MARK = "\nSentence:\n"
PROMPTS = ("literal", "chat")
_SLOT = "\x00CONTEXT\x00"


def build_user(query: str, context: str, sentence: str) -> str:
    """The user turn of EXIT's classification prompt."""
    return f"Query:\n{query}\nFull context:\n{context}{SENTENCE_MARK}{sentence}\n{QUESTION}"


@dataclass
class _Candidate:
    example: int
    passage: int
    sentence: int
    text: str


class Exit(Compressor):
    """Keep the sentences a Yes/No classifier LM finds useful for the query; see the module docstring."""

    name = "exit"

    def __init__(
        self,
        model: str,
        adapter: str | None = None,
        threshold: float = 0.5,
        prompt: str = "chat",
        share_prefix: bool = True,
        batch_size: int = 16,
        max_length: int = 4096,
        dtype: str = "float32",
        device: str = "auto",
        trust_remote_code: bool = False,
    ) -> None:
        super().__init__()
        if prompt not in PROMPTS:
            raise ValueError(f"prompt={prompt!r}; valid: {', '.join(PROMPTS)}")
        self.model_ref, self.adapter, self.threshold, self.prompt = model, adapter, float(threshold), prompt
        self.share_prefix, self.batch_size, self.max_length = share_prefix, batch_size, max_length
        self.dtype, self.device, self.trust_remote_code = dtype, device, trust_remote_code
        self.model: Any = None
        self.tokenizer: Any = None

    # ------------------------------------------------------------------ loading
    def bind(self, env: MethodEnv) -> None:
        super().bind(env)
        device = self.device
        if device == "auto":
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.adapter is None and device == "cpu":
            self.model, self.tokenizer = resources.causal_lm(self.model_ref, self.dtype, self.trust_remote_code)
        else:  # a LoRA changes the base model in place: never wrap the shared plain instance
            key = ("exit_classifier", self.model_ref, self.adapter, self.dtype, device)
            self.model, self.tokenizer = resources.shared(key, lambda: self._load(device))
        tok = self.tokenizer
        yes, no = (tok.encode(w, add_special_tokens=False) for w in ("Yes", "No"))
        if len(yes) != 1 or len(no) != 1:
            raise ValueError(f'EXIT needs "Yes" and "No" to be single tokens of {self.model_ref}; got {yes}, {no}')
        self.yes_id, self.no_id = yes[0], no[0]
        limits = [self.max_length, getattr(self.model.config, "max_position_embeddings", None)]
        self.limit = min(x for x in limits if isinstance(x, int) and x > 0)
        self.head_tail = self._template()

    def _load(self, device: str):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from harness.models import resolve

        path = resolve(self.model_ref).path
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=self.trust_remote_code)
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        model = AutoModelForCausalLM.from_pretrained(
            path,
            dtype=getattr(torch, self.dtype),
            device_map=device,
            trust_remote_code=self.trust_remote_code,
        )
        if self.adapter is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, resolve(self.adapter).path)
        return model.eval(), tok

    # ------------------------------------------------------------------ prompt encoding
    def _template(self) -> tuple[str, str, bool]:
        """(text before the context, text after it with ``{sentence}`` and ``{query}`` slots, add BOS?)."""
        user = build_user("{query}", _SLOT, "{sentence}")
        if self.prompt == "literal":
            text, special = f"<start_of_turn>user\n{user}<end_of_turn>\n<start_of_turn>model\n", True
        else:
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": user}], add_generation_prompt=True, tokenize=False
            )
            special = False
        head, tail = text.split(_SLOT)
        return head, tail, special

    def _encode(self, query: str, context: str, sentence: str) -> tuple[list[int], list[int]]:
        """Token ids of (query + passage + "Sentence:" marker, sentence + question + turn end): the shared
        head and the per-sentence tail. The passage keeps its head and tail tokens when it is too long."""
        tok = self.tokenizer
        head, tail, special = self.head_tail
        pre = tok.encode(head.replace("{query}", query), add_special_tokens=False)
        mark, rest = tail.split("{sentence}")
        mid = tok.encode(mark, add_special_tokens=False)
        post = tok.encode(sentence + rest, add_special_tokens=False)
        ctx = tok.encode(context, add_special_tokens=False)
        probe = tok.encode("Yes", add_special_tokens=True) if special else [self.yes_id]  # BOS/EOS it adds
        at = probe.index(self.yes_id)
        extra = len(probe) - 1
        budget = self.limit - extra - len(pre) - len(mid) - len(post)
        if budget < 0:
            raise ValueError(f"EXIT prompt without its context exceeds max_length={self.limit}")
        if len(ctx) > budget:
            h = (budget + 1) // 2
            ctx = ctx[:h] + (ctx[len(ctx) - (budget - h) :] if budget - h else [])
        return probe[:at] + pre + ctx + mid, post + probe[at + 1 :]

    # ------------------------------------------------------------------ scoring
    def _p_yes(self, logits) -> list[float]:
        import torch

        pair = torch.stack([logits[:, self.yes_id], logits[:, self.no_id]], dim=1).float()
        return torch.softmax(pair, dim=1)[:, 0].tolist()

    def _score_full(self, prompts: list[list[int]]) -> list[float]:
        """P(Yes) of full prompts, left-padded batches of ``batch_size`` (EXIT's scheme)."""
        import torch

        device = next(self.model.parameters()).device
        pad = self.tokenizer.pad_token_id
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        out = [0.0] * len(prompts)
        for s in range(0, len(order), self.batch_size):
            idx = order[s : s + self.batch_size]
            width = max(len(prompts[i]) for i in idx)
            ids = torch.full((len(idx), width), pad, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for r, i in enumerate(idx):
                ids[r, width - len(prompts[i]) :] = torch.tensor(prompts[i])
                mask[r, width - len(prompts[i]) :] = 1
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            with torch.inference_mode():
                logits = self.model(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    position_ids=pos.to(device),
                    logits_to_keep=1,
                ).logits[:, -1]
            for i, p in zip(idx, self._p_yes(logits), strict=True):
                out[i] = p
        return out

    def _score_shared(self, head: list[int], tails: list[list[int]]) -> list[float]:
        """P(Yes) of ``head + tail`` for each tail: the head's KV cache is computed once and reused."""
        import torch

        device = next(self.model.parameters()).device
        with torch.inference_mode():
            cache = self.model(input_ids=torch.tensor([head], device=device), use_cache=True).past_key_values
            out: list[float] = []
            pad = self.tokenizer.pad_token_id
            for s in range(0, len(tails), self.batch_size):
                chunk = tails[s : s + self.batch_size]
                width = max(len(t) for t in chunk)
                ids = torch.full((len(chunk), width), pad, dtype=torch.long)
                mask = torch.zeros((len(chunk), len(head) + width), dtype=torch.long)
                mask[:, : len(head)] = 1
                for r, t in enumerate(chunk):
                    ids[r, : len(t)] = torch.tensor(t)
                    mask[r, len(head) : len(head) + len(t)] = 1
                kv = copy.deepcopy(cache)
                kv.batch_repeat_interleave(len(chunk))
                logits = self.model(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    past_key_values=kv,
                    use_cache=True,
                ).logits
                last = torch.tensor([len(t) - 1 for t in chunk], device=logits.device)
                out.extend(self._p_yes(logits[torch.arange(len(chunk), device=logits.device), last]))
        return out

    def score(self, question: str, context: str, sentences: Sequence[str]) -> list[float]:
        """P(Yes) of each sentence of one passage (``context`` is the passage with its title)."""
        if self.model is None:
            raise RuntimeError("Exit was not bound to a run (call bind(MethodEnv(...)))")
        if not sentences:
            return []
        encoded = [self._encode(question, context, s) for s in sentences]
        if self.share_prefix and all(h == encoded[0][0] for h, _ in encoded):
            return self._score_shared(encoded[0][0], [t for _, t in encoded])
        return self._score_full([h + t for h, t in encoded])

    # ------------------------------------------------------------------ compression
    def compress_batch(self, examples: Sequence[Example]) -> list[Compressed]:
        jobs: list[tuple[str, str, list[_Candidate]]] = []  # one per passage, candidates in original order
        for ei, ex in enumerate(examples):
            for pi, p in enumerate(ex.passages):
                text = p.text.strip()
                sents = split_sentences(text)
                if not sents:
                    continue
                group = [_Candidate(ei, pi, si, s) for si, s in enumerate(sents)]
                context = f"{p.title.strip()}\n{text}" if p.title.strip() else text
                jobs.append((ex.question, context, group))
        cands = [c for _, _, group in jobs for c in group]
        if self.share_prefix:
            scores = [x for q, ctx, group in jobs for x in self.score(q, ctx, [c.text for c in group])]
        else:  # one left-padded stream over every sentence of the batch
            prompts = [h + t for q, ctx, group in jobs for h, t in (self._encode(q, ctx, c.text) for c in group)]
            scores = self._score_full(prompts) if prompts else []
        scored = list(zip(cands, scores, strict=True))
        return [self._assemble([(c, x) for c, x in scored if c.example == ei]) for ei in range(len(examples))]

    def compress(self, example: Example) -> Compressed:
        return self.compress_batch([example])[0]

    def _assemble(self, scored: list[tuple[_Candidate, float]]) -> Compressed:
        kept = [c for c, x in scored if x >= self.threshold]
        by_passage: dict[int, list[str]] = {}
        for c in kept:
            by_passage.setdefault(c.passage, []).append(c.text)
        return Compressed(
            documents=[" ".join(by_passage[p]) for p in sorted(by_passage)],
            units=[Unit(c.passage, c.sentence) for c in kept],
            meta={"requested": {"threshold": self.threshold}, "scores": [round(x, 5) for _, x in scored]},
        )

    def describe(self) -> dict[str, Any]:
        from harness.models import resolve

        adapter = resolve(self.adapter).describe() if self.adapter else None
        return {
            "name": self.name,
            "model": resolve(self.model_ref).describe(),
            "adapter": adapter,
            "threshold": self.threshold,
            "prompt": self.prompt,
            "dtype": self.dtype,
        }
