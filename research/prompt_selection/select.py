"""Which prompt and answer rule should the embedded profile's generator use? (issue: answers, not echoes)

Reads the prompt-selection runs: every candidate template of ``harness.prompt.PROMPTS`` x ``full`` and
``oracle_sentences`` x NQ / TriviaQA / HotpotQA, on validation questions cut from the shipped *train* splits (the
first questions of a seeded shuffle, seed 0; HotpotQA's train split holds 100), in two stages (the CPU here
runs ~3 s a question with a full top-5 context): every candidate on the first 50 questions, then the finalists
extended to 100 in the same run folders (a larger ``limit`` extends a run)::

    python -m harness -m method=full,oracle_sentences dataset=nq,triviaqa,hotpotqa dataset.split=train \\
        dataset.sample=shuffled limit=50 latency.samples=0 generator.prompt=<every candidate> generator.answer=paper \\
        results_dir=results-prompt-selection

Each run keeps the raw reply (up to ``max_new_tokens`` 32), so every answer rule is scored from the same
greedy tokens: ``paper`` (the whole reply) and ``first_line`` (its first non-empty line: greedy decoding that
stops at a newline gives that line). ``capped`` counts first lines the token cap cut off, the only answers a
larger ``max_new_tokens`` could change; ``unlabelled`` is ``first_line`` without a leading ``DocN:`` label.
The rule: echo <= 5 % on every dataset for both contexts, then the highest mean SubEM over the six (dataset,
context) cells; where no candidate passes, the lowest worst-cell echo first (then SubEM). Figures:
``figures-n50.csv`` (stage 1) and ``figures-n100.csv`` (stage 2) beside this file, and docs/models-and-prompts.md, "The
embedded prompt".

``python -m research.prompt_selection.select results-prompt-selection``
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from harness.metrics import ANSWER_RULES, echo, subem
from harness.records import PREDICTIONS, SUMMARY, read_jsonl

MAX_ECHO = 5.0


def default_out(n: int | None) -> Path:
    """Where a stage's figures go: ``figures-n50.csv`` for the screening stage (``--n 50``), else ``-n100``."""
    return Path(__file__).with_name(f"figures-n{n or 100}.csv")


def cells(root: Path, n: int | None = None) -> pd.DataFrame:
    """One row per (prompt, answer rule, dataset, method): n, SubEM, echo and SubEM from echo in percent, over
    each run's first ``n`` records (the first n of the shuffled sample; all when None)."""
    rows = []
    for summary in sorted(root.rglob(SUMMARY)):
        s = json.loads(summary.read_text())
        prompt = s["generator_info"]["prompt"]["name"]
        recs = list({r["id"]: r for r in read_jsonl(summary.parent / PREDICTIONS)}.values())[:n]
        for rule, answer_of in ANSWER_RULES.items():
            answers = [answer_of(r["raw_output"]) for r in recs]
            hits = [subem(a, r["answers"]) for a, r in zip(answers, recs, strict=True)]
            echoes = [echo(a, r["question"], r["context"]) for a, r in zip(answers, recs, strict=True)]
            rows.append(
                {
                    "prompt": prompt,
                    "answer": rule,
                    "dataset": s["dataset"],
                    "method": s["method"],
                    "n": len(recs),
                    "subem": 100 * sum(hits) / len(recs),
                    "echo": 100 * sum(echoes) / len(recs),
                    "subem_from_echo": 100 * sum(h for h, e in zip(hits, echoes, strict=True) if e) / len(recs),
                    "capped": 100 * sum(capped(r) for r in recs) / len(recs) if rule == "first_line" else None,
                }
            )
    return pd.DataFrame(rows)


def capped(record: dict) -> bool:
    """The reply's first line ran into the token cap (a longer cap could have changed the answer)."""
    lines = [x for x in record["raw_output"].splitlines() if x.strip()]
    return len(lines) <= 1 and record["completion_tokens"] >= 32


def choose(df: pd.DataFrame) -> pd.DataFrame:
    """Per (prompt, answer rule): the worst echo over the six cells, the mean SubEM, whether echo passes; best
    first."""
    g = df.groupby(["prompt", "answer"])
    out = pd.DataFrame({"max_echo": g.echo.max(), "mean_subem": g.subem.mean(), "cells": g.size()})
    out["passes"] = out.max_echo <= MAX_ECHO
    out["echo_rank"] = out.max_echo.where(~out.passes, 0.0)  # where none passes: the lowest worst-cell echo first
    return out.sort_values(["echo_rank", "mean_subem"], ascending=[True, False]).drop(columns="echo_rank")


def markdown(df: pd.DataFrame, n: int | None) -> str:
    """The table of docs/models-and-prompts.md: one row per (prompt, answer rule), SubEM / echo per dataset and
    context, best first."""
    order = choose(df).index
    cols = [(m, d) for m in ("full", "oracle_sentences") for d in ("nq", "triviaqa", "hotpotqa")]
    names = {"full": "full", "oracle_sentences": "gold", "nq": "NQ", "triviaqa": "TQA", "hotpotqa": "HQA"}
    head = "| prompt | answer | " + " | ".join(f"{names[m]} {names[d]}" for m, d in cols) + " | max echo | mean SubEM |"
    lines = [head, "|" + "---|" * (len(cols) + 4)]
    cell = df.set_index(["prompt", "answer", "method", "dataset"])
    for p, a in order:
        vals = [cell.loc[(p, a, m, d)] for m, d in cols]
        row = [f"{v.subem:.0f} / {v.echo:.0f}" for v in vals]
        summary = choose(df).loc[(p, a)]
        lines.append(f"| {p} | {a} | " + " | ".join(row) + f" | {summary.max_echo:.0f} | {summary.mean_subem:.1f} |")
    sizes = sorted(set(df.n))
    return (
        "\n".join(lines)
        + f"\n\nSubEM / echo in percent; n = {', '.join(map(str, sizes))} per cell"
        + (f" (the first {n})" if n else "")
    )


def main() -> None:
    ap = argparse.ArgumentParser(description="score the prompt-selection runs")
    ap.add_argument("root", type=Path)
    ap.add_argument("--n", type=int, help="the first n questions of each run (the screening stage: 50)")
    ap.add_argument("--out", type=Path, help="the figures' CSV (default: figures-n<N>.csv beside this file)")
    ap.add_argument("--prompts", help="comma-separated: only these candidates (the finalists of stage 2)")
    ap.add_argument("--markdown", action="store_true", help="print docs/models-and-prompts.md's table instead")
    args = ap.parse_args()
    df = cells(args.root, args.n)
    if args.prompts:
        df = df[df.prompt.isin(args.prompts.split(","))]
    df.round(2).to_csv(args.out or default_out(args.n), index=False)
    if args.markdown:
        print(markdown(df, args.n))
        return
    wide = df.pivot_table(index=["prompt", "answer"], columns=["method", "dataset"], values=["subem", "echo"])
    print(wide.round(1).to_string())
    print(choose(df).round(2).to_string())


if __name__ == "__main__":
    main()
