"""CR of an EXIT run at other thresholds, from its records alone (no classifier call).

Question answered: which threshold gives zero-shot SmolLM2 on EXIT's prompt the papers' CR (0.35; the withdrawn
``exit_zeroshot``); figures in methods/exit/README.md ("Zero-shot SmolLM2").

``python -m research.exit.curve <run folder> [--thresholds 0.3 0.35 0.5]`` re-splits each example's passages
as ``methods.exit.method`` does, takes the sentence scores (P(Yes)) the run recorded in ``meta.scores``, and prints the
compression ratio (ratio of sums, the generator's tokenizer) and the number of examples left empty at each
threshold. It reproduces the run's own CR at the run's threshold; use it on a train-split run to choose a
threshold for a target CR, not on the test split you report.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.data import DatasetSpec, load_dataset
from harness.prompt import render_documents
from harness.records import PREDICTIONS, SUMMARY, read_jsonl
from harness.text import split_sentences

THRESHOLDS = (0.2, 0.25, 0.3, 0.31, 0.32, 0.33, 0.34, 0.35, 0.37, 0.4, 0.45, 0.5)


def curve(folder: Path, thresholds=THRESHOLDS, count_tokens=None) -> list[dict]:
    summary = json.loads((folder / SUMMARY).read_text())
    d = summary["config"]["dataset"]
    records = read_jsonl(folder / PREDICTIONS)
    examples = {e.id: e for e in load_dataset(DatasetSpec(d["name"], d["path"], int(d["top_k"]), d["rank"], None))}
    if count_tokens is None:
        from harness.lm.loading import load_tokenizer

        tok = load_tokenizer(summary["config"]["generator"]["model"])

        def count_tokens(text: str) -> int:
            return len(tok(text, add_special_tokens=False)["input_ids"]) if text else 0

    scored = []
    for r in records:
        sents = [(pi, s) for pi, p in enumerate(examples[r["id"]].passages) for s in split_sentences(p.text.strip())]
        scores = r["meta"]["scores"]
        if len(sents) != len(scores):
            raise ValueError(f"{folder}: {r['id']} has {len(scores)} scores for {len(sents)} sentences")
        scored.append((r["original_tokens"], list(zip(sents, scores, strict=True))))
    rows = []
    for t in thresholds:
        original = compressed = empty = 0
        for o, pairs in scored:
            by: dict[int, list[str]] = {}
            for (pi, s), x in pairs:
                if x >= t:
                    by.setdefault(pi, []).append(s)
            k = count_tokens(render_documents([" ".join(by[p]) for p in sorted(by)])) if by else 0
            original, compressed, empty = original + o, compressed + k, empty + (k == 0)
        rows.append({"threshold": t, "cr": original / compressed if compressed else None, "empty": empty})
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m research.exit.curve", description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="run folder of an exit variant (summary.json, predictions.jsonl)")
    ap.add_argument("--thresholds", type=float, nargs="+", default=THRESHOLDS)
    a = ap.parse_args(argv)
    n = len(read_jsonl(a.run / PREDICTIONS))
    for r in curve(a.run, a.thresholds):
        cr = f"{r['cr']:8.2f}x" if r["cr"] else "       -"
        print(f"threshold {r['threshold']:.2f}  CR {cr}  empty {r['empty']}/{n}")


if __name__ == "__main__":
    main()
