"""Load and validate QA datasets with retrieved passages, before any model is loaded.

Two formats are read:
- JSON Lines (``.jsonl`` or ``.jsonl.gz``): one object per line with ``id`` (optional), ``question``,
  ``answers`` and ``ctxs`` (a list of objects with ``text`` and optional ``title``, ``score``), the schema of
  ``shared/data``.
- DPR retriever results (``.json`` or ``.json.gz``): one JSON list of objects with ``question``,
  ``answers`` and ``ctxs``, as written by DPR's ``dense_retriever.py``; ids are ``<file stem>-<index>``.

Every problem is reported as ``DatasetError`` naming the file, the line (or list item) and the field: bytes that
are not UTF-8 (a leading UTF-8 BOM is accepted), a truncated or corrupt ``.gz``, invalid JSON, a bad field.

Gold answers: an alias that normalises to the empty string under the SQuAD normalisation of the metrics
(``"the"``, ``"*"``, ``".a"``) would make SubEM match every prediction, so it is dropped, with one warning per
file naming the lines. An example left with no alias is an error, unless ``skip_unanswerable`` (config
``dataset.skip_unanswerable=true``) skips it; ``load_dataset_report`` says how many were skipped.
"""

from __future__ import annotations

import gzip
import json
import logging
import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from harness.metrics import normalize
from harness.text import bm25_scores, rank_desc
from harness.types import Example, Passage
from harness.validate import TOP_LEVEL, ConfigError, check

log = logging.getLogger(__name__)

RANKINGS = ("none", "bm25")
SAMPLES = ("first", "shuffled")
_READ_ERRORS = (OSError, EOFError, zlib.error)  # gzip.BadGzipFile is an OSError
_NAMED = 5  # lines named in a warning before "and N more"


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
    skip_unanswerable: bool = False  # skip (not fail on) examples with no gold answer left after normalisation
    sample: str = "first"  # which ``limit`` examples: the split's first, or the first of a seeded permutation
    seed: int = 0  # the permutation's seed (``sample="shuffled"`` only)


@dataclass(frozen=True)
class LoadedDataset:
    """``load_dataset_report``'s result: the examples, and the ids of the examples skipped among the part of
    the file the examples were taken from (``skip_unanswerable``)."""

    examples: list[Example]
    skipped: list[str] = field(default_factory=list)


