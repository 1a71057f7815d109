"""Refiner (Li et al., Findings of EMNLP 2024, arXiv 2406.11357; code allen-li1231/refiner-rag): an LLM
extracts query-relevant passages verbatim and sections them by document title, numbering sections so that
consistent facts share a main section; its output replaces the retrieved documents.

Input (``utils.process_retriever_passage``): each document as ``## {title}\\n{text}``, documents joined
by ``\\n---\\n``; passages sharing a title are merged into one document (at most ``n_contexts=2`` per title,
joined by ``...``) at the position of the title's first passage; duplicate passages, passages shorter than 5
characters or containing `` ; `` and ``Category:`` titles are dropped, as there.
Prompts (``prompt``):

- ``monitor`` (paper profile): the fine-tuned ``al1231/Refiner-7B`` LoRA on ``meta-llama/Llama-2-7b-chat-hf``
  with its raw template ``[INST]<<SYS>>[MONITOR]{context}<</SYS>>{question}[/INST] ``
  (``prompt_refiner_lora``), no chat template; greedy, up to 2048 new tokens (``evaluation_accelerate.py``);
  the raw output is the context.
- ``teacher`` (embedded default): the extract-and-section instruction that Refiner's teacher models were
  prompted with to build its training data (``get_refiner_teacher_data.py``: ``SYSTEM_PROMPT_RELAX`` as the
  system message, ``Question: {question}\\nDocument (multiple documents are separated by "---"):\\n{context}``
  as the user message), through the model's chat template. An untuned model does not know the ``[MONITOR]``
  task, so the zero-shot stand-in gets the instruction the task was defined by.

Departures: the embedded stand-in is SmolLM2-135M-Instruct (shared with the generator), zero-shot; it does not
follow the section format and repeats itself until the cap, so the embedded profile caps it at 64 new tokens,
about Refiner's output length in CompSelect's Table 2 (CR 10.97x on NQ); a capped output is flagged
``hit_limit`` in the record. The paper profile loads the base model in bfloat16 (the authors' script
uses float32). The teachers' post-processing (``postprocess_summarization``, a training-data cleaner) is not
applied. An empty output gives an empty context.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.lm.fit import Fit, truncated_meta
from harness.protocols import Compressor, MethodEnv
from harness.types import Compressed, Example, Passage

MONITOR_TEMPLATE = "[INST]<<SYS>>[MONITOR]{context}<</SYS>>{question}[/INST] "
TEACHER_SYSTEM = """You are an expert research assistant. Your job is to find the quotes from the markdown documents that are relevant to a question.
Please mark quotes with sections and titles of documents to group quotes by different information only from relevant documents.
Rule of labelling sections: if the fact of the first dummy quote "aaa" from a document with title "## AAA" is consistent with that of the second dummy quote "bbb" from a document with title "## BBB", and they contradict to that of the third dummy quote "ccc" from a document with title "## CCC", then label them as:
```
1.1. ## AAA
aaa

1.2. ## BBB
bbb

2.1. ## CCC
ccc

```
Quotes should be verbatim and context completed.
Please respond without any explanation."""  # noqa: E501
TEACHER_USER = 'Question: {question}\nDocument (multiple documents are separated by "---"):\n{context}'
PROMPTS = ("monitor", "teacher")


def refiner_context(passages: Sequence[Passage], n_contexts: int = 2) -> str:
    """Refiner's markdown context: one ``## title`` document per title, in retrieval order."""
    groups: dict[str, list[str]] = {}
    seen: set[str] = set()
    for p in passages:
        text = p.text.strip()
        if len(text) < 5 or p.title.startswith("Category:") or text.find(" ; ") > 0 or text in seen:
            continue
        seen.add(text)
        group = groups.setdefault(p.title, [])
        if len(group) < n_contexts:
            group.append(text)
    return "\n---\n".join(f"## {title}\n{'...'.join(texts)}" for title, texts in groups.items())


class Refiner(Compressor):
    """Extract-and-section the retrieved documents with a (LoRA-tuned or prompted) causal LM."""

    name = "refiner"

    def __init__(
        self,
        model: str,
        adapter: str | None = None,
        prompt: str = "monitor",
        max_new_tokens: int = 2048,
        batch_size: int = 8,
        dtype: str = "auto",
        n_contexts: int = 2,
        engine: str = "vllm",
    ) -> None:
        super().__init__()
        if prompt not in PROMPTS:
            raise ValueError(f"prompt={prompt!r}; valid: {', '.join(PROMPTS)}")
        self.model, self.adapter, self.prompt, self.dtype = model, adapter, prompt, dtype
        self.max_new_tokens, self.batch_size, self.n_contexts = max_new_tokens, batch_size, n_contexts
        self.engine = engine
        self._lm: Any = None

    def bind(self, env: MethodEnv) -> None:
        super().bind(env)
        from harness.lm import get_lm

        self._lm = get_lm(
            self.model, engine=self.engine, dtype=self.dtype, adapter=self.adapter, batch_size=self.batch_size
        )

    def render(self, documents: str, question: str) -> Any:
        """The prompt (text for ``monitor``, chat messages for ``teacher``) over a context and a question."""
        if self.prompt == "monitor":
            return MONITOR_TEMPLATE.format(context=documents, question=question)
        return [
            {"role": "system", "content": TEACHER_SYSTEM},
            {"role": "user", "content": TEACHER_USER.format(question=question, context=documents)},
        ]

    def fit(self, example: Example) -> Fit:
        """The prompt for one example fitted to the LM (``harness.lm.fit``: the context cut from its end first)."""
        from harness.lm.fit import fit_prompt

        parts = {"documents": refiner_context(example.passages, self.n_contexts), "question": example.question}
        return fit_prompt(self._lm, self.render, parts, self.max_new_tokens)

    def encode(self, example: Example) -> list[int]:
        """The prompt token ids for one example."""
        return self.fit(example).ids

    def compress_batch(self, examples: Sequence[Example]) -> list[Compressed]:
        todo = [i for i, e in enumerate(examples) if e.passages]
        fits = {i: self.fit(examples[i]) for i in todo}
        prompts = [fits[i].ids for i in todo]
        outs = self._lm.generate(prompts, self.max_new_tokens) if prompts else []
        by_index = dict(zip(todo, outs, strict=True))
        result = []
        for i in range(len(examples)):
            o = by_index.get(i)
            text = o.text if o else ""
            result.append(
                Compressed(
                    documents=[text] if text else [],
                    units=None,
                    meta={
                        "requested": {"max_new_tokens": self.max_new_tokens, "prompt": self.prompt},
                        "output_tokens": len(o.token_ids) if o else 0,
                        "hit_limit": bool(o and o.hit_limit),
                        **({"truncated": truncated_meta("refiner", fits[i].cut)} if i in fits and fits[i].cut else {}),
                    },
                )
            )
        return result

    def compress(self, example: Example) -> Compressed:
        return self.compress_batch([example])[0]

    def describe(self) -> dict[str, Any]:
        from harness.lm.models import resolve

        return {
            "name": self.name,
            "model": resolve(self.model).describe(),
            "adapter": resolve(self.adapter).describe() if self.adapter else None,
            "prompt": self.prompt,
            "template": MONITOR_TEMPLATE if self.prompt == "monitor" else TEACHER_USER,
            "max_new_tokens": self.max_new_tokens,
            "decoding": "greedy",
            "batch_size": self.batch_size,
            "n_contexts": self.n_contexts,
            "lm": self._lm.describe() if self._lm else None,
        }
