"""The truncator's keep-or-not decision read from its first-token probabilities (a departure from 000).

The paper takes the truncator's greedy output. A truncator trained on the labels of a weak generator (SmolLM2
answers few questions from any prefix, so about half the labels are the empty set) puts the empty set's stop
token first on nearly every input: greedy decoding then keeps nothing (methods/compselect/README.md). Here the
empty set is chosen only when its probability reaches ``threshold``, a value selected on the validation labels
(``truncator_probe --thresholds``), never on test questions; otherwise the truncator says how much to keep:

- ``text`` (CompSelect): P(empty) = p(stop) / (p(stop) + p(first token of "Sentence 1:")) at the first output
  position; to keep, the output is generated greedily after that first token and parsed as usual
  (``parse_truncation``); an output that matches no clue keeps the top-ranked one (the decision was "keep").
- ``index`` (FineFilter): the digits 0..min(n, 9) as the first output token, renormalised; P(empty) = p("0");
  to keep, K = the most probable of 1..min(n, 9) (one forward pass, no generation).

At ``threshold`` 0.5 this is the greedy decision between the two options (up to other tokens' mass).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.protocols import Messages
from methods.compselect.parsing import DEFAULT_THRESHOLD, parse_truncation

MAX_DIGIT = 9  # FineFilter's K read as one digit token


@dataclass
class Decision:
    k: int
    p_empty: float
    output: str


def _normalised(logprobs: Sequence[float]) -> list[float]:
    top = max(logprobs)
    w = [math.exp(x - top) for x in logprobs]
    return [x / sum(w) for x in w]


def truncator_decision(
    lm: Any,
    prompts: Sequence[Messages],
    ranked: Sequence[Sequence[str]],
    output: str,
    threshold: float,
    max_new_tokens: int = 256,
    match_threshold: float = DEFAULT_THRESHOLD,
) -> list[Decision]:
    """K per prompt (each ranked list non-empty) under the thresholded decision above; ``lm`` is the model
    layer's truncator LM (``harness.lm.LM``)."""
    ids = [lm.encode_chat(p) for p in prompts]
    if output == "index":
        out = []
        for row, texts in zip(lm.token_logprobs(ids, _digit_ids(lm)), ranked, strict=True):
            n = min(len(texts), MAX_DIGIT)
            probs = _normalised(row.value[: n + 1])
            k = 0 if probs[0] >= threshold else 1 + max(range(n), key=lambda j: probs[j + 1])
            out.append(Decision(k, probs[0], str(k)))
        return out
    if output != "text":
        raise ValueError(f"truncator output mode {output!r}; valid: text, index")
    stop, go = lm.stop_ids[0], lm.encode("Sentence 1:", special=False)[0]
    p_empty = [_normalised(r.value)[0] for r in lm.token_logprobs(ids, [stop, go])]
    keep = [i for i, p in enumerate(p_empty) if p < threshold]
    texts_out = {
        i: lm.decode([go, *c.token_ids])
        for i, c in zip(keep, lm.generate([ids[i] + [go] for i in keep], max_new_tokens), strict=True)
    }
    decisions = []
    for i, (p, texts) in enumerate(zip(p_empty, ranked, strict=True)):
        if i not in texts_out:
            decisions.append(Decision(0, p, ""))
            continue
        k = parse_truncation(texts_out[i], list(texts), "text", match_threshold)
        decisions.append(Decision(max(k, 1), p, texts_out[i]))
    return decisions


def _digit_ids(lm: Any) -> list[int]:
    ids = [lm.encode(str(d), special=False) for d in range(MAX_DIGIT + 1)]
    if any(len(t) != 1 for t in ids):
        raise ValueError(f"{lm.ref}: a digit is not one token; the index decision needs single-digit tokens")
    return [t[0] for t in ids]
