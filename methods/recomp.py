"""RECOMP (Xu, Shi and Choi, ICLR 2024, arXiv 2310.04408; code carriex/recomp): compress the retrieved
documents before prepending them.

**Extractive** (``conf/method/recomp_extr.yaml``, no class of its own): ``methods.rerank.RerankSelect`` over
sentences with ``methods.scorers.BiEncoderScorer(pooling="mean", similarity="dot")``, RECOMP's scorer
(``run_extractive_compressor.py``: mean-pooled last hidden states, question-sentence dot product). Paper
profile: the per-dataset dual encoders ``fangyuan/{nq,tqa,hotpotqa}_extractive_compressor`` (Contriever
initialised). Defaults: the top 2 sentences (EXIT's RECOMP-extr baseline keeps ``n_sentences=2``; on our NQ
top-5, 2 of about 22 sentences give about 12x, CompSelect's Table 2 CR 11.97x). Departure: the kept sentences
are shown in their original order, grouped by passage (the harness's selection protocol), not in score order.
Embedded: all-minilm-l6-v2 as the dual encoder, through the same mean-pooling and dot-product code.

**Abstractive** (``RecompAbstractive``): a T5 summariser fed RECOMP's input format
``"Question: {q}\\n Document: {passages}\\n Summary: "`` (``train_hf_summarization_model.py``), passages' text
joined by newlines without titles (as FlashRAG's ``AbstractiveRecompRefiner``), the input truncated at 1024
tokens (``max_source_length``), greedy decoding up to 512 new tokens (the README's ``max_target_length``).
Paper profile: ``fangyuan/{nq,tqa}_abstractive_compressor`` and ``fangyuan/hotpotqa_abstractive``. An empty
summary is RECOMP's selective augmentation and gives an empty context (closed-book generation).
Embedded: no seq2seq model ships offline, so ``kind: causal-lm`` prompts the embedded instruct model (shared
with the generator) with the same input after a one-line instruction of ours (``INSTRUCTION``; RECOMP's T5 was
distilled from GPT-3.5 summaries and needs none); records name it ``prompted-causal-lm``. The 135M stand-in
seldom ends its summary by itself (it repeats until the cap), so the embedded profile caps it at 64 new
tokens, about the paper's summary length (Table 2: CR 11.12x on NQ, ~65 tokens of our ~730-token contexts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.lm.fit import truncated_meta
from harness.protocols import Compressor, MethodEnv
from harness.types import Compressed, Example

TEMPLATE = "Question: {question}\n Document: {document}\n Summary: "
INSTRUCTION = (
    "Summarize the document in a few sentences, keeping only the information that helps answer the question. "
    "If nothing in the document is relevant to the question, output nothing."
)
KINDS = ("seq2seq", "causal-lm")


@dataclass(frozen=True)
class Summary:
    """One abstractive summary, its token count, and the cut of its input (``harness.lm.fit``'s keys), if any."""

    text: str
    tokens: int
    cut: dict[str, int] = field(default_factory=dict)


def recomp_input(example: Example) -> str:
    """RECOMP's abstractive-compressor input for one example."""
    return TEMPLATE.format(question=example.question, document="\n".join(p.text for p in example.passages))


class RecompAbstractive(Compressor):
    """Query-focused summary of the passages: a RECOMP T5 checkpoint, or a prompted causal LM stand-in."""

    name = "recomp_abs"

    def __init__(
        self,
        model: str,
        kind: str = "seq2seq",
        max_input_tokens: int = 1024,
        max_new_tokens: int = 512,
        batch_size: int = 8,
        dtype: str = "float32",
        instruction: str = INSTRUCTION,
        engine: str = "vllm",
    ) -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r}; valid: {', '.join(KINDS)}")
        self.model, self.kind, self.dtype = model, kind, dtype
        self.max_input_tokens, self.max_new_tokens = max_input_tokens, max_new_tokens
        self.batch_size = batch_size
        self.instruction, self.engine = instruction, engine
        self._lm: Any = None

    def bind(self, env: MethodEnv) -> None:
        super().bind(env)
        if self.kind == "causal-lm":
            from harness.lm import get_lm

            self._lm = get_lm(self.model, engine=self.engine, dtype=self.dtype, batch_size=self.batch_size)
        else:
            from harness.lm.encoders import seq2seq_lm

            self._lm = seq2seq_lm(self.model, self.dtype)

    def _summaries_seq2seq(self, inputs: list[str]) -> list[Summary]:
        """T5 summaries; the tokenizer cuts each input to the compressor's window (its design: nothing recorded)."""
        import torch

        model, tok = self._lm
        out: list[Summary] = []
        for i in range(0, len(inputs), self.batch_size):
            enc = tok(
                inputs[i : i + self.batch_size],
                padding=True,
                truncation=True,
                max_length=self.max_input_tokens,
                return_tensors="pt",
            ).to(model.device)
            with torch.inference_mode():
                gen = model.generate(
                    input_ids=enc["input_ids"],
                    attention_mask=enc["attention_mask"],
                    max_new_tokens=self.max_new_tokens,
                    do_sample=False,
                    num_beams=1,
                )
            gc = model.generation_config
            eos = gc.eos_token_id if isinstance(gc.eos_token_id, list) else [gc.eos_token_id]
            drop = {gc.pad_token_id, gc.decoder_start_token_id, tok.pad_token_id, *eos}
            for row in gen.tolist():
                ids = [t for t in row if t not in drop]
                out.append(Summary(tok.decode(ids, skip_special_tokens=True).strip(), len(ids)))
        return out

    def _summaries_causal(self, inputs: list[str]) -> list[Summary]:
        """Summaries of RECOMP inputs, each cut to its first ``max_input_tokens`` (the T5 compressor's input
        window): the question comes first, so this cuts the documents from their end, and the question only when
        it alone overflows (the model layer's rule, ``harness.lm.fit``); a summary's ``cut`` records a cut of the
        question (and so of every document). The prompt then fits the LM (``fit_ids`` as a last resort)."""
        lm = self._lm
        prompts, cuts = [], []
        for text in inputs:
            ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
            cut: dict[str, int] = {}
            if len(ids) > self.max_input_tokens:
                head = lm.count(text.split("\n Document: ")[0])  # "Question: ..." (approximately)
                question = max(head - self.max_input_tokens, 0)
                if question:  # the documents cut alone are the method's design (its input window): not recorded
                    cut = {"documents": len(ids) - head, "question": question}
                text = lm.tokenizer.decode(ids[: self.max_input_tokens])
            cuts.append(cut)
            msgs = [{"role": "system", "content": self.instruction}, {"role": "user", "content": text}]
            prompts.append(lm.encode_chat(msgs))
        outs = lm.generate(prompts, self.max_new_tokens)
        return [Summary(o.text, len(o.token_ids), cut) for o, cut in zip(outs, cuts, strict=True)]

    def compress_batch(self, examples: Sequence[Example]) -> list[Compressed]:
        todo = [i for i, e in enumerate(examples) if e.passages]
        inputs = [recomp_input(examples[i]) for i in todo]
        run = self._summaries_causal if self.kind == "causal-lm" else self._summaries_seq2seq
        summaries = dict(zip(todo, run(inputs) if inputs else [], strict=True))
        out = []
        for i in range(len(examples)):
            s = summaries.get(i, Summary("", 0))
            requested = {"max_new_tokens": self.max_new_tokens, "max_input_tokens": self.max_input_tokens}
            meta = {"requested": requested, "summary_tokens": s.tokens, "empty": not s.text}
            if s.cut:
                meta["truncated"] = truncated_meta("recomp", s.cut)
            out.append(Compressed(documents=[s.text] if s.text else [], units=None, meta=meta))
        return out

    def compress(self, example: Example) -> Compressed:
        return self.compress_batch([example])[0]

    def describe(self) -> dict[str, Any]:
        from harness.lm.models import resolve

        compressor = "t5-seq2seq" if self.kind == "seq2seq" else "prompted-causal-lm"
        return {
            "name": self.name,
            "compressor": compressor,
            "model": resolve(self.model).describe(),
            "input_format": TEMPLATE,
            "instruction": self.instruction if self.kind == "causal-lm" else None,
            "max_input_tokens": self.max_input_tokens,
            "max_new_tokens": self.max_new_tokens,
            "decoding": "greedy",
            "batch_size": self.batch_size,
            "lm": self._lm.describe() if self.kind == "causal-lm" and self._lm else None,
        }
