"""``python -m research.compselect.reranker_cv <reranker_labels.jsonl> [--rules generator,answer] [--folds 3]``

Question answered: which clues the reranker should learn to put first, and whether more triplets help (neither
the answer rule nor the extractor's triplets beat the paper's rule: not adopted); figures in
methods/compselect/README.md ("Reranker positives", "More reranker questions").

Which clues should the reranker learn to put first? k-fold cross-validation of the positive rules of
``labels.reranker_positives`` on the labelling-train questions of a training run's ``reranker_labels.jsonl``
(their clues and generator verdicts as labelled; validation questions and test questions are never read). For
each rule and fold a reranker is trained as ``conf/train/compselect.yaml`` says (MiniLM + LoRA, the same
settings) on the other folds' triplets and scores the held-out questions' clues; reported is Hit@1, the share of
held-out questions whose top clue holds a gold answer (``ans``, among questions with such a clue) or makes the
generator answer alone (``correct``, among questions with such a clue: with the truncator's K=1 this is the
generator's SubEM). The extractor's order and the un-tuned MiniLM are the baselines.

``--extractor-triplets N`` adds to every fold's training triplets the ``reranker.extractor_triplets`` ones (N per
extractor question, from ``extractor_targets.jsonl`` beside the labels; those questions are disjoint from the
labelling questions, so the held-out folds stay unseen).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path

from research.compselect.data import DEFAULT_DATA, train_examples

Scorer = Callable[[str, Sequence[str]], Sequence[float]]


def hit_at_1(rows: Sequence[dict], questions: dict[str, str], score: Scorer) -> dict[str, list]:
    """Hit@1 (percent) and the number of questions counted, for the ``answer`` and ``correct`` flags."""
    hits: dict[str, list[bool]] = {"answer": [], "correct": []}
    for r in rows:
        if not any(c[key] for c in r["clues"] for key in hits):
            continue
        s = list(score(questions[r["id"]], [c["text"] for c in r["clues"]]))  # once per question
        top = r["clues"][max(range(len(s)), key=lambda j: (s[j], -j))]
        for key, h in hits.items():
            if any(c[key] for c in r["clues"]):
                h.append(top[key])
    return {key: [round(100 * sum(h) / max(len(h), 1), 1), len(h)] for key, h in hits.items()}


def _cosine(st, base: str) -> Scorer:
    """``ClueReranker.score`` (cosine of question and clue) with an in-memory sentence model."""
    from methods.compselect.reranker import ClueReranker

    reranker = ClueReranker(base)
    reranker.model = st
    return reranker.score


def _pooled(parts: list[dict[str, list]]) -> dict[str, list]:
    return {
        k: [
            round(sum(p[k][0] * p[k][1] for p in parts) / max(sum(p[k][1] for p in parts), 1), 1),
            sum(p[k][1] for p in parts),
        ]
        for k in ("answer", "correct")
    }


def main(argv: list[str] | None = None) -> dict:
    import torch

    from harness.config import compose_config
    from harness.lm.encoders import sentence_model
    from methods.compselect.train_labels import contains_answer, reranker_pairs, reranker_positives, target_triplets
    from methods.compselect.train_reranker import train_reranker_from_config

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("labels")
    ap.add_argument("--rules", default="generator,answer")
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0, help="the fold assignment's")
    ap.add_argument("--limit", type=int, default=None, help="the first N labelling-train questions (smoke tests)")
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument(
        "--extractor-triplets",
        type=int,
        default=None,
        help="per extractor question (default: the training config's reranker.extractor_triplets)",
    )
    args = ap.parse_args(argv)
    cfg = compose_config("train/compselect")
    torch.set_num_threads(int(cfg.threads))
    rc = cfg.reranker
    examples = train_examples(args.data)
    rows = [json.loads(x) for x in Path(args.labels).read_text().splitlines()]
    rows = [r for r in rows if r["part"] == "train" and r["clues"]][: args.limit]
    for r in rows:  # labels written before the ``answer`` flag was recorded get it here
        for c in r["clues"]:
            c.setdefault("answer", contains_answer(c["text"], examples[r["id"]].answers, cfg.extractor.match))
    questions = {r["id"]: examples[r["id"]].question for r in rows}
    per_question = args.extractor_triplets
    if per_question is None:
        per_question = int(rc.get("extractor_triplets") or 0)
    extra = []
    if per_question:
        target_file = Path(args.labels).parent / "extractor_targets.jsonl"
        targets = [json.loads(x) for x in target_file.read_text().splitlines()]
        if {t["id"] for t in targets} & set(questions):
            raise ValueError("extractor_targets.jsonl shares questions with the labelling questions")
        extra = target_triplets(targets, {i: e.question for i, e in examples.items()}, int(per_question), int(cfg.seed))
    ids = [r["id"] for r in rows]
    random.Random(args.seed).shuffle(ids)
    fold = {i: k % args.folds for k, i in enumerate(ids)}
    untuned = sentence_model(rc.base, cfg.device, int(rc.max_seq_length))
    report: dict = {
        "labels": args.labels,
        "questions": len(rows),
        "folds": args.folds,
        "extractor_triplets": [int(per_question), len(extra)],
        "extractor_order": hit_at_1(rows, questions, lambda q, t: [-j for j in range(len(t))]),
        "untuned": hit_at_1(rows, questions, _cosine(untuned, rc.base)),
    }
    print(json.dumps(report), flush=True)
    for rule in args.rules.split(","):
        parts = []
        for k in range(args.folds):
            triplets = [
                (questions[r["id"]], p, n)
                for r in rows
                if fold[r["id"]] != k
                for p, n in reranker_pairs(
                    [c["text"] for c in r["clues"]],
                    reranker_positives([c["correct"] for c in r["clues"]], [c["answer"] for c in r["clues"]], rule),
                )
            ]
            st, _ = train_reranker_from_config(cfg, triplets + extra, [])
            parts.append(hit_at_1([r for r in rows if fold[r["id"]] == k], questions, _cosine(st, rc.base)))
            print(
                json.dumps({"rule": rule, "fold": k, "triplets": len(triplets), "extra": len(extra), **parts[-1]}),
                flush=True,
            )
        report[rule] = _pooled(parts)
        print(json.dumps({"rule": rule, **report[rule]}), flush=True)
    return report


if __name__ == "__main__":
    main()
