"""The shipped train questions the validation probes read (``extractor_probe``, ``truncator_probe``)."""

from __future__ import annotations

import os
from pathlib import Path

from harness.provenance import REPO_ROOT

DATASETS = ("nq", "triviaqa", "hotpotqa")
DEFAULT_DATA = os.environ.get("RAG_HARNESS_DATA") or str(REPO_ROOT.parent / "shared/data")
TRAIN_RANK = {"nq": "none", "triviaqa": "none", "hotpotqa": "bm25"}   # as conf/train/compselect.yaml data.rank


def train_examples(data: str, rank: dict[str, str] | None = None, top_k: int = 5) -> dict:
    """Every train example of the three datasets, by id, ranked as in training (``dataset_of`` names each one's)."""
    from harness.data import DatasetSpec, load_dataset

    rank = rank or TRAIN_RANK
    examples = {}
    for name in DATASETS:
        path = Path(data) / name / "train.jsonl.gz"
        for e in load_dataset(DatasetSpec(name, str(path), top_k, rank[name], None)):
            examples[e.id] = e
            _DATASET_OF[e.id] = name
    return examples


_DATASET_OF: dict[str, str] = {}


def dataset_of(example_id: str) -> str:
    """The dataset a train example returned by ``train_examples`` came from."""
    return _DATASET_OF[example_id]
