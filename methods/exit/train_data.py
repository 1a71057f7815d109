"""EXIT's training data (``train.py``): the questions of the shipped train splits, cut into train and validation
(``questions``), and each question's labelled sentences (``labelled_sentences``, ``label_rows``), written to
``labels.jsonl`` beside the classifier (``write_labels``).

Labels, a departure (the paper's come from its own annotation pipeline): a sentence is useful when it contains a
gold answer after SQuAD normalisation (``harness.metrics.subem``); each question gives its first
``max_positives`` answer sentences and ``negatives_per_positive`` non-answer sentences of its passages drawn at
random, ``hard_negative_share`` of them from the passages holding an answer (EXIT's own preprocessing balances
positives 1:1 against half hard negatives -- other sentences of a gold document -- and half random ones);
questions with no answer sentence (and HotpotQA's yes/no ones) are skipped. Test questions are never read.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from omegaconf import DictConfig


def labelled_sentences(
    example, max_positives: int, negatives: int, rng: random.Random, hard_share: float | None = None
) -> list[dict[str, Any]]:
    """(passage, sentence, context, text, label) rows of one question: its first ``max_positives`` answer
    sentences, and ``negatives`` non-answer sentences per positive drawn at random; none when no sentence holds an
    answer. ``hard_share``: the share of negatives drawn from the passages that hold an answer sentence (EXIT's
    hard negatives: other sentences of a gold document), the rest from the other passages (a pool that runs short
    is made up from the other one); None: from all passages alike."""
    from harness.metrics import subem
    from harness.text import split_sentences

    pos, hard, other, every = [], [], [], []
    for pi, p in enumerate(example.passages):
        text = p.text.strip()
        context = f"{p.title.strip()}\n{text}" if p.title.strip() else text
        rows = [
            {"passage": pi, "sentence": si, "context": context, "text": s} for si, s in enumerate(split_sentences(text))
        ]
        answer = [subem(r["text"], example.answers) for r in rows]
        pos += [r for r, a in zip(rows, answer, strict=True) if a]
        negs = [r for r, a in zip(rows, answer, strict=True) if not a]
        (hard if any(answer) else other).extend(negs)
        every += negs
    pos = pos[:max_positives]
    if not pos:
        return []
    n = negatives * len(pos)
    if hard_share is None:
        neg = rng.sample(every, min(n, len(every)))
    else:
        n_hard = min(len(hard), max(round(hard_share * n), n - len(other)))
        neg = rng.sample(hard, n_hard) + rng.sample(other, min(len(other), n - n_hard))
    return [{**r, "label": True} for r in pos] + [{**r, "label": False} for r in neg]


def questions(cfg: DictConfig) -> tuple[list, list, dict[str, str]]:
    """(train, validation) questions: a seeded shuffle of each train split, the last ``val_fraction`` held out
    (HotpotQA's yes/no questions left out: every sentence would "contain" their answer); and the files' hashes."""
    from harness.data import DatasetSpec, load_dataset
    from harness.lm.models import file_sha256

    d = cfg.data
    train_q, val_q, hashes = [], [], {}
    for name, n in d.questions.items():
        path = Path(d.root) / name / f"{d.split}.jsonl.gz"
        examples = load_dataset(DatasetSpec(name, str(path), int(d.top_k), d.rank[name], None))
        hashes[str(path)] = file_sha256(path)
        examples = [e for e in examples if not {a.strip().lower() for a in e.answers} <= {"yes", "no"}]
        random.Random(f"{cfg.seed}:{name}").shuffle(examples)
        chosen = examples[: int(n)] if n is not None else examples
        n_val = round(float(d.val_fraction) * len(chosen))
        train_q += chosen[: len(chosen) - n_val]
        val_q += chosen[len(chosen) - n_val :]
    return train_q, val_q, hashes


def label_rows(cfg: DictConfig, train_q: list, val_q: list) -> dict[str, list[dict[str, Any]]]:
    """The labelled sentences of the train and validation questions (one seeded draw over both, in order)."""
    rng = random.Random(int(cfg.seed))
    d = cfg.data
    return {
        part: [
            {"id": e.id, "part": part, **r}
            for e in qs
            for r in labelled_sentences(
                e, int(d.max_positives), int(d.negatives_per_positive), rng, d.get("hard_negative_share")
            )
        ]
        for part, qs in (("train", train_q), ("val", val_q))
    }


def write_labels(path: Path, rows: dict[str, list[dict[str, Any]]]) -> None:
    """``labels.jsonl``: one line per labelled sentence, named by (passage, sentence) without its text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in rows["train"] + rows["val"]:
            row = {k: v for k, v in r.items() if k not in ("context", "text")}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
