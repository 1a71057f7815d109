r"""EXIT: context-aware extractive compression (Hwang et al. 2024, arXiv 2412.12559; code ThisIsHwang/EXIT).

Every passage is split into sentences; each sentence is classified with its whole passage (title and text) as
context by a causal LM answering EXIT's prompt (paper Table 6; ``build_user`` and ``QUESTION``, verbatim)::

    Query:\n{query}\nFull context:\n{context}\nSentence:\n{sentence}\n
    Is this sentence useful in answering the query? Answer only "Yes" or "No".

The score is P(Yes) = the softmax of the next-token logits of "Yes" and "No" (each must be one token), and
the sentences with P(Yes) >= ``threshold`` (0.5, as in the paper) are kept in original order, grouped by
passage without titles (EXIT's reassembly). An example may keep nothing.

Profiles: paper: ``google/gemma-2b-it`` with the LoRA ``doubleyyh/exit-gemma-2b`` and ``prompt: literal``,
EXIT's Gemma turn markers verbatim (``<start_of_turn>user\n...<end_of_turn>\n`` ``<start_of_turn>model\n``
after the tokenizer's BOS; Gemma's own chat template renders the same text). ``prompt: chat`` puts the same user
turn through the model's chat template (SmolLM2's adds its default system turn; zero-shot SmolLM2 so scored near
chance, see README.md). The embedded ``exit`` classifier is ``kind: cross_encoder``, a MiniLM sentence-pair
classifier over the same query, sentence and passage (``classifier.py``), trained by our code (``train.py``). LMs
come from the model layer (``harness.lm``, vLLM by default); a LoRA is merged into derived weights there, so no
shared instance is ever wrapped.

Batching: every sentence of a batch of examples is one prompt and all go to the model layer at once; the
sentences of a passage share the prompt's head (query, passage, "Sentence:" marker), which vLLM's prefix cache
computes once. The token sequence is EXIT's up to the tokenisation boundary after "Sentence:\n" (EXIT also
encodes head, context and tail apart).

Departures, and why: sentences come from the harness splitter (pysbd; EXIT uses spaCy's rule-based
sentencizer) so that every method sees the same sentences; weights run in ``dtype`` (EXIT loads the base in
4-bit, which needs bitsandbytes and a GPU); a context longer than the LM's window loses its passage from the
end, then the query (``harness.lm.fit``, the harness's one rule; EXIT keeps the head and tail). The threshold is
not restricted to [0, 1] (above 1 keeps nothing, 0 keeps everything).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.lm.fit import truncated_meta
from harness.protocols import Compressor, MethodEnv
from harness.text import split_sentences
from harness.types import Compressed, Example, Unit

QUERY_RESERVE = 32  # cross-encoder tokens kept for the sentence and passage when a query is cut
QUESTION = 'Is this sentence useful in answering the query? Answer only "Yes" or "No".'
SENTENCE_MARK = "\nSentence:\n"
PROMPTS = ("literal", "chat")
KINDS = ("lm", "cross_encoder")
_SLOT = "\x00CONTEXT\x00"


def build_user(query: str, context: str, sentence: str) -> str:
    """The user turn of EXIT's classification prompt."""
    return f"Query:\n{query}\nFull context:\n{context}{SENTENCE_MARK}{sentence}\n{QUESTION}"


def head_words(text: str, n: int) -> str:
    """The first ``n`` space-separated pieces of ``text``: more than a ``n // 2``-token window of a WordPiece
    tokenizer (a word is at least one token) sees, so the window is the same and a passage of any length costs
    its first ``n`` words to tokenise, not all of it per sentence."""
    pieces = text.split(" ", n)
    return text if len(pieces) <= n else " ".join(pieces[:n])


