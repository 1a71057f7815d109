"""Selective-Context (Li et al., EMNLP 2023, arXiv 2310.06201), reimplemented (not the PyPI package).

Each sentence is scored on its own by a causal LM after a start token (``start_marker``: GPT-2's
``<|endoftext|>``, as in the original): the self-information of a token is
``-log p(token | start, preceding tokens of its sentence)``.
Token scores are merged into lexical units (``unit``): ``token`` (the LM's tokens), ``phrase`` (the original's
default) or ``sentence``; a unit scores the mean over its tokens (a token spanning several units is split
evenly between them, as in the original). Over all units of an example's passages together, the units below
the ``reduce_ratio`` percentile are dropped (``numpy.nanpercentile``, as in the original): ``reduce_ratio`` is
a fraction of units, not of tokens. Kept text stays in original order.

Defaults: ``reduce_ratio`` 0.5 and ``unit: phrase``, FlashRAG's setting (CompSelect Table 2: CR 2.6x on NQ).
Paper profile: GPT-2 (``gpt2``, on the transformers engine); embedded: SmolLM2-135M-Instruct (vLLM). On the embedded
profile 0.5 gives CR 1.7x on NQ and 0.68 gives 2.6x (``conf/method/selective_context*.yaml``).

Departures, and why:
- Phrases: the original merges spaCy ``en_core_web_sm`` noun chunks; no spaCy model is available offline.
  ``phrase_spans`` is a rule-based substitute: a maximal run of content words (words outside a closed list of
  English function words), with the determiners just before it, is one phrase; every other word and every
  punctuation mark is a unit of its own, as spaCy's ``merge_noun_chunks`` leaves them. Runs of content words
  are coarser than noun chunks (a verb next to a noun joins it).
- Sentences come from the harness splitter (pysbd), not the original's regex, so that every method sees the
  same sentences. A passage's title is scored and pruned like a sentence (FlashRAG compresses
  ``Doc i(Title: ...) text``); kept text is shown per passage, a kept title on its own line; a passage with
  nothing kept is left out.
- Batched: all sentences of a batch of examples go through the model layer together (``harness.lm``: vLLM by
  default, or padded transformers batches); the original scores one sentence per call. A sentence longer than the
  model's context is scored in windows, each after its own start token (the original truncates at 1024).
- ``Compressed.units`` names the kept sentences at ``unit: sentence``; sub-sentence pruning sets ``None``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.protocols import Compressor, MethodEnv
from harness.text import split_sentences
from harness.types import Compressed, Example, Unit

UNITS = ("token", "phrase", "sentence")
_WORD = re.compile(r"\d+(?:[.,:]\d+)*|\w+(?:[-'’.]\w+)*|[^\w\s]")
_WS = re.compile(r"\s+")
_DETERMINERS = (
    "a an the this that these those my your his her its our their some any each every no all both "
    "either neither another such what which whose"
)
_FUNCTION_WORDS = (
    "i me you he him she it we us they them myself itself themselves himself herself who whom "
    "and or but nor so yet if then than because although though while whereas unless until since as "
    "of in on at by for with about against between into through during before after above below to "
    "from up down out off over under again further once upon within without along across behind "
    "beyond toward towards among around near via per onto "
    "is am are was were be been being have has had having do does did doing will would shall should "
    "can could may might must not also very too just only there here when where why how"
)
DETERMINERS = frozenset(_DETERMINERS.split())
FUNCTION_WORDS = DETERMINERS | frozenset(_FUNCTION_WORDS.split())


def phrase_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the phrase units of ``text`` (the spaCy noun-chunk substitute described above)."""
    words = [(m.start(), m.end(), m.group().lower()) for m in _WORD.finditer(text)]
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(words):
        j = i
        while j < len(words) and words[j][2] in DETERMINERS:
            j += 1
        k = j
        while k < len(words) and words[k][2][0].isalnum() and words[k][2] not in FUNCTION_WORDS:
            k += 1
        if k > j:
            spans.append((words[i][0], words[k - 1][1]))
            i = k
        else:
            spans.append((words[i][0], words[i][1]))
            i += 1
    return spans


