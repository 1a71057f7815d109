"""Every LM call fits its prompt to its engine: one rule, here, for the generator and every method's LM stages.

**The rule.** A prompt's tokens plus the call's ``max_new_tokens`` must fit the engine's context
(``LM.context_length``: the engine's ``max_model_len``, else the model config's ``max_position_embeddings``,
else the tokenizer's ``model_max_length``, else 2048).
A prompt is rendered from named parts (``fit_prompt``: the instruction stays in the render function; the parts
are, say, ``documents`` and ``question``). When it does not fit:

1. the ``documents`` (or passages) part is cut first, from its end: a list of documents loses its last ones
   whole, then the tail of the last one kept; a text is cut by whole sentences where the sentence boundary keeps
   at least half of what may stay, else at a word boundary;
2. the ``question`` is cut (the same way) only when the prompt still overflows with no documents at all, that
   is, when the question alone overflows;
3. the instruction is kept; a prompt that overflows even then (an instruction longer than the context) keeps
   its head and its last ``TAIL`` tokens (the assistant header) and counts the rest under ``prompt``.

What was cut is returned per part in tokens of this LM's tokenizer (``Fit.cut``); callers record it in the
example's ``meta.truncated`` under the stage's name (``truncated_meta``) and the run counts it in
``summary.json`` (``harness.records.summarize``). ``fit_ids`` applies step 3 to a prompt that is only token ids
(a caller with no parts to cut).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

TAIL = 32  # tokens kept at the end of a prompt cut as ids (the chat template's assistant header and cue)
SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s|\n")
Part = str | list[str]


@dataclass
class Fit:
    """A prompt that fits: the rendered prompt, its token ids, the kept parts and the tokens cut per part."""

    prompt: Any
    ids: list[int]
    parts: dict[str, Part]
    cut: dict[str, int] = field(default_factory=dict)


class FittedMessages(list):
    """Chat messages fitted to an LM (a plain ``Messages`` list to every reader) carrying their token ids, the
    tokenizer those ids are of (``tokenizer``: another LM re-encodes the messages) and what the fit cut
    (``truncated``: tokens per part, empty when nothing was cut)."""

    def __init__(self, messages: Any, ids: list[int], truncated: dict[str, int], tokenizer: Any = None) -> None:
        super().__init__(messages)
        self.ids, self.truncated, self.tokenizer = ids, truncated, tokenizer


def truncated_of(messages: Any) -> dict[str, int]:
    """What fitting cut from ``messages`` (tokens per part; empty for messages not fitted or not cut)."""
    return dict(getattr(messages, "truncated", {}))


def fit_messages(
    lm: Any,
    template: Any,
    question: str,
    documents: Sequence[str],
    max_new_tokens: int,
    limit: int | None = None,
    chat_kwargs: dict[str, Any] | None = None,
) -> FittedMessages:
    """A generator's chat prompt (``template.messages(question, documents)``) fitted to ``lm`` by the rule."""
    fit = fit_prompt(
        lm,
        lambda documents, question: template.messages(question, documents),
        {"documents": list(documents), "question": question},
        max_new_tokens,
        limit=limit,
        chat_kwargs=chat_kwargs,
    )
    return FittedMessages(fit.prompt, fit.ids, fit.cut, getattr(lm, "tokenizer", None))


class ByteEstimate:
    """A token counter for fitting where no tokenizer is at hand (a server's): one token per UTF-8 byte, an upper
    bound for byte-level BPE tokenizers (each byte is at most one token), plus ``PER_MESSAGE`` tokens of chat
    template per message. Conservative: it cuts earlier than the model would need."""

    PER_MESSAGE = 16

    def __init__(self, ref: str, context_length: int) -> None:
        self.ref, self.context_length = ref, int(context_length)

    def tokenizer(self, text: str, **_: Any) -> dict[str, list[Any]]:
        offsets = [(i, i + 1) for i, ch in enumerate(text) for _ in range(len(ch.encode("utf-8")))]
        return {"input_ids": [0] * len(offsets), "offset_mapping": offsets}

    def count(self, text: str) -> int:
        return len(text.encode("utf-8"))

    def encode(self, text: str, special: bool = True) -> list[int]:
        return [0] * self.count(text)

    def encode_chat(self, messages: Any, **_: Any) -> list[int]:
        return [0] * sum(self.count(m["content"]) + self.PER_MESSAGE for m in messages)


