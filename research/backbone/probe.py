"""Do the prompted compressors work on another backbone? (issue 94, item 2: prompts and caps checked on train
questions before any long run)

Reads the probe runs: each prompted or scoring method (RECOMP-abs, Refiner, EDC2, ``compselect_direct``,
LongLLMLingua, Selective-Context) on the first questions of a seeded shuffle of each dataset's *train* split, under
the default backbone (SmolLM2-135M) and ``backbone=qwen05b``, read by the headline generator::

    python -m harness -m backbone=qwen05b \\
        method=recomp_abs,refiner,edc2,compselect_direct,longllmlingua,selective_context \\
        dataset=nq,triviaqa,hotpotqa dataset.split=train dataset.sample=shuffled limit=20 latency.samples=0 \\
        results_dir=results-backbone-probe
    (the same without backbone=qwen05b for SmolLM2)
    python -m research.backbone.probe results-backbone-probe --samples 20 --out research/backbone/probe-n20.csv

Per (backbone, method, dataset): n, CR, the mean compressed tokens, ``kept`` (the context holds a gold answer,
SubEM's rule), the reader's SubEM, ``empty`` (nothing kept), ``scaffold`` (the context opens like an assistant's
reply or repeats the compression prompt's headings: ``SCAFFOLD``), and EDC2's ``fallback`` (no summary survived,
every passage shown). ``--samples K`` writes each (backbone, method)'s first K contexts, one dataset after another,
to ``<out>.md`` for reading.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pandas as pd

from harness.metrics import subem
from harness.records import SUMMARY
from leaderboard.collect import read_records

# an assistant's preamble or the compression prompt's own headings in what should be passage text
SCAFFOLD = re.compile(
    r"^\s*(sure|certainly|here (is|are)|the (relevant|extracted)|summary:|answer:)|##|instruction|summarized docs|"
    r"documents?:\s*$",
    re.I | re.M,
)


def backbone_of(summary: dict) -> str:
    switch = (summary.get("backbone") or {}).get("switch")
    return switch or "smollm2-135m-instruct"


def figures(records: list[dict], summary: dict) -> dict:
    n = len(records)
    share = lambda xs: 100 * sum(xs) / max(n, 1)  # noqa: E731
    metas = [r.get("meta") or {} for r in records]
    edc2 = str(summary["method"]).startswith("edc2")  # its variants fall back to every passage too
    return {
        "backbone": backbone_of(summary),
        "method": summary["method"],
        "dataset": summary["dataset"],
        "n": n,
        "cr": summary.get("cr"),
        "tokens": sum(r.get("compressed_tokens") or 0 for r in records) / max(n, 1),
        "kept": share(subem(r["context"], r["answers"]) for r in records),
        "subem": share(subem(r["prediction"], r["answers"]) for r in records),
        "empty": share(not r["context"].strip() for r in records),
        "scaffold": share(bool(SCAFFOLD.search(r["context"])) for r in records),
        "fallback": share(bool(m.get("fallback")) for m in metas) if edc2 else None,
    }


def runs(root: Path) -> list[tuple[dict, list[dict]]]:
    out = []
    for path in sorted(root.rglob(SUMMARY)):
        summary = json.loads(path.read_text())
        out.append((summary, read_records(path.parent, summary.get("n"))))
    return out


def samples(found: list[tuple[dict, list[dict]]], k: int) -> str:
    """Each (backbone, method)'s first ``k`` contexts over the datasets, for reading."""
    lines = []
    for summary, records in sorted(found, key=lambda x: (x[0]["method"], backbone_of(x[0]), x[0]["dataset"])):
        lines.append(f"\n## {summary['method']} on {backbone_of(summary)}, {summary['dataset']}\n")
        for r in records[:k]:
            context = r["context"].replace("\n", " / ")[:600]
            lines.append(f"- **{r['question']}** (gold {r['answers'][:2]}; read: {r['prediction']!r})\n  > {context}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--samples", type=int, default=0)
    args = ap.parse_args(argv)
    found = runs(args.root)
    df = pd.DataFrame([figures(recs, s) for s, recs in found]).sort_values(["method", "dataset", "backbone"])
    print(df.round(1).to_string(index=False))
    if args.out:
        df.round(2).to_csv(args.out, index=False)
        if args.samples:
            args.out.with_suffix(".md").write_text(samples(found, args.samples))


if __name__ == "__main__":
    main()