def token_spans(text: str, offsets: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Character spans of the LM's tokens without surrounding whitespace; tokens sharing characters (a
    multi-byte character split across tokens) are merged; whitespace-only tokens are left out."""
    spans: list[tuple[int, int]] = []
    for s, e in offsets:
        seg = text[s:e]
        if not seg.strip():
            continue
        s, e = s + len(seg) - len(seg.lstrip()), e - (len(seg) - len(seg.rstrip()))
        if spans and s < spans[-1][1]:
            spans[-1] = (spans[-1][0], max(e, spans[-1][1]))
        else:
            spans.append((s, e))
    return spans


def unit_scores(
    units: Sequence[tuple[int, int]], offsets: Sequence[tuple[int, int]], infos: Sequence[float], text: str
) -> list[float]:
    """Mean self-information per unit; a token overlapping several units gives each an equal share."""
    assigned: list[list[float]] = [[] for _ in units]
    u = 0
    for (s, e), info in zip(offsets, infos, strict=True):
        seg = text[s:e]
        if not seg.strip():
            continue
        s = s + len(seg) - len(seg.lstrip())
        while u < len(units) and units[u][1] <= s:
            u += 1
        hit, v = [], u
        while v < len(units) and units[v][0] < e:
            if units[v][1] > s:
                hit.append(v)
            v += 1
        for v in hit:
            assigned[v].append(info / len(hit))
    return [float(np.mean(a)) if a else float("nan") for a in assigned]


def rebuild(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """Kept spans of ``text`` in order, joined by one space where the original had whitespace between them."""
    out: list[str] = []
    prev = 0
    for s, e in spans:
        if out and any(c.isspace() for c in text[prev:s]):
            out.append(" ")
        out.append(text[s:e])
        prev = e
    return "".join(out)


@dataclass
class _Segment:
    example: int
    passage: int
    sentence: int | None  # None: the passage title
    text: str


class SelectiveContext(Compressor):
    """Drop the least informative units (self-information under a causal LM); see the module docstring."""

    name = "selective_context"

    def __init__(
        self,
        model: str,
        reduce_ratio: float = 0.5,
        unit: str = "phrase",
        start_marker: str | None = "<|endoftext|>",
        max_length: int | None = None,
        dtype: str = "auto",
        device: str = "auto",
        engine: str = "vllm",
    ) -> None:
        super().__init__()
        if unit not in UNITS:
            raise ValueError(f"unit={unit!r}; valid: {', '.join(UNITS)}")
        if not 0 <= reduce_ratio <= 1:
            raise ValueError(f"reduce_ratio must be in [0, 1], got {reduce_ratio}")
        self.model_ref, self.reduce_ratio, self.unit, self.start_marker = (
            model,
            reduce_ratio,
            unit,
            start_marker,
        )
        self.max_length, self.dtype, self.device = max_length, dtype, device
        self.engine = engine
        self.lm: Any = None
        self.tokenizer: Any = None

    def bind(self, env: MethodEnv) -> None:
        super().bind(env)
        from harness.lm import get_lm
        from harness.lm.loading import model_config

        self.lm = get_lm(self.model_ref, engine=self.engine, dtype=self.dtype, device=self.device, speculative=None)
        tok = self.tokenizer = self.lm.tokenizer
        if self.start_marker is not None:
            ids = tok.convert_tokens_to_ids(self.start_marker)
            if ids is None or tok.convert_ids_to_tokens(ids) != self.start_marker:
                raise ValueError(f"start_marker {self.start_marker!r} is not a single token of {self.model_ref}")
            self.start_id = int(ids)
        else:
            self.start_id = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        cfg = model_config(self.model_ref)
        limit = getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", None) or 1024
        self.window = min(limit, self.max_length or limit) - 1

    def self_information(self, texts: Sequence[str]) -> list[tuple[list[tuple[int, int]], list[float]]]:
        """(token character offsets, self-information in nats) of every text, batched by the model layer."""
        if self.lm is None:
            raise RuntimeError("SelectiveContext was not bound to a run (call bind(MethodEnv(...)))")
        enc = [self.tokenizer(t, add_special_tokens=False, return_offsets_mapping=True) for t in texts]
        rows = [
            (i, s, [self.start_id, *e["input_ids"][s : s + self.window]])
            for i, e in enumerate(enc)
            for s in range(0, len(e["input_ids"]), self.window)
        ]
        infos: list[list[float]] = [[0.0] * len(e["input_ids"]) for e in enc]
        scored = self.lm.prompt_logprobs([r[2] for r in rows]) if rows else []
        for (i, s, row), lp in zip(rows, scored, strict=True):
            infos[i][s : s + len(row) - 1] = [-x for x in lp.value]
        return [([tuple(o) for o in e["offset_mapping"]], inf) for e, inf in zip(enc, infos, strict=True)]

    def _units(self, text: str, offsets: list[tuple[int, int]]) -> list[tuple[int, int]]:
        if self.unit == "phrase":
            return phrase_spans(text)
        if self.unit == "token":
            return token_spans(text, offsets)
        stripped = text.strip()
        return [(text.index(stripped), text.index(stripped) + len(stripped))] if stripped else []

    def compress_batch(self, examples: Sequence[Example]) -> list[Compressed]:
        segments: list[_Segment] = []
        for ei, ex in enumerate(examples):
            for pi, p in enumerate(ex.passages):
                title = _WS.sub(" ", p.title).strip()
                if title:
                    segments.append(_Segment(ei, pi, None, title))
                segments.extend(_Segment(ei, pi, si, s) for si, s in enumerate(split_sentences(p.text)))
        scored = self.self_information([s.text for s in segments]) if segments else []
        per_example: list[list[tuple[_Segment, list[tuple[int, int]], list[float]]]] = [[] for _ in examples]
        for seg, (offsets, infos) in zip(segments, scored, strict=True):
            spans = self._units(seg.text, offsets)
            per_example[seg.example].append((seg, spans, unit_scores(spans, offsets, infos, seg.text)))
        return [self._select(ex, items) for ex, items in zip(examples, per_example, strict=True)]

    def compress(self, example: Example) -> Compressed:
        return self.compress_batch([example])[0]

    def _select(self, example: Example, items: list) -> Compressed:
        meta: dict[str, Any] = {"requested": {"reduce_ratio": self.reduce_ratio, "unit": self.unit}}
        all_scores = [x for _, _, scores in items for x in scores]
        if not all_scores or all(np.isnan(all_scores)):
            return Compressed(
                documents=[],
                units=[] if self.unit == "sentence" else None,
                meta={**meta, "units_total": 0, "units_dropped": 0},
            )
        threshold = float(np.nanpercentile(all_scores, self.reduce_ratio * 100))
        titles: dict[int, str] = {}
        bodies: dict[int, list[str]] = {}
        kept_units: list[Unit] = []
        dropped = 0
        for seg, spans, scores in items:
            keep = [sp for sp, x in zip(spans, scores, strict=True) if not x < threshold]
            dropped += len(spans) - len(keep)
            text = rebuild(seg.text, keep)
            if not text:
                continue
            if seg.sentence is None:
                titles[seg.passage] = text
            else:
                bodies.setdefault(seg.passage, []).append(text)
                if self.unit == "sentence":
                    kept_units.append(Unit(seg.passage, seg.sentence))
        documents = []
        for pi in range(len(example.passages)):
            parts = [titles.get(pi, ""), " ".join(bodies.get(pi, []))]
            doc = "\n".join(x for x in parts if x)
            if doc:
                documents.append(doc)
        meta.update(threshold=round(threshold, 4), units_total=len(all_scores), units_dropped=dropped)
        return Compressed(documents=documents, units=kept_units if self.unit == "sentence" else None, meta=meta)

    def describe(self) -> dict[str, Any]:
        from harness.lm.models import resolve

        return {
            "name": self.name,
            "model": resolve(self.model_ref).describe(),
            "reduce_ratio": self.reduce_ratio,
            "unit": self.unit,
            "start_marker": self.start_marker,
            "lm": self.lm.describe() if self.lm else None,
        }
