"""The transformers engine: padded batches over a Hugging Face causal LM (CPU or GPU).

The selectable alternative to vLLM (``engine: transformers``) and the fallback where vLLM cannot serve a call
(a model architecture vLLM lacks, a PEFT adapter left unmerged for training). Every operation takes token ids,
sorts prompts by length and returns results in input order. ``prompt_logprobs`` over prompts that mostly share
prefixes (leave-one-out contexts, several answers after one prompt) runs them one at a time instead, each
continuing the key/value cache of the earlier prompt it shares most with, and computes the vocabulary
projection only where a scored token is predicted (``_shared_prefix_logprobs``; same values to ~1e-5, about
half the work on CI-value labelling).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def without_cudnn_attention() -> None:
    """Turn PyTorch's cuDNN attention off (the flash, memory-efficient and math kernels stay). Measured on two H200
    machines (torch 2.11, transformers 5.17, an 8B shape, research/gpu_harness): with it on, a ``generate`` took
    2.2-4.1 s the first time at a prompt length and 0.65-1.1 s after; with it off, the first run took what later
    runs did, and later runs were no slower. Every question's prompt has a length of its own, so a batch-1 latency
    pass paid that first-run cost on most questions."""
    import torch

    torch.backends.cuda.enable_cudnn_sdp(False)


class TransformersEngine:
    """Greedy generation, next-token and prompt log-probabilities with ``model.generate`` and forward passes."""

    name = "transformers"

    def __init__(
        self, model: Any, tokenizer: Any, batch_size: int = 8, batch_tokens: int = 16384, speculation: Any = None
    ) -> None:
        self.model, self.tokenizer, self.speculation = model, tokenizer, speculation
        self.batch_size, self.batch_tokens = batch_size, batch_tokens
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if self.device.type == "cuda":
            without_cudnn_attention()

    def close(self) -> None:
        """Nothing to stop: the torch model is freed with its last reference."""

    def reset_prefix_cache(self) -> None:
        """Nothing kept between calls."""

    @property
    def device(self):
        return next(self.model.parameters()).device

    def _batches(self, lengths: Sequence[int]):
        """Index lists, shortest prompts first, at most ``batch_size`` rows and about ``batch_tokens`` tokens."""
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        start = 0
        while start < len(order):
            end = start + 1
            while (
                end < len(order)
                and end - start < self.batch_size
                and (end + 1 - start) * lengths[order[end]] <= self.batch_tokens
            ):
                end += 1
            yield order[start:end]
            start = end

    def _left_padded(self, seqs: list[list[int]]):
        import torch

        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad, dtype=torch.long)
        att = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, s in enumerate(seqs):
            ids[row, width - len(s) :] = torch.tensor(s, dtype=torch.long)
            att[row, width - len(s) :] = 1
        return ids.to(self.device), att.to(self.device), width

    def generate(self, prompts: Sequence[list[int]], max_new_tokens: int, stop_ids: Sequence[int]) -> list[tuple]:
        """(new token ids without the stop token, hit the token limit?) per prompt. With ``speculation`` and a call
        of at most its ``max_batch`` prompts: prompt-lookup decoding, one prompt at a time
        (``harness.lm.speculative``)."""
        import torch

        out: list[tuple | None] = [None] * len(prompts)
        spec = self.speculation if self.speculation and len(prompts) <= self.speculation.max_batch else None
        lookup = (
            {}
            if spec is None
            else {"prompt_lookup_num_tokens": spec.num_tokens, "max_matching_ngram_size": spec.lookup_max}
        )
        batches = [[i] for i in range(len(prompts))] if spec else self._batches([len(p) for p in prompts])
        for idx in batches:
            ids, att, width = self._left_padded([list(prompts[i]) for i in idx])
            with torch.inference_mode():
                gen = self.model.generate(
                    input_ids=ids,
                    attention_mask=att,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    num_beams=1,
                    pad_token_id=self.pad,
                    eos_token_id=list(stop_ids),
                    **lookup,
                )
            for row, i in enumerate(idx):
                new = gen[row, width:].tolist()
                cut = next((j for j, t in enumerate(new) if t in stop_ids), None)
                out[i] = (new[:cut], False) if cut is not None else (new, len(new) >= max_new_tokens)
        return out  # type: ignore[return-value]

    def _logits_rows(self, seqs: list[list[int]]):
        import torch

        ids, att, width = self._left_padded(seqs)
        pos = (att.cumsum(-1) - 1).clamp(min=0)  # a left-padded row sees the positions it would see alone
        with torch.inference_mode():
            logits = self.model(input_ids=ids, attention_mask=att, position_ids=pos).logits
        return logits.float(), ids, width

    def token_logprobs(self, prompts: Sequence[list[int]], token_ids: Sequence[int]) -> list[list[float]]:
        """Log-probabilities of ``token_ids`` as the next token after each prompt (full-vocabulary softmax)."""
        out: list[list[float]] = [[] for _ in prompts]
        for idx in self._batches([len(p) for p in prompts]):
            logits, _, _ = self._logits_rows([list(prompts[i]) for i in idx])
            lp = logits[:, -1].log_softmax(-1)[:, list(token_ids)]
            for row, i in enumerate(idx):
                out[i] = lp[row].tolist()
        return out

    def prompt_logprobs(self, prompts: Sequence[list[int]], start: Sequence[int]) -> list[list[float]]:
        """log p(token j | tokens < j) for j = start[i] + 1 .. len - 1 of each prompt."""
        import torch

        from harness.lm.prefixes import mostly_shared

        if mostly_shared(prompts) and hasattr(self.model, "get_decoder"):
            return self._shared_prefix_logprobs(prompts, start)

        out: list[list[float]] = [[] for _ in prompts]
        for idx in self._batches([len(p) for p in prompts]):
            seqs = [list(prompts[i]) for i in idx]
            logits, ids, width = self._logits_rows(seqs)
            nll = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none").cpu()
            for row, i in enumerate(idx):
                n = len(seqs[row])
                first = width - n  # position of the prompt's first token in the padded row
                out[i] = (-nll[row, first + start[i] : width - 1]).tolist()
        return out

    def _shared_prefix_logprobs(self, prompts: Sequence[list[int]], start: Sequence[int]) -> list[list[float]]:
        """``prompt_logprobs`` one prompt at a time, reusing the key/value cache of the earlier prompt (one of the
        last ``prefixes.MAX_BASES`` mostly-new ones) with the longest common prefix, cropped to what is shared."""
        import copy

        import torch

        from harness.lm.prefixes import MAX_BASES, best_base

        body, head = self.model.get_decoder(), self.model.get_output_embeddings()
        bases: list[tuple[list[int], Any]] = []
        out: list[list[float]] = []
        with torch.inference_mode():
            for ids, s in zip(prompts, start, strict=True):
                ids, s = list(ids), int(s)
                if s + 1 >= len(ids):
                    out.append([])
                    continue
                at, shared = best_base(ids, [b for b, _ in bases])
                keep = min(shared, s)  # hidden states are needed from position s on
                cache = None
                if at >= 0 and keep > 0:
                    cache = copy.deepcopy(bases[at][1])
                    extra = cache.get_seq_length() - keep
                    if extra > 0:  # crop(-n) drops the last n tokens (crop(0) would drop them all)
                        cache.crop(-extra)
                else:
                    keep = 0
                o = body(
                    input_ids=torch.tensor([ids[keep:]], device=self.device), past_key_values=cache, use_cache=True
                )
                if shared < len(ids) // 2:  # mostly new text: a base for the prompts that follow
                    bases = [*bases[-(MAX_BASES - 1) :], (ids, o.past_key_values)]
                hidden = o.last_hidden_state[0, s - keep : len(ids) - 1 - keep]
                logits = head(hidden).float()
                target = torch.tensor(ids[s + 1 :], device=logits.device)
                out.append((-torch.nn.functional.cross_entropy(logits, target, reduction="none")).tolist())
        return out
