"""``python -m methods.compselect.truncator_probe <adapter dir> <labels jsonl> [--data DIR] [--output index]``

How often a truncator adapter keeps clues: it runs the truncator on the ranked clue lists of a
``truncator_labels.jsonl`` (written by ``methods.compselect.train``; ``--output index`` for a truncator trained on
K, FineFilter's) and prints the predicted K against the labels' K (counts, and agreement on "keep something" vs
"keep nothing"). The figures behind the table in ``methods/compselect/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path

from harness.provenance import REPO_ROOT

DATASETS = ("nq", "triviaqa", "hotpotqa")  # the training sets; only their questions are read


def main(argv: list[str] | None = None) -> dict:
    from harness.data import DatasetSpec, load_dataset
    from harness.lm import get_lm
    from harness.models import resolve
    from methods.compselect.parsing import parse_truncation
    from methods.compselect.prompts import truncator_messages

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("adapter")
    ap.add_argument("labels")
    ap.add_argument("--data", default=os.environ.get("RAG_HARNESS_DATA") or str(REPO_ROOT.parent / "shared/data"))
    ap.add_argument("--lm", default="embedded:smollm2-135m-instruct")
    ap.add_argument("--output", choices=("text", "index"), default="text", help="what the truncator was trained on")
    ap.add_argument("--engine", choices=("vllm", "transformers"), default="vllm")
    args = ap.parse_args(argv)
    rows = [json.loads(line) for line in Path(args.labels).read_text().splitlines() if line.strip()]
    questions = {}
    for name in DATASETS:
        path = Path(args.data) / name / "train.jsonl.gz"
        questions.update({e.id: e.question for e in load_dataset(DatasetSpec(name, str(path), 5, "none", None))})
    lm = get_lm(args.lm, engine=args.engine, adapter=args.adapter)
    prompts = [truncator_messages(questions[r["id"]], r["ranked"]) for r in rows]
    outs = [o.text.strip() for o in lm.generate(prompts, 128)]
    ks = [parse_truncation(o, r["ranked"], args.output) for o, r in zip(outs, rows, strict=True)]
    report = {
        "lm": resolve(args.lm).describe()["source"],
        "questions": len(rows),
        "predicted_k": dict(sorted(Counter(ks).items())),
        "label_k": dict(sorted(Counter(r["k"] for r in rows).items())),
        "agree_keep_or_not": sum((k > 0) == (r["k"] > 0) for k, r in zip(ks, rows, strict=True)),
    }
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
