"""Oracle CI labels for CSM-st training (paper 002, section 4.2), cached in a JSONL keyed by a hash.

A label row holds one example's unit texts and their CI values under the configured generator. The key is the
SHA-256 of everything the values depend on: the scorer's model (ref, weights hash, dtype), the full-context
prompt (question, documents, template), the unit texts and which were dropped, and the aliases scored; a
re-run reads the cache and computes nothing, and rows of other generators or prompts never collide.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from harness.influence import UnitList, ci_values, documents, gold_answers
from harness.prompt import messages_of
from harness.protocols import AnswerScorer
from harness.types import Example

log = logging.getLogger(__name__)
VERSION = "ci-labels-v1"


def scorer_identity(scorer: Any) -> dict[str, Any]:
    """Model ref, weights hash and dtype of a scorer, from its ``describe()`` when it has one."""
    d = scorer.describe() if hasattr(scorer, "describe") else {"name": type(scorer).__name__}
    model = d.get("model")
    if isinstance(model, dict):
        model = {k: model.get(k) for k in ("ref", "sha256")}
    return {"model": model, "dtype": d.get("dtype"), "name": d.get("name")}


def label_key(
    scorer_id: dict, ex: Example, ul: UnitList, max_answers: int | None, with_titles: bool, ask: Callable | None = None
) -> str:
    """The label cache's key: scorer, the full-context prompt as the scorer is asked it (its template: rows of
    another prompt are never replayed), units and answers."""
    ask = ask or messages_of(None)
    payload = {
        "v": VERSION,
        "scorer": scorer_id,
        "prompt": ask(ex.question, documents(ex, ul, ul.active(), with_titles)),
        "units": ul.texts,
        "dropped": sorted(ul.dropped.items()),
        "answers": gold_answers(ex.answers, max_answers),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class LabelCache:
    """Append-only JSONL of label rows, read into memory by key."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.rows: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    row = json.loads(line)
                    self.rows[row["key"]] = row

    def add(self, rows: Sequence[dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
                self.rows[row["key"]] = row


def _chunks(items: Sequence, size: int) -> Iterator[Sequence]:
    for i in range(0, len(items), max(size, 1)):
        yield items[i : i + size]


def label(
    scorer: AnswerScorer,
    items: Sequence[tuple[Example, UnitList]],
    cache: LabelCache,
    max_answers: int | None = 5,
    with_titles: bool = False,
    chunk: int = 4,
    extra: Sequence[dict[str, Any]] | None = None,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Label rows for ``items`` in order, computing (``chunk`` examples per scorer call) only missing ones."""
    from tqdm.auto import tqdm

    sid = scorer_identity(scorer)
    ask = messages_of(scorer)
    keys = [label_key(sid, ex, ul, max_answers, with_titles, ask) for ex, ul in items]
    todo = [i for i, k in enumerate(keys) if k not in cache.rows]
    log.info("CI labels: %d cached, %d to compute (%s)", len(keys) - len(todo), len(todo), cache.path)
    with tqdm(total=len(todo), desc="CI labels", unit="ex", disable=not progress) as bar:
        for part in _chunks(todo, chunk):
            results = ci_values(scorer, [items[i] for i in part], max_answers, with_titles, ask)
            rows = []
            for i, res in zip(part, results, strict=True):
                ex, ul = items[i]
                rows.append(
                    {
                        "key": keys[i],
                        "id": ex.id,
                        "question": ex.question,
                        "answers": res.answers,
                        "units": ul.texts,
                        "unit_ids": [[u.passage, u.sentence] for u in ul.units],
                        "dropped": {str(j): w for j, w in ul.dropped.items()},
                        "values": res.values,
                        "full_loss": res.full_loss,
                        "loo_losses": res.loo_losses,
                        "scorer": sid,
                        **((extra[i] if extra else None) or {}),
                    }
                )
            cache.add(rows)
            bar.update(len(part))
    return [cache.rows[k] for k in keys]
