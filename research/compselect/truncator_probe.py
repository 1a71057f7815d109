"""``python -m research.compselect.truncator_probe <adapter dir> <labels jsonl> [--part val] [--thresholds 0.5,0.7]``

Question answered: whether a truncator keeps anything, and which ``empty_threshold`` to install (1.0 for the text
truncator, 0.6 for the index one, by validation SubEM); figures in methods/compselect/README.md ("Truncator
decision") and the comments of ``conf/profile/embedded.yaml``.

How often a truncator adapter keeps clues, on the ranked clue lists of a ``truncator_labels.jsonl`` (written by
``methods.compselect.train``; ``--output index`` for a truncator trained on K, FineFilter's). ``--part val``
keeps the labelling questions of that part of the ``splits.json`` beside the labels folder (select on ``val``,
never on test questions). Without ``--thresholds`` the truncator's greedy output decides (the paper); with
them, each threshold of ``truncator_decision`` is reported, with ``--subem`` also the shared generator's SubEM
on the kept prefixes (the embedded generator of ``conf/train/compselect.yaml``): the figures that choose
``models.compselect.empty_threshold`` (methods/compselect/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path

from research.compselect.data import DEFAULT_DATA, train_examples


def _generator():
    from hydra.utils import instantiate

    from harness.config import compose_config

    return instantiate(compose_config("train/compselect").generator)


def _report(ks: list[int], rows: list[dict]) -> dict:
    return {
        "predicted_k": dict(sorted(Counter(ks).items())),
        "kept_something": round(sum(k > 0 for k in ks) / max(len(ks), 1), 3),
        "agree_keep_or_not": sum((k > 0) == (r["k"] > 0) for k, r in zip(ks, rows, strict=True)),
    }


def main(argv: list[str] | None = None) -> dict:
    from harness.lm import get_lm
    from harness.lm.models import resolve
    from methods.compselect.parsing import parse_truncation
    from methods.compselect.prompts import truncator_messages
    from methods.compselect.truncator import truncator_decision

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("adapter")
    ap.add_argument("labels")
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--lm", default="embedded:smollm2-135m-instruct")
    ap.add_argument("--dtype", default="auto", help="as models.compselect.dtype")
    ap.add_argument("--output", choices=("text", "index"), default="text", help="what the truncator was trained on")
    ap.add_argument("--engine", choices=("vllm", "transformers"), default="vllm")
    ap.add_argument("--part", choices=("train", "val"), help="only the labelling questions of this split part")
    ap.add_argument("--thresholds", help="comma-separated empty_threshold values (truncator_decision)")
    ap.add_argument("--subem", action="store_true", help="also the generator's SubEM on the kept prefixes")
    args = ap.parse_args(argv)
    rows = [json.loads(line) for line in Path(args.labels).read_text().splitlines() if line.strip()]
    if args.part:
        splits = json.loads((Path(args.labels).parent.parent / "splits.json").read_text())
        part = set(splits["labels"][args.part])
        rows = [r for r in rows if r["id"] in part]
    examples = train_examples(args.data)
    lm = get_lm(args.lm, engine=args.engine, dtype=args.dtype, adapter=args.adapter)
    prompts = [truncator_messages(examples[r["id"]].question, r["ranked"]) for r in rows]
    runs: dict[str, list[int]] = {}
    if args.thresholds:
        for t in (float(x) for x in args.thresholds.split(",")):
            runs[str(t)] = [d.k for d in truncator_decision(lm, prompts, [r["ranked"] for r in rows], args.output, t)]
    else:
        outs = [o.text.strip() for o in lm.generate(prompts, 128)]
        runs["greedy"] = [parse_truncation(o, r["ranked"], args.output) for o, r in zip(outs, rows, strict=True)]
    report = {
        "lm": resolve(args.lm).describe()["source"],
        "questions": len(rows),
        "label_k": dict(sorted(Counter(r["k"] for r in rows).items())),
        "decisions": {name: _report(ks, rows) for name, ks in runs.items()},
    }
    if args.subem:
        from methods.compselect.train_verdicts import Labeller

        labeller = Labeller(_generator())

        def subem(ks: list[int]) -> float:
            items = [
                (examples[r["id"]].question, r["ranked"][:k], examples[r["id"]].answers)
                for r, k in zip(rows, ks, strict=True)
            ]
            return round(100 * sum(labeller.correct(items)) / max(len(items), 1), 2)

        report["subem"] = {
            "labels": subem([r["k"] for r in rows]),
            "none": subem([0] * len(rows)),
            "all": subem([len(r["ranked"]) for r in rows]),
            **{name: subem(ks) for name, ks in runs.items()},
        }
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    from harness.lm import release

    main()
    sys.stdout.flush()
    release()  # engines stopped and their shared memory removed (os._exit skips the at-exit hook)
    os._exit(0)  # the vLLM engine's shutdown can hang the interpreter's exit after the report is out