def add_cut(total: dict[str, int], passage: dict[str, int]) -> None:
    """Add one passage's cut to its example's: passages' documents add up; the question is cut alike in each."""
    if passage.get("documents"):
        total["documents"] = total.get("documents", 0) + passage["documents"]
    if passage.get("question"):
        total["question"] = max(total.get("question", 0), passage["question"])


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
        batch_size: int = 16,
        max_length: int = 4096,
        dtype: str = "auto",
        device: str = "auto",
        trust_remote_code: bool = False,
        engine: str = "vllm",
        kind: str = "lm",
    ) -> None:
        super().__init__()
        if prompt not in PROMPTS:
            raise ValueError(f"prompt={prompt!r}; valid: {', '.join(PROMPTS)}")
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r}; valid: {', '.join(KINDS)}")
        self.kind = kind
        self.cross: Any = None
        self.model_ref, self.adapter, self.threshold, self.prompt = model, adapter, float(threshold), prompt
        self.batch_size, self.max_length, self.engine = batch_size, max_length, engine
        self.dtype, self.device, self.trust_remote_code = dtype, device, trust_remote_code
        self.lm: Any = None
        self.tokenizer: Any = None
        self._cut: dict[str, int] = {}  # what ``_encode`` cut from the passage being encoded

    # ------------------------------------------------------------------ loading
    def bind(self, env: MethodEnv) -> None:
        super().bind(env)
        if self.kind == "cross_encoder":
            from methods.exit.classifier import CrossEncoderClassifier

            self.cross = CrossEncoderClassifier(
                self.model_ref,
                self.adapter,
                self.max_length,
                self.batch_size,
                "cpu" if self.device == "auto" else self.device,
            )
            self.cross.load()
            return
        from harness.lm import get_lm

        if self.adapter and Path(self.adapter).exists():  # a local adapter (not a hub id): checked first
            from harness.artifacts import check_artifact
            from methods.exit.classifier import REMAKE

            check_artifact(self.adapter, REMAKE)
        self.lm = get_lm(
            self.model_ref,
            engine=self.engine,
            dtype=self.dtype,
            adapter=self.adapter,
            device=self.device,
            batch_size=self.batch_size,
            trust_remote_code=self.trust_remote_code,
            speculative=None,  # a classifier: it scores, never generates
        )
        self.use_tokenizer(self.lm.tokenizer)

    def use_tokenizer(self, tok: Any) -> None:
        """Prompt encoding with ``tok`` (``bind`` calls it; training builds its prompts with it, no engine)."""
        from harness.lm.loading import model_config

        self.tokenizer = tok
        yes, no = (tok.encode(w, add_special_tokens=False) for w in ("Yes", "No"))
        if len(yes) != 1 or len(no) != 1:
            raise ValueError(f'EXIT needs "Yes" and "No" to be single tokens of {self.model_ref}; got {yes}, {no}')
        self.yes_id, self.no_id = yes[0], no[0]
        cfg = model_config(self.model_ref, self.trust_remote_code)
        limits = [self.max_length, getattr(cfg, "max_position_embeddings", None)]
        self.limit = min(x for x in limits if isinstance(x, int) and x > 0)
        self.head_tail = self._template()

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
        head and the per-sentence tail, fitted to ``max_length`` by the model layer's rule (``harness.lm.fit``):
        the passage is cut from its end first (by whole sentences where possible), then the query and the
        sentence (the question part) when they alone overflow. What was cut is added to ``self._cut``."""
        from harness.lm.fit import TokenizerView, cut_text

        tok = self.tokenizer
        view = TokenizerView(tok)  # no LM needed: training encodes with the tokenizer alone (use_tokenizer)
        head, tail, special = self.head_tail
        mark, rest = tail.split("{sentence}")
        probe = tok.encode("Yes", add_special_tokens=True) if special else [self.yes_id]  # BOS/EOS it adds
        at = probe.index(self.yes_id)
        fixed = len(probe) - 1 + len(tok.encode(head.replace("{query}", "") + mark + rest, add_special_tokens=False))
        over = fixed + view.count(query) + view.count(sentence) - self.limit + 8  # a margin for the joins
        if over > 0:  # the question part alone overflows: cut the query, then the sentence
            for name, text in (("query", query), ("sentence", sentence)):
                kept, n = cut_text(view, text, min(over, view.count(text)))
                query, sentence = (kept, sentence) if name == "query" else (query, kept)
                self._note("question", n)
                over -= n
                if over <= 0:
                    break
        pre = tok.encode(head.replace("{query}", query), add_special_tokens=False)
        mid = tok.encode(mark, add_special_tokens=False)
        post = tok.encode(sentence + rest, add_special_tokens=False)
        ctx = tok.encode(context, add_special_tokens=False)
        budget = max(self.limit - (len(probe) - 1) - len(pre) - len(mid) - len(post), 0)
        if len(ctx) > budget:  # the passage from its end
            kept, n = cut_text(view, context, len(ctx) - budget)
            ctx = tok.encode(kept, add_special_tokens=False)[:budget]
            self._note("documents", n)
        return probe[:at] + pre + ctx + mid, post + probe[at + 1 :]

    def _note(self, part: str, tokens: int) -> None:
        """Note ``tokens`` cut from ``part`` of the passage being encoded (the most over its sentences' prompts)."""
        if tokens > 0:
            self._cut[part] = max(self._cut.get(part, 0), tokens)

    # ------------------------------------------------------------------ scoring
    def _score(self, prompts: list[list[int]]) -> list[float]:
        """P(Yes) of each prompt: the softmax over the next-token log-probabilities of "Yes" and "No"."""
        rows = self.lm.token_logprobs(prompts, [self.yes_id, self.no_id]) if prompts else []
        return [1.0 / (1.0 + math.exp(r.value[1] - r.value[0])) for r in rows]

    def classifier_prompt(self, question: str, context: str, sentence: str) -> list[int]:
        """The token ids whose next token is scored "Yes" or "No" (``context``: the passage with its title)."""
        head, tail = self._encode(question, context, sentence)
        return head + tail

    def score(self, question: str, context: str, sentences: Sequence[str]) -> list[float]:
        """P(Yes) of each sentence of one passage (``context`` is the passage with its title)."""
        if self.lm is None and self.cross is None:
            raise RuntimeError("Exit was not bound to a run (call bind(MethodEnv(...)))")
        if self.cross is not None:
            return self.cross.score([(question, s, context) for s in sentences])
        return self._score([self.classifier_prompt(question, context, s) for s in sentences])

    # ------------------------------------------------------------------ compression
    def _fit_query(self, question: str) -> tuple[str, dict[str, int]]:
        """The cross-encoder's query, cut (``harness.lm.fit``) only when it alone overflows ``max_length`` (with
        room for its special tokens and some of the sentence): the sentence and passage that follow it are cut
        from their end by the classifier's own ``only_second`` truncation, its designed input window."""
        from harness.lm.fit import TokenizerView, cut_text

        view = TokenizerView(self.cross.tok)
        room = self.max_length - 3 - QUERY_RESERVE
        n = view.count(question)
        if n <= room:
            return question, {}
        kept, cut = cut_text(view, question, n - room)
        return kept, {"question": cut}

    def compress_batch(self, examples: Sequence[Example]) -> list[Compressed]:
        if self.cross is not None:
            fitted = [self._fit_query(ex.question) for ex in examples]
            cuts = [c for _, c in fitted]
            return self._compress(examples, [q for q, _ in fitted], cuts)
        return self._compress(examples, [ex.question for ex in examples], [{} for _ in examples])

    def _compress(
        self, examples: Sequence[Example], questions: list[str], cuts: list[dict[str, int]]
    ) -> list[Compressed]:
        """Score every sentence of every passage against its question; ``cuts``: ``meta.truncated.exit`` per
        example (the LM's are filled as the prompts are encoded)."""
        jobs: list[tuple[int, str, str, list[_Candidate]]] = []  # one per passage, candidates in original order
        for ei, ex in enumerate(examples):
            for pi, p in enumerate(ex.passages):
                text = p.text.strip()
                sents = split_sentences(text)
                if not sents:
                    continue
                group = [_Candidate(ei, pi, si, s) for si, s in enumerate(sents)]
                context = f"{p.title.strip()}\n{text}" if p.title.strip() else text
                jobs.append((ei, questions[ei], context, group))
        cands = [c for _, _, _, group in jobs for c in group]
        if self.cross is not None:
            window = lambda ctx: head_words(ctx, 2 * self.max_length)  # noqa: E731
            scores = self.cross.score([(q, c.text, window(ctx)) for _, q, ctx, group in jobs for c in group])
        else:
            prompts = []
            for ei, q, ctx, group in jobs:
                self._cut = {}
                prompts += [h + t for h, t in (self._encode(q, ctx, c.text) for c in group)]
                add_cut(cuts[ei], self._cut)
            scores = self._score(prompts)
        scored = list(zip(cands, scores, strict=True))
        out = [self._assemble([(c, x) for c, x in scored if c.example == ei]) for ei in range(len(examples))]
        for comp, cut in zip(out, cuts, strict=True):
            if cut:
                comp.meta["truncated"] = truncated_meta("exit", cut)
        return out

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
        from harness.lm.models import resolve

        adapter = resolve(self.adapter).describe() if self.adapter else None
        if self.cross is not None:
            return {"name": self.name, "threshold": self.threshold, "classifier": self.cross.describe()}
        return {
            "name": self.name,
            "kind": self.kind,
            "model": resolve(self.model_ref).describe(),
            "adapter": adapter,
            "threshold": self.threshold,
            "prompt": self.prompt,
            "lm": self.lm.describe() if self.lm else None,
        }
