"""Load and validate QA datasets with retrieved passages, before any model is loaded.

Two formats are read:
- JSON Lines (``.jsonl`` or ``.jsonl.gz``): one object per line with ``id`` (optional), ``question``,
  ``answers`` and ``ctxs`` (a list of objects with ``text`` and optional ``title``, ``score``), the schema of
  ``shared/data``.
- DPR retriever results (``.json`` or ``.json.gz``): one JSON list of objects with ``question``,
  ``answers`` and ``ctxs``, as written by DPR's ``dense_retriever.py``; ids are ``<file stem>-<index>``.

Every problem is reported as ``DatasetError`` naming the file, the line (or list item) and the field.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.text import bm25_scores, rank_desc
from harness.types import Example, Passage

RANKINGS = ("none", "bm25")


class DatasetError(ValueError):
    """Malformed dataset input; the message names file, line and field."""


@dataclass(frozen=True)
class DatasetSpec:
    """Where to read a dataset and how to cut it: ``top_k`` passages after an optional re-ranking."""

    name: str
    path: str
    top_k: int = 5
    rank: str = "none"
    limit: int | None = None


def _open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open("r", encoding="utf-8")


def _records(path: Path) -> Iterator[tuple[str, Any]]:
    """Yield (location, raw object) pairs; location is ``line N`` or ``item N``."""
    name = path.name.removesuffix(".gz")
    if name.endswith(".jsonl"):
        with _open_text(path) as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    yield f"line {lineno}", json.loads(line)
                except json.JSONDecodeError as e:
                    raise DatasetError(f"{path}: line {lineno}: not valid JSON ({e.msg})") from None
    elif name.endswith(".json"):
        with _open_text(path) as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as e:
                raise DatasetError(f"{path}: line {e.lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(data, list):
            raise DatasetError(f"{path}: line 1: expected a JSON list of questions (DPR retriever results)")
        for i, obj in enumerate(data):
            yield f"item {i}", obj
    else:
        raise DatasetError(f"{path}: unknown format; expected .jsonl, .jsonl.gz, .json or .json.gz")


def _parse(path: Path, where: str, obj: Any, default_id: str) -> Example:
    def bad(field: str, why: str) -> DatasetError:
        return DatasetError(f"{path}: {where}: field '{field}': {why}")

    if not isinstance(obj, dict):
        raise DatasetError(f"{path}: {where}: expected a JSON object, got {type(obj).__name__}")
    q = obj.get("question")
    if not isinstance(q, str) or not q.strip():
        raise bad("question", "missing or empty")
    answers = obj.get("answers")
    if (
        not isinstance(answers, list)
        or not answers
        or not all(isinstance(a, str) and a.strip() for a in answers)
    ):
        raise bad("answers", "must be a non-empty list of non-empty strings")
    ctxs = obj.get("ctxs", None)
    if not isinstance(ctxs, list):
        raise bad("ctxs", "must be a list of objects with 'text'")
    passages = []
    for j, c in enumerate(ctxs):
        if not isinstance(c, dict) or not isinstance(c.get("text"), str):
            raise bad(f"ctxs[{j}]", "must be an object with a string 'text'")
        title = c.get("title") or ""
        if not isinstance(title, str):
            raise bad(f"ctxs[{j}].title", "must be a string")
        score = c.get("score")
        try:
            score = None if score is None else float(score)
        except (TypeError, ValueError):
            raise bad(f"ctxs[{j}].score", f"not a number: {score!r}") from None
        meta = {k: v for k, v in c.items() if k not in ("text", "title", "score")}
        passages.append(Passage(text=c["text"], title=title, score=score, meta=meta))
    ex_id = obj.get("id", default_id)
    if not isinstance(ex_id, str | int) or str(ex_id) == "":
        raise bad("id", "must be a non-empty string")
    meta = {k: v for k, v in obj.items() if k not in ("id", "question", "answers", "ctxs")}
    return Example(str(ex_id), q.strip(), tuple(a.strip() for a in answers), tuple(passages), meta)


def read_examples(path: str | Path) -> list[Example]:
    """Read and validate every example of a file; fails on the first problem, naming file, line, field."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(
            f"{path}: no such file (the default data root is ../shared/data beside the repository: set "
            "RAG_HARNESS_DATA to the folder holding <dataset>/<split>.jsonl.gz, or pass dataset.path=<file>)"
        )
    examples, seen = [], {}
    stem = path.name.split(".")[0]
    for idx, (where, obj) in enumerate(_records(path)):
        ex = _parse(path, where, obj, default_id=f"{stem}-{idx}")
        if ex.id in seen:
            raise DatasetError(f"{path}: {where}: field 'id': duplicate id {ex.id!r} (first at {seen[ex.id]})")
        seen[ex.id] = where
        examples.append(ex)
    return examples


def rank_passages(example: Example, how: str) -> Example:
    """Re-rank an example's passages: ``none`` keeps the file order; ``bm25`` orders them by BM25
    (bm25s, k1=1.5, b=0.75, English stop words, IDF over the example's own passages) of title plus text
    against the question, ties in file order. HotpotQA's distractor paragraphs are unranked, so its
    top-k is taken after this ranking."""
    if how == "none":
        return example
    if how != "bm25":
        raise ValueError(f"unknown ranking {how!r}; valid: {', '.join(RANKINGS)}")
    scores = bm25_scores(example.question, [f"{p.title} {p.text}" for p in example.passages])
    order = rank_desc(scores)
    ranked = tuple(
        Passage(p.text, p.title, float(scores[i]), {**p.meta, "file_rank": i})
        for i, p in ((i, example.passages[i]) for i in order)
    )
    return Example(example.id, example.question, example.answers, ranked, example.meta)


def load_dataset(spec: DatasetSpec) -> list[Example]:
    """Read, validate, cut to ``limit`` examples, rank, and keep ``top_k`` passages of each."""
    if spec.rank not in RANKINGS:
        raise ValueError(f"dataset.rank={spec.rank!r}; valid: {', '.join(RANKINGS)}")
    if spec.top_k < 0:
        raise ValueError(f"dataset.top_k must be >= 0, got {spec.top_k}")
    examples = read_examples(spec.path)
    if spec.limit is not None:
        examples = examples[: spec.limit]
    out = []
    for ex in examples:
        ex = rank_passages(ex, spec.rank)
        out.append(Example(ex.id, ex.question, ex.answers, ex.passages[: spec.top_k], ex.meta))
    return out
