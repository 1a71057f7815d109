"""``python -m research.compselect.val_split OUT [--artifacts DIR]``

Question answered: which ``clue_context`` the embedded profile installs (``window``; methods/compselect/README.md,
"What is shown of a clue"). Writes ``OUT/<dataset>/val.jsonl.gz``: the shipped train examples that CompSelect's
``splits.json`` holds out for validation (extractor and labelling parts, never trained on), byte for byte as in
the train files, so that the harness runs on them as on a test split:

    RAG_HARNESS_DATA=OUT python -m harness -m method=compselect method.clue_context=sentence,titled,window,passage \
        dataset=nq,triviaqa,hotpotqa dataset.split=val latency.samples=0
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from harness.provenance import REPO_ROOT
from research.compselect.data import DATASETS, DEFAULT_DATA

ARTIFACTS = REPO_ROOT / "methods/compselect/artifacts/embedded"


def validation_ids(artifacts: Path) -> set[str]:
    """The ids of every validation part of ``splits.json``."""
    splits = json.loads((artifacts / "splits.json").read_text())
    return {i for part in splits.values() for i in part["val"]}


def write_val_split(out: Path, data: str = DEFAULT_DATA, artifacts: Path = ARTIFACTS) -> dict[str, int]:
    """Write the validation examples per dataset; returns how many each file holds."""
    ids, counts = validation_ids(artifacts), {}
    for name in DATASETS:
        with gzip.open(Path(data) / name / "train.jsonl.gz", "rt", encoding="utf-8") as f:
            lines = [line for line in f if json.loads(line)["id"] in ids]
        (out / name).mkdir(parents=True, exist_ok=True)
        with gzip.open(out / name / "val.jsonl.gz", "wt", encoding="utf-8") as f:
            f.writelines(lines)
        counts[name] = len(lines)
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m research.compselect.val_split", description=__doc__.split("\n")[2])
    ap.add_argument("out", type=Path)
    ap.add_argument("--artifacts", type=Path, default=ARTIFACTS)
    ap.add_argument("--data", default=DEFAULT_DATA)
    args = ap.parse_args()
    print(json.dumps(write_val_split(args.out, args.data, args.artifacts)))


if __name__ == "__main__":
    main()
