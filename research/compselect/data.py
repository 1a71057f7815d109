"""The shipped train questions the CompSelect analyses read (``extractor_probe``, ``truncator_probe``,
``reranker_cv``), ranked as ``conf/train/compselect.yaml`` ranks them."""

from __future__ import annotations

import os
from pathlib import Path

from harness.provenance import REPO_ROOT

DATASETS = ("nq", "triviaqa", "hotpotqa")
DEFAULT_DATA = os.environ.get("RAG_HARNESS_DATA") or str(REPO_ROOT.parent / "shared/data")
TRAIN_RANK = {"nq": "none", "triviaqa": "none", "hotpotqa": "bm25"}  # as conf/train/compselect.yaml data.rank


def train_examples_by_dataset(data: str, rank: dict[str, str] | None = None, top_k: int = 5) -> dict[str, dict]:
    """Every train example of the three datasets, by dataset and id, ranked as in training."""
    from harness.data import DatasetSpec, load_dataset

    rank = rank or TRAIN_RANK
    return {
        name: {
            e.id: e
            for e in load_dataset(DatasetSpec(name, str(Path(data) / name / "train.jsonl.gz"), top_k, rank[name], None))
        }
        for name in DATASETS
    }


def train_examples(data: str, rank: dict[str, str] | None = None, top_k: int = 5) -> dict:
    """Every train example of the three datasets, by id, ranked as in training."""
    return {i: e for exs in train_examples_by_dataset(data, rank, top_k).values() for i, e in exs.items()}
