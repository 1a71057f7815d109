"""The archive's context texts: every distinct compressed context of the archived runs once, found by the hash
their records carry (``context_sha1``), so that ``export-contexts`` (and through its file ``contexts=``) works from a
clone of the repository, with no compressor run again.

``<archive>/contexts/<dataset>.jsonl.gz``: one line per distinct context, ``{"sha1": <the records' 12 hex digits>,
"context": <the text as the generator was given it>}``, plus ``"documents"`` where the text does not split back
into the documents it was rendered from (``harness.reuse.split_documents``). An archive appends what it does not
hold yet as one more gzip member, so the file only grows and a re-archive adds nothing. Nothing here loads a
model.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.reuse import split_documents

STORE = "contexts"


class StoreClash(RuntimeError):
    """Two different texts under one 12-digit hash (one line naming the file and the hash)."""


def store_file(archive: str | Path, dataset: str) -> Path:
    """Where the archive ``archive`` keeps the contexts of ``dataset``."""
    return Path(archive) / STORE / f"{dataset}.jsonl.gz"


def held(archive: str | Path, dataset: str) -> dict[str, dict[str, Any]]:
    """The contexts the archive holds for ``dataset``: hash -> its line (empty when none)."""
    path = store_file(archive, dataset)
    if not path.is_file():
        return {}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return {line["sha1"]: line for line in map(json.loads, f) if line}


def sha1(text: str) -> str:
    """The hash a slimmed record keeps of its context (``harness.records.slim_record``)."""
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _line(record: dict[str, Any]) -> dict[str, Any]:
    text = record.get("context") or ""
    line: dict[str, Any] = {"sha1": sha1(text), "context": text}
    documents = record.get("documents")
    if documents is not None:
        try:
            same = split_documents(text) == list(documents)
        except ValueError:
            same = False
        if not same:
            line["documents"] = list(documents)
    return line


def add(archive: str | Path, dataset: str, records: Iterable[dict[str, Any]]) -> int:
    """Append the contexts of ``records`` (those holding their text) that the archive does not hold yet; returns
    how many were added. ``StoreClash`` when a text differs from the one held under its hash."""
    have = held(archive, dataset)
    new: dict[str, dict[str, Any]] = {}
    for record in records:
        if "context" not in record:
            continue
        line = _line(record)
        old = have.get(line["sha1"]) or new.get(line["sha1"])
        if old is None:
            new[line["sha1"]] = line
        elif old["context"] != line["context"]:
            raise StoreClash(f"{store_file(archive, dataset)}: two contexts under the hash {line['sha1']}")
    if new:
        path = store_file(archive, dataset)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in new.values())
        with path.open("ab") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:  # the same bytes again
            f.write(text.encode("utf-8"))
    return len(new)


def documents_of(line: dict[str, Any]) -> list[str] | None:
    """The documents of a held context as the generator was given them; None for a text that is no rendering of
    documents and kept none (a hand-made record's)."""
    if "documents" in line:
        return line["documents"]
    try:
        return split_documents(line["context"])
    except ValueError:
        return None


def fill(records: list[dict[str, Any]], archive: str | Path, dataset: str) -> list[dict[str, Any]]:
    """``records`` with the texts (``context``, ``documents``) the archive holds for those that keep only a hash."""
    if all("context" in r for r in records):
        return records
    store = held(archive, dataset)
    out = []
    for r in records:
        line = None if "context" in r else store.get(r.get("context_sha1", ""))
        if line is None:
            out.append(r)
            continue
        docs = documents_of(line)
        out.append({**r, "context": line["context"], **({"documents": docs} if docs is not None else {})})
    return out
