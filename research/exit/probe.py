"""``python -m research.exit.probe <classifier dir> [<classifier dir> ...] [--thresholds 0.5] [--questions N]``

Question answered: which trained EXIT classifier to install (the committed one: 34.4 SubEM at 2.6x against the
previous one's 25.9 at 10.4x, and a 3-epoch one's 33.9 at 3.0x); figures in methods/exit/README.md and the
classifier's ``manifest.json`` (``downstream_validation``).

What EXIT's trained classifiers do downstream on their validation questions (the ``val`` part of the
``labels.jsonl`` beside each classifier: train-split questions held out by ``methods.exit.train``, never test):
the shared generator's SubEM on what each keeps at each threshold, the compression ratio (ratio of sums, the
generator's tokenizer), the share of questions with something kept, and the same generator's SubEM with the full
passages and closed-book, on the same questions. The figures that choose between classifiers (issue: select on
validation only); the paper's threshold 0.5 is the default and the one the method ships with.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from harness.provenance import REPO_ROOT


def _generator():
    from hydra.utils import instantiate

    from harness.config import compose_config

    return instantiate(compose_config("config").generator)


def val_questions(labels: Path, data_root: str, n: int | None) -> list:
    """The validation questions named in ``labels`` (first appearance order), split out as the training run that
    wrote them did (its configuration, from the ``manifest.json`` beside them; the data read from ``data_root``)."""
    from omegaconf import OmegaConf

    from methods.exit.train_data import questions

    ids: list[str] = []
    for line in labels.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if r["part"] == "val" and r["id"] not in ids:
            ids.append(r["id"])
    cfg = OmegaConf.create(json.loads((labels.parent / "manifest.json").read_text(encoding="utf-8"))["config"])
    cfg.data.root = data_root
    _, val, _ = questions(cfg)
    by_id = {e.id: e for e in val}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise ValueError(f"{labels}: {len(missing)} validation ids not among this data's held-out questions")
    chosen = [by_id[i] for i in ids]
    return chosen[:n] if n else chosen


def main(argv: list[str] | None = None) -> dict:
    from harness.metrics import subem
    from harness.protocols import MethodEnv
    from methods.exit.method import Exit

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("classifiers", nargs="+")
    ap.add_argument("--thresholds", default="0.5")
    ap.add_argument("--questions", type=int, default=None, help="the first N validation questions (default all)")
    ap.add_argument("--data", default=os.environ.get("RAG_HARNESS_DATA", str(REPO_ROOT.parent / "shared" / "data")))
    ap.add_argument("--encoder", default="embedded:all-minilm-l6-v2")
    args = ap.parse_args(argv)

    gen = _generator()
    labels = Path(args.classifiers[0]).parent / "labels.jsonl"
    examples = val_questions(labels, args.data, args.questions)
    original = sum(gen.count_tokens(p.text) for e in examples for p in e.passages)

    def score(documents: list[list[str]]) -> float:
        outs = gen.generate([gen.messages(e.question, d) for e, d in zip(examples, documents, strict=True)])
        return round(
            100 * sum(bool(subem(o.answer, e.answers)) for o, e in zip(outs, examples, strict=True)) / len(examples), 2
        )

    report: dict = {
        "questions": len(examples),
        "labels": str(labels),
        "full": score([[p.text for p in e.passages] for e in examples]),
        "naive": score([[] for _ in examples]),
        "classifiers": {},
    }
    for path in args.classifiers:
        rows = {}
        for t in (float(x) for x in args.thresholds.split(",")):
            c = Exit(args.encoder, adapter=path, kind="cross_encoder", max_length=256, threshold=t)
            c.bind(MethodEnv(count_tokens=gen.count_tokens))
            comps = c.compress_batch(examples)
            kept = sum(gen.count_tokens(d) for comp in comps for d in comp.documents)
            rows[str(t)] = {
                "subem": score([comp.documents for comp in comps]),
                "cr": round(original / kept, 2) if kept else None,
                "kept_something": round(sum(bool(comp.documents) for comp in comps) / len(comps), 3),
            }
        report["classifiers"][path] = rows
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    from harness.lm import release

    main()
    release()  # engines stopped and their shared memory removed (os._exit skips the at-exit hook)
    os._exit(0)  # the vLLM engine's shutdown can hang a script's exit
