"""CompSelect's training data (``train.py``): the shipped train splits cut into extractor and labelling
questions (``load_sets``, ``make_splits``), the extractor's targets (``extractor_targets``), an earlier run's
reranker labels read back (``clues_from_labels``), and the stopwatch and JSONL writer the run keeps its record with.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

log = logging.getLogger("compselect.train")


class Stopwatch:
    """Wall and process-CPU seconds per named stage."""

    def __init__(self) -> None:
        self.times: dict[str, dict[str, float]] = {}

    def __call__(self, name: str):
        watch = self

        class _Ctx:
            def __enter__(self):
                self.t, self.c = time.perf_counter(), time.process_time()

            def __exit__(self, *exc):
                watch.times[name] = {
                    "wall_s": round(time.perf_counter() - self.t, 1),
                    "cpu_s": round(time.process_time() - self.c, 1),
                }
                log.info("%s: %s", name, watch.times[name])

        return _Ctx()


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def load_sets(cfg: DictConfig) -> tuple[dict[str, list], dict[str, str]]:
    from harness.data import DatasetSpec, load_dataset
    from harness.lm.models import file_sha256

    sets, hashes = {}, {}
    for name in cfg.data.extractor:
        path = Path(cfg.data.root) / name / f"{cfg.data.split}.jsonl.gz"
        sets[name] = load_dataset(DatasetSpec(name, str(path), int(cfg.data.top_k), cfg.data.rank[name], None))
        hashes[str(path)] = file_sha256(path)
    return sets, hashes


def make_splits(sets: dict[str, list], cfg: DictConfig) -> dict[str, dict[str, list[str]]]:
    """Per dataset, a seeded shuffle cut into extractor / labelling questions, each with a validation tail."""
    splits: dict[str, dict[str, list[str]]] = {}
    for name, examples in sets.items():
        ids = [e.id for e in examples]
        random.Random(f"{cfg.seed}:{name}").shuffle(ids)
        n_ext, n_lab = int(cfg.data.extractor[name]), int(cfg.data.labels[name])
        parts = {"extractor": ids[:n_ext], "labels": ids[n_ext : n_ext + n_lab]}
        for part, chosen in parts.items():
            n_val = round(float(cfg.data.val_fraction) * len(chosen))
            splits.setdefault(part, {}).setdefault("train", []).extend(chosen[: len(chosen) - n_val])
            splits[part].setdefault("val", []).extend(chosen[len(chosen) - n_val :])
    return splits


def extractor_targets(cfg: DictConfig, lm, encoder, examples: Sequence) -> list[dict[str, Any]]:
    """Per example: the prompt's shown sentences, S^a, the KNN additions and the ordered target (flat
    indices)."""
    from methods.compselect.method import extractor_input
    from methods.compselect.train_labels import answer_sentences, knn_expand, order_by_similarity, pad_target

    rows = []
    for e in examples:
        x = extractor_input(lm, e, int(cfg.extractor.max_input_tokens))
        shown = x.sentences[: x.shown]
        seeds = answer_sentences(shown, e.answers, cfg.extractor.match)
        if not seeds:
            rows.append({"id": e.id, "target": [], "answer_sentences": []})
            continue
        emb = encoder.encode(
            [e.question, *shown], normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        chosen = knn_expand(emb[1:], seeds, float(cfg.extractor.epsilon))
        ordered = order_by_similarity(chosen, emb[1:], emb[0])
        expanded = len(ordered)
        ordered = pad_target(ordered, emb[1:], emb[0], cfg.extractor.get("pad_to"))
        rows.append(
            {
                "id": e.id,
                "target": ordered,
                "answer_sentences": seeds,
                "padded": len(ordered) - expanded,
                "units": [[x.units[i].passage, x.units[i].sentence] for i in ordered],
                "texts": [shown[i] for i in ordered],
            }
        )
    return rows


def clues_from_labels(path: Path, label_ids: Sequence[str]) -> tuple[dict[str, list], dict[tuple[str, int], bool]]:
    """The clues (in the extractor's order) and generator verdicts of ``label_ids`` as an earlier run's
    ``reranker_labels.jsonl`` recorded them (``reranker.labels_from``): a reranker re-trained on them needs no
    extractor or generator call, and its labels are those of the run that wrote the file. The clues' ``source``
    is their position in the file (the sentence indices are not recorded)."""
    from methods.compselect.parsing import Clue

    rows = {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}
    missing = [i for i in label_ids if i not in rows]
    if missing:
        raise ValueError(
            f"reranker.labels_from={path}: {len(missing)} labelling questions missing (first: "
            f"{missing[0]}); it must come from a run with the same data and splits"
        )
    clues = {i: [Clue(j, c["text"], c["text"], 1.0) for j, c in enumerate(rows[i]["clues"])] for i in label_ids}
    ok = {(i, j): bool(c["correct"]) for i in label_ids for j, c in enumerate(rows[i]["clues"])}
    return clues, ok
