"""Contextual Influence (CI) values (paper 002, Eq. 2-3): leave-one-out influence of each unit on the
generator's teacher-forced loss of the gold answer.

``v(S) = -min_{y in Y} L(y | prompt(q, S))`` with ``L`` the mean NLL per answer token (the generator's prompt,
``harness.prompt.messages_of``, the answer followed by end-of-turn, as ``AnswerScorer.answer_nll`` scores
it), and ``phi_i = v(C) - v(C \\ c_i) = L(C \\ c_i) - L(C)``. All (n+1) x |Y| prompt/answer pairs of a
batch of examples go to the scorer in one call; identical pairs are scored once, so a unit whose removal
leaves the prompt byte-identical (an empty passage, which renders to no document) gets exactly 0.

Units are whole passages (rendered with their title, as ``Full`` shows them) or sentences (grouped back into
one document per passage by ``harness.text.assemble``). Before scoring, duplicates are removed (paper: "we
remove semantically duplicate contexts"; the rule is unspecified): a unit is dropped when its whitespace- and
case-normalised text equals an earlier unit's, or, with an encoder, when its cosine similarity to an earlier
kept unit is >= ``dedup_threshold`` (0.95, papers.md 2.12 item 3). Dropped units get value 0 and are never
kept. Gold aliases: exact duplicates and SQuAD-normalised duplicates are merged (the first spelling is
kept) and at most ``max_answers`` are scored, in dataset order (TriviaQA lists ~13 aliases per question; the
cap bounds cost at (n+1) x max_answers passes).

Shared by two methods, so it lives in the core rather than in either: the oracle that keeps the units of positive
CI (``methods/ci_oracle.py``) and CSM, whose surrogate is trained on these values as labels and selects over the
same unit lists (``methods/csm/``). It depends only on the core (prompt, metrics' normalisation, text units).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from harness.metrics import normalize
from harness.prompt import messages_of
from harness.protocols import AnswerScorer, Messages
from harness.text import assemble, sentence_units
from harness.types import Example, Unit

GRANULARITIES = ("passage", "sentence")
_WS = re.compile(r"\s+")


@dataclass
class UnitList:
    """The candidate units of one example: what CI values are computed over."""

    units: list[Unit]
    texts: list[str]
    # index into units -> why: "duplicate", "near_duplicate" or "short"
    dropped: dict[int, str] = field(default_factory=dict)

    def active(self) -> list[int]:
        return [i for i in range(len(self.units)) if i not in self.dropped]


def example_units(example: Example, granularity: str = "passage", min_words: int = 0) -> UnitList:
    """Passages (rendered with titles) or sentences of an example; sentences of ``<= min_words`` words are
    marked dropped (the released code keeps sentences of more than 5 words). Empty passages stay: they render
    to no document, so their value comes out 0 from identical prompts, not by decree."""
    if granularity == "passage":
        units = [Unit(i) for i in range(len(example.passages))]
        texts = [p.render() for p in example.passages]
    elif granularity == "sentence":
        units, texts = sentence_units(example.passages)
    else:
        raise ValueError(f"granularity={granularity!r}; valid: {', '.join(GRANULARITIES)}")
    ul = UnitList(units, texts)
    if granularity == "sentence":
        for i, t in enumerate(texts):
            if len(t.split()) <= min_words:
                ul.dropped[i] = "short"
    return ul


def mark_duplicates(
    ul: UnitList, embed: Callable[[list[str]], object] | None = None, threshold: float = 0.95
) -> UnitList:
    """Mark later exact (normalised) duplicates, then near-duplicates by embedding cosine >= ``threshold``."""
    seen: dict[str, int] = {}
    for i in ul.active():
        key = _WS.sub(" ", ul.texts[i]).strip().lower()
        if not key:
            continue
        if key in seen:
            ul.dropped[i] = "duplicate"
        else:
            seen[key] = i
    active = [i for i in ul.active() if ul.texts[i].strip()]
    if embed is None or len(active) < 2:
        return ul
    import numpy as np

    vecs = np.asarray(embed([ul.texts[i] for i in active]), dtype=np.float32)
    vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    kept: list[int] = []
    for row, i in enumerate(active):
        if kept and float(np.max(vecs[kept] @ vecs[row])) >= threshold:
            ul.dropped[i] = "near_duplicate"
        else:
            kept.append(row)
    return ul


def mark_duplicates_batch(lists: Sequence[UnitList], encoder=None, threshold: float = 0.95) -> list[UnitList]:
    """``mark_duplicates`` over many lists with one encoder call for all their texts (a sentence-transformers
    model, or None for exact duplicates only)."""
    if encoder is None:
        return [mark_duplicates(ul) for ul in lists]
    texts = sorted({t for ul in lists for t in ul.texts if t.strip()})
    vecs = encoder.encode(texts, normalize_embeddings=True, show_progress_bar=False, batch_size=64)
    table = dict(zip(texts, vecs, strict=True))
    return [mark_duplicates(ul, lambda ts: [table[t] for t in ts], threshold) for ul in lists]


def gold_answers(answers: Sequence[str], max_answers: int | None) -> list[str]:
    """Distinct aliases (by SQuAD normalisation, first spelling kept), at most ``max_answers``."""
    out, seen = [], set()
    for a in answers:
        key = normalize(a) or a
        if key not in seen:
            seen.add(key)
            out.append(a)
    return out if max_answers is None else out[:max_answers]


def documents(example: Example, ul: UnitList, keep: Sequence[int], with_titles: bool = False) -> list[str]:
    """The generator's documents for a subset of the active units (indices into ``ul``), in original order;
    units that render to nothing produce no document."""
    if not keep:
        return []
    if ul.units[0].sentence is None:
        return [ul.texts[i] for i in sorted(keep) if ul.texts[i].strip()]
    return assemble(example.passages, [ul.units[i] for i in keep], with_titles)


@dataclass
class CIResult:
    """CI values of one example (0 for dropped units) and the losses they come from."""

    values: list[float]
    full_loss: float
    loo_losses: list[float | None]
    answers: list[str]


def ci_values(
    scorer: AnswerScorer,
    items: Sequence[tuple[Example, UnitList]],
    max_answers: int | None = 5,
    with_titles: bool = False,
    messages: Callable[[str, Sequence[str]], Messages] | None = None,
) -> list[CIResult]:
    """CI value of every unit of every item, with one ``answer_nll`` call for the whole batch; prompts are
    ``messages(question, documents)``, by default the scorer's own template (``harness.prompt.messages_of``)."""
    ask = messages or messages_of(scorer)
    pairs: dict[tuple[str, str], int] = {}  # (prompt key, answer) -> index of the unique pair
    prompts, answers = [], []
    plan = []  # per item: answers, list over contexts (full first) of pair indices per answer
    for ex, ul in items:
        golds = gold_answers(ex.answers, max_answers)
        active = ul.active()
        contexts = [active] + [[j for j in active if j != i] for i in active]
        ctx_pairs = []
        for keep in contexts:
            msgs = ask(ex.question, documents(ex, ul, keep, with_titles))
            pkey = repr(msgs)
            row = []
            for a in golds:
                k = (pkey, a)
                if k not in pairs:
                    pairs[k] = len(prompts)
                    prompts.append(msgs)
                    answers.append(a)
                row.append(pairs[k])
            ctx_pairs.append(row)
        plan.append((golds, active, ctx_pairs))
    nll = scorer.answer_nll(prompts, answers) if prompts else []
    out = []
    for (_, ul), (golds, active, ctx_pairs) in zip(items, plan, strict=True):
        losses = [min(nll[k] for k in row) for row in ctx_pairs]
        values = [0.0] * len(ul.units)
        loo: list[float | None] = [None] * len(ul.units)
        for i, loss in zip(active, losses[1:], strict=True):
            loo[i] = loss
            values[i] = loss - losses[0]
        out.append(CIResult(values, losses[0], loo, golds))
    return out


def positive(values: Sequence[float], threshold: float = 0.0) -> list[int]:
    """Indices of the units with value above ``threshold``, in original (retrieval) order."""
    return [i for i, v in enumerate(values) if v > threshold]