def _open_binary(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")


def _read_error(path: Path, done: int, e: BaseException) -> DatasetError:
    """One line naming the file (and the last line read whole) for an I/O or gzip failure."""
    at = f"after line {done}: " if done else ""
    if isinstance(e, gzip.BadGzipFile) and not done:
        why = f"not a valid gzip file ({e})"
    elif isinstance(e, EOFError | zlib.error | gzip.BadGzipFile):
        why = f"gzip data truncated or corrupt ({e}); is the file complete?"
    else:
        why = f"cannot read ({type(e).__name__}: {e})"
    return DatasetError(f"{path}: {at}{why}")


def _decode(path: Path, data: bytes, first_line: int) -> str:
    """UTF-8 text of ``data`` (a leading BOM dropped when it starts the file); a bad byte names its line."""
    try:
        return data.decode("utf-8-sig" if first_line == 1 else "utf-8")
    except UnicodeDecodeError as e:
        line = first_line + data.count(b"\n", 0, e.start)
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise DatasetError(
            f"{path}: line {line}: not valid UTF-8 (byte 0x{data[e.start]:02x} at column {col}); "
            "re-encode the file as UTF-8"
        ) from None


def _why(e: BaseException) -> str:
    """A JSON parse failure in a few words (``JSONDecodeError.msg``; too deep nesting, too long numbers)."""
    return e.msg if isinstance(e, json.JSONDecodeError) else f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"


def _records(path: Path) -> Iterator[tuple[str, Any]]:
    """Yield (location, raw object) pairs; location is ``line N`` or ``item N``."""
    name = path.name.removesuffix(".gz")
    if name.endswith(".jsonl"):
        lineno = 0
        try:
            with _open_binary(path) as f:
                for lineno, raw in enumerate(f, start=1):
                    line = _decode(path, raw, lineno)
                    if not line.strip():
                        continue
                    try:
                        obj = json.loads(line)
                    except (ValueError, RecursionError) as e:
                        raise DatasetError(f"{path}: line {lineno}: not valid JSON ({_why(e)})") from None
                    yield f"line {lineno}", obj
        except _READ_ERRORS as e:
            raise _read_error(path, lineno, e) from None
    elif name.endswith(".json"):
        try:
            with _open_binary(path) as f:
                raw = f.read()
        except _READ_ERRORS as e:
            raise _read_error(path, 0, e) from None
        try:
            data = json.loads(_decode(path, raw, 1))
        except (ValueError, RecursionError) as e:
            at = f"line {e.lineno}: " if isinstance(e, json.JSONDecodeError) else ""
            raise DatasetError(f"{path}: {at}not valid JSON ({_why(e)})") from None
        if not isinstance(data, list):
            raise DatasetError(f"{path}: line 1: expected a JSON list of questions (DPR retriever results)")
        for i, obj in enumerate(data):
            yield f"item {i}", obj
    else:
        raise DatasetError(f"{path}: unknown format; expected .jsonl, .jsonl.gz, .json or .json.gz")


def _parse(path: Path, where: str, obj: Any, default_id: str) -> tuple[Example, list[str]]:
    """The example of one record, and the gold aliases dropped from it (those normalising to "")."""

    def bad(field: str, why: str) -> DatasetError:
        return DatasetError(f"{path}: {where}: field '{field}': {why}")

    if not isinstance(obj, dict):
        raise DatasetError(f"{path}: {where}: expected a JSON object, got {type(obj).__name__}")
    q = obj.get("question")
    if not isinstance(q, str) or not q.strip():
        raise bad("question", "missing or empty")
    answers = obj.get("answers")
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
        raise bad("answers", "must be a non-empty list of strings")
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
    kept = tuple(a.strip() for a in answers if normalize(a))
    dropped = [a for a in answers if not normalize(a)]
    return Example(str(ex_id), q.strip(), kept, tuple(passages), meta), dropped


def _named(items: list[str]) -> str:
    more = f"; and {len(items) - _NAMED} more" if len(items) > _NAMED else ""
    return "; ".join(items[:_NAMED]) + more


def _read(path: Path, skip_unanswerable: bool) -> list[tuple[str, Example]]:
    """Every example of a file in order, with its location; one left with no gold answer has ``answers == ()``
    (only when ``skip_unanswerable``, otherwise it is an error)."""
    if not path.is_file():
        raise DatasetError(
            f"{path}: no such file (the default data root is ../shared/data beside the repository: set "
            "RAG_HARNESS_DATA to the folder holding <dataset>/<split>.jsonl.gz, or pass dataset.path=<file>)"
        )
    rows: list[tuple[str, Example]] = []
    seen: dict[str, str] = {}
    dropped: list[str] = []
    n_dropped = 0
    skipped: list[str] = []
    stem = path.name.split(".")[0]
    for idx, (where, obj) in enumerate(_records(path)):
        ex, empty = _parse(path, where, obj, default_id=f"{stem}-{idx}")
        if ex.id in seen:
            raise DatasetError(f"{path}: {where}: field 'id': duplicate id {ex.id!r} (first at {seen[ex.id]})")
        seen[ex.id] = where
        aliases = ", ".join(map(repr, empty))
        if not ex.answers:
            if not skip_unanswerable:
                raise DatasetError(
                    f"{path}: {where}: field 'answers': no usable gold answer: every alias ({aliases}) normalises "
                    "to the empty string under SQuAD normalisation; fix the file, or set "
                    "dataset.skip_unanswerable=true to skip such examples"
                )
            skipped.append(f"{where} (id {ex.id}: {aliases})")
        elif empty:
            n_dropped += len(empty)
            dropped.append(f"{where} (id {ex.id}: {aliases})")
        rows.append((where, ex))
    if dropped:
        log.warning(
            "%s: dropped %d gold answer alias(es) that normalise to the empty string under SQuAD normalisation "
            "(they would match any prediction) at %s",
            path,
            n_dropped,
            _named(dropped),
        )
    if skipped:
        log.warning(
            "%s: skipping %d example(s) with no usable gold answer (dataset.skip_unanswerable=true): %s",
            path,
            len(skipped),
            _named(skipped),
        )
    return rows


def read_examples(path: str | Path, skip_unanswerable: bool = False) -> list[Example]:
    """Read and validate every example of a file; fails on the first problem, naming file, line, field.
    With ``skip_unanswerable``, examples left with no gold answer are left out instead of failing."""
    return [ex for _, ex in _read(Path(path), skip_unanswerable) if ex.answers]


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


def permutation(n: int, seed: int) -> list[int]:
    """A seeded random permutation of ``range(n)``: Fisher-Yates driven by ``random.Random(seed).random()``,
    the one part of the ``random`` module whose sequence Python guarantees across versions (``shuffle`` and
    ``randrange`` may change), so a shuffled sample is the same on every Python and platform."""
    rng = random.Random(seed)
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = min(int(rng.random() * (i + 1)), i)
        order[i], order[j] = order[j], order[i]
    return order


def load_dataset_report(spec: DatasetSpec) -> LoadedDataset:
    """Read, validate, order (``sample``: ``first`` keeps the file order, ``shuffled`` takes the seeded
    ``permutation`` of the whole split), cut to the first ``limit`` usable examples, rank, and keep ``top_k``
    passages of each; also the ids of the examples skipped (``skip_unanswerable``) before the cut."""
    if spec.rank not in RANKINGS:
        raise ConfigError(f"dataset.rank={spec.rank!r}: must be one of {', '.join(RANKINGS)}")
    if spec.sample not in SAMPLES:
        raise ConfigError(f"dataset.sample={spec.sample!r}: must be one of {', '.join(SAMPLES)}")
    check("dataset.top_k", spec.top_k, TOP_LEVEL["dataset.top_k"])
    check("dataset.seed", spec.seed, TOP_LEVEL["dataset.seed"])
    check("limit", spec.limit, TOP_LEVEL["limit"])
    examples: list[Example] = []
    skipped: list[str] = []
    rows = _read(Path(spec.path), spec.skip_unanswerable)
    if spec.sample == "shuffled":
        rows = [rows[i] for i in permutation(len(rows), spec.seed)]
    for _, ex in rows:
        if spec.limit is not None and len(examples) >= spec.limit:
            break
        if ex.answers:
            examples.append(ex)
        else:
            skipped.append(ex.id)
    if not examples:
        raise DatasetError(f"{spec.path}: no example to evaluate: {_why_none(rows)}")
    out = []
    for ex in examples:
        ex = rank_passages(ex, spec.rank)
        out.append(Example(ex.id, ex.question, ex.answers, ex.passages[: spec.top_k], ex.meta))
    return LoadedDataset(out, skipped)


def _why_none(rows: list) -> str:
    if not rows:
        return "the file holds no example"
    return f"every one of its {len(rows)} examples has no usable gold answer and was skipped"


def load_dataset(spec: DatasetSpec) -> list[Example]:
    """``load_dataset_report(spec).examples``."""
    return load_dataset_report(spec).examples