class TokenizerView:
    """A bare tokenizer as the ``lm`` of this module's functions, for a model the model layer loads as an encoder
    (EXIT's cross-encoder) or a scorer run by a package (LongLLMLingua's); text prompts only."""

    def __init__(self, tokenizer: Any, ref: str = "tokenizer", context_length: int = 0) -> None:
        self.tokenizer, self.ref, self.context_length = tokenizer, ref, context_length

    def count(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0

    def encode(self, text: str, special: bool = True) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=special)["input_ids"])


def budget(lm: Any, max_new_tokens: int) -> int:
    """Prompt tokens ``lm`` can take while leaving room for ``max_new_tokens``."""
    return max(int(lm.context_length) - int(max_new_tokens), 1)


def _encode(lm: Any, prompt: Any, chat_kwargs: dict[str, Any]) -> list[int]:
    if isinstance(prompt, str):
        return lm.encode(prompt)
    return lm.encode_chat(prompt, **chat_kwargs)


def cut_text(lm: Any, text: str, n: int) -> tuple[str, int]:
    """``text`` less at least ``n`` tokens from its end (by a whole sentence where that keeps at least half of
    what may stay, else by a whole word, else by tokens), and the tokens cut."""
    enc = lm.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    keep = len(ids) - n
    if keep <= 0 or not text:
        return "", len(ids)
    head = text[: offsets[keep][0]]
    ends = [m.end() for m in SENTENCE_END.finditer(head)]
    if ends and ends[-1] >= len(head) // 2:
        head = head[: ends[-1]]
    elif " " in head.strip():
        head = head[: head.rstrip().rfind(" ")]
    head = head.rstrip()
    return head, len(ids) - lm.count(head)


def cut_part(lm: Any, part: Part, n: int) -> tuple[Part, int]:
    """``part`` less at least ``n`` tokens from its end (a list loses whole items from its end first), and the
    tokens cut (0: the part is already empty)."""
    if isinstance(part, str):
        return cut_text(lm, part, n) if part else (part, 0)
    items, done = list(part), 0
    while items and done < n:
        size = lm.count(items[-1])
        if size <= n - done:
            items.pop()
            done += size
        else:
            items[-1], cut = cut_text(lm, items[-1], n - done)
            done += cut
            if not items[-1]:
                items.pop()
    return items, done


def fit_prompt(
    lm: Any,
    render: Callable[..., Any],
    parts: dict[str, Part],
    max_new_tokens: int,
    order: tuple[str, ...] = ("documents", "question"),
    limit: int | None = None,
    chat_kwargs: dict[str, Any] | None = None,
) -> Fit:
    """``render(**parts)`` (chat messages or a text prompt) cut by the module's rule until it fits ``lm`` with
    ``max_new_tokens`` to spare (and ``limit`` prompt tokens, if given): the parts named in ``order`` are cut in
    that order, each only while the prompt overflows."""
    kw = dict(chat_kwargs or {})
    room = budget(lm, max_new_tokens) if limit is None else min(int(limit), budget(lm, max_new_tokens))
    parts = dict(parts)
    prompt = render(**parts)
    ids = _encode(lm, prompt, kw)
    cut: dict[str, int] = {}
    for name in order:
        for _ in range(16):  # a cut is measured on the part alone: re-render, re-measure, cut again if need be
            over = len(ids) - room
            if over <= 0 or name not in parts:
                break
            parts[name], n = cut_part(lm, parts[name], over)
            if n == 0:
                break
            cut[name] = cut.get(name, 0) + n
            prompt = render(**parts)
            ids = _encode(lm, prompt, kw)
    if len(ids) > room:
        ids, n = fit_ids(ids, room)
        cut["prompt"] = n
    if cut:
        log.warning("prompt cut to fit %s (%d tokens, %d new): %s", lm.ref, room, max_new_tokens, cut)
    return Fit(prompt, ids, parts, cut)


def fit_ids(ids: list[int], room: int) -> tuple[list[int], int]:
    """Token ids cut to ``room``: the head and the last ``TAIL`` kept; returns them and the tokens cut."""
    if len(ids) <= room:
        return list(ids), 0
    tail = min(TAIL, room // 2)
    return list(ids[: room - tail]) + list(ids[len(ids) - tail :]), len(ids) - room


def truncated_meta(stage: str, cuts: dict[str, int] | None) -> dict[str, dict[str, int]]:
    """``{stage: cuts}`` for an example's ``meta.truncated`` (empty when nothing was cut)."""
    return {stage: dict(cuts)} if cuts else {}
