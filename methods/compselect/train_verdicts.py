"""The generator's verdicts that label CompSelect's reranker and truncator (``train.py``): whether it answers
correctly from a clue list (``Labeller``, SubEM), the gold answer's likelihood under one (``NllLabeller``), the
truncator's K per question from them (``truncation_labels``, ``likelihood_fallback``). Every call goes through the
model layer's cache, so a re-run replays them.
"""

from __future__ import annotations

from collections.abc import Sequence


class Labeller:
    """The generator's verdicts on (question, clue list) prompts: SubEM of its answer against the golds (its
    calls go through the model layer's cache)."""

    def __init__(self, generator) -> None:
        self.generator = generator
        self.calls = 0

    def answers(self, items: Sequence[tuple[str, list[str]]]) -> list[str]:
        self.calls += len(items)
        return [g.answer for g in self.generator.generate([self.generator.messages(q, docs) for q, docs in items])]

    def correct(self, items: Sequence[tuple[str, list[str], Sequence[str]]]) -> list[bool]:
        from harness.metrics import subem

        answers = self.answers([(q, docs) for q, docs, _ in items])
        return [bool(subem(a, golds)) for a, (_, _, golds) in zip(answers, items, strict=True)]


def truncation_labels(
    labeller: Labeller, questions: Sequence[tuple[str, list[str], Sequence[str]]], scan: str
) -> list[int]:
    """K per question (``labels.truncation_label``); all questions advance through their scans in lock-step,
    so each round of generator calls is one batch, and a question stops at its first correct prefix."""
    from methods.compselect.train_labels import scan_order, truncation_label

    orders = [scan_order(len(clues), scan) for _, clues, _ in questions]
    verdicts: list[dict[int, bool]] = [{} for _ in questions]
    pos = [0] * len(questions)
    live = [i for i, o in enumerate(orders) if o]
    while live:
        asks = [(i, orders[i][pos[i]]) for i in live]
        got = labeller.correct([(questions[i][0], questions[i][1][:k], questions[i][2]) for i, k in asks])
        for (i, k), ok in zip(asks, got, strict=True):
            verdicts[i][k] = ok
            pos[i] += 1
        live = [i for i, k in asks if not verdicts[i][k] and pos[i] < len(orders[i])]
    return [truncation_label(len(o), verdicts[i].__getitem__, scan) for i, o in enumerate(orders)]


class NllLabeller:
    """The generator's teacher-forced gold-answer NLL for (question, clue list) prompts, the minimum over the
    first ``max_answers`` gold aliases (calls cached by the model layer)."""

    def __init__(self, generator, max_answers: int = 5) -> None:
        from harness.protocols import answer_scorer

        self.generator, self.max_answers = answer_scorer(generator, "CompSelect's NLL labels"), max_answers
        self.calls = 0

    def nll(self, items: Sequence[tuple[str, list[str], Sequence[str]]]) -> list[float]:
        from harness.prompt import messages_of

        ask = messages_of(self.generator)
        pairs = [(ask(q, docs), a) for q, docs, golds in items for a in list(golds)[: self.max_answers]]
        self.calls += len(pairs)
        values = self.generator.answer_nll([m for m, _ in pairs], [a for _, a in pairs])
        out, i = [], 0
        for _, _, golds in items:
            n = len(list(golds)[: self.max_answers])
            out.append(min(values[i : i + n]) if n else float("inf"))
            i += n
        return out


def likelihood_fallback(
    nll: NllLabeller, questions: Sequence[tuple[str, list[str], Sequence[str]]], ks: Sequence[int]
) -> tuple[list[int], list[list[float] | None]]:
    """``ks`` with every empty label (0) replaced by ``labels.likelihood_label`` over the prefixes k = 0..n;
    also the NLLs behind each replaced label."""
    from methods.compselect.train_labels import likelihood_label

    todo = [i for i, k in enumerate(ks) if k == 0]
    asks = [(i, k) for i in todo for k in range(len(questions[i][1]) + 1)]
    values = nll.nll([(questions[i][0], questions[i][1][:k], questions[i][2]) for i, k in asks])
    per: dict[int, list[float]] = {}
    for (i, _), v in zip(asks, values, strict=True):
        per.setdefault(i, []).append(round(float(v), 5))
    return [likelihood_label(per[i]) if i in per else k for i, k in enumerate(ks)], [per.get(i) for i in range(len(ks))]
