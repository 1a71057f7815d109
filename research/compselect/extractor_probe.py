"""``python -m research.compselect.extractor_probe <adapter dir|none> <splits.json> [--part val]``

Question answered: which extractor (epochs, target padding) finds an answer-bearing clue most often on held-out
labelling questions (the fourth set's: Recall-1 61.5 against the third set's 56.3); figures in
methods/compselect/README.md and ``methods/compselect/artifacts/embedded/set4_training/``.

An extractor's Recall-1 (000 Table 6: the extracted clues contain a gold answer, on the questions whose passages
hold one) and its clue count, overall and per dataset, on the labelling questions of one part of a training run's
``splits.json`` (``val`` by default: compare extractors there, never on test questions). ``none``: the un-tuned LM.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path

from research.compselect.data import DEFAULT_DATA, train_examples_by_dataset


def main(argv: list[str] | None = None) -> dict:
    from harness.lm import get_lm
    from methods.compselect.cascade import cascade
    from methods.compselect.method import extractor_input
    from methods.compselect.parsing import map_clues

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("adapter")
    ap.add_argument("splits")
    ap.add_argument("--part", choices=("train", "val"), default="val")
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--lm", default="embedded:smollm2-135m-instruct")
    ap.add_argument("--dtype", default="auto", help="as models.compselect.dtype")
    ap.add_argument("--max-input-tokens", type=int, default=1024)
    ap.add_argument("--rank", default="nq=none,triviaqa=none,hotpotqa=bm25", help="as the training data.rank")
    args = ap.parse_args(argv)
    rank = dict(x.split("=") for x in args.rank.split(","))
    ids = json.loads(Path(args.splits).read_text())["labels"][args.part]
    by_dataset = train_examples_by_dataset(args.data, rank)
    examples = {i: e for exs in by_dataset.values() for i, e in exs.items()}
    dataset_of = {i: d for d, exs in by_dataset.items() for i in exs}
    adapter = None if args.adapter == "none" else args.adapter
    lm = get_lm(args.lm, dtype=args.dtype, adapter=adapter)
    chosen = [examples[i] for i in ids]
    inputs = [extractor_input(lm, e, args.max_input_tokens) for e in chosen]
    outs = [o.text for o in lm.generate([x.messages for x in inputs], 256)]
    clues = [map_clues(o, x.sentences[: x.shown])[0] for o, x in zip(outs, inputs, strict=True)]
    flags = [
        cascade([p.text for p in e.passages], [c.text for c in cl], [], [], e.answers)
        for e, cl in zip(chosen, clues, strict=True)
    ]
    report = {"adapter": args.adapter, **_recall(flags, clues)}
    datasets = [dataset_of[e.id] for e in chosen]
    report["by_dataset"] = {
        d: _recall(
            [f for f, x in zip(flags, datasets, strict=True) if x == d],
            [c for c, x in zip(clues, datasets, strict=True) if x == d],
        )
        for d in dict.fromkeys(datasets)
    }
    print(json.dumps(report, indent=1))
    return report


def _recall(flags: list[dict], clues: list[list]) -> dict:
    eligible = [f for f in flags if f["eligible"]]
    return {
        "questions": len(flags),
        "eligible": len(eligible),
        "recall1": round(100 * sum(f["recall1"] for f in eligible) / max(len(eligible), 1), 1),
        "clues": dict(sorted(Counter(len(c) for c in clues).items())),
    }


if __name__ == "__main__":
    from harness.lm import release

    main()
    sys.stdout.flush()
    release()  # engines stopped and their shared memory removed (os._exit skips the at-exit hook)
    os._exit(0)  # the vLLM engine's shutdown can hang the interpreter's exit after the report is out
