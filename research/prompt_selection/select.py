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

The second reader, Gemma-3-270M base (``generator=gemma3_270m_vllm``), was chosen the same way among its
completion templates (``completion_k0`` / ``_k1`` / ``_k3``: 0, 1 or 3 worked examples), its reply stopped at the
first line break. ``--cap 16`` adds each rule at ``max_new_tokens`` 16 (``first_line@16``), scored from the same
replies cut to their first 16 tokens (re-tokenised with ``--tokenizer``); ``--paired full,naive`` prints the paired
bootstrap of SubEM (``first_line``) between two methods on the questions both ran::

    python -m harness -m generator=gemma3_270m_vllm generator.prompt=completion_k3,completion_k0,completion_k1 \\
        method=full,oracle_sentences dataset=nq,triviaqa,hotpotqa dataset.split=train dataset.sample=shuffled \\
        limit=50 latency.samples=0 results_dir=results-prompt-selection-gemma
    python -m research.prompt_selection.select results-prompt-selection-gemma --n 50 --cap 16 \\
        --tokenizer embedded:gemma3-270m --out research/prompt_selection/gemma3-figures-n50.csv
    python -m research.prompt_selection.select results-prompt-selection-gemma --paired full,naive --n 100 \\
        --out research/prompt_selection/gemma3-full-vs-naive-n100.csv

Qwen2.5-Coder-0.5B-Instruct (``generator=qwen25_05b_vllm``), among four chat templates, then ``naive`` under the
chosen one for the paired test (issue 93)::

    python -m harness -m generator=qwen25_05b_vllm generator.prompt=documents_first,paper,no_example,answer_cue \\
        generator.answer=paper method=full,oracle_sentences dataset=nq,triviaqa,hotpotqa dataset.split=train \\
        dataset.sample=shuffled limit=50 latency.samples=0 results_dir=results-prompt-selection-qwen05b
    python -m research.prompt_selection.select results-prompt-selection-qwen05b --n 50 --cap 16 \\
        --tokenizer embedded:qwen2.5-coder-0.5b-instruct --out research/prompt_selection/qwen25-05b-figures-n50.csv
    python -m harness -m generator=qwen25_05b_vllm generator.prompt=documents_first generator.answer=paper \\
        method=naive dataset=nq,triviaqa,hotpotqa dataset.split=train dataset.sample=shuffled limit=50 \\
        latency.samples=0 results_dir=results-prompt-selection-qwen05b
    python -m research.prompt_selection.select results-prompt-selection-qwen05b --paired full,naive --n 50 \\
        --out research/prompt_selection/qwen25-05b-full-vs-naive-n50.csv
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from harness.metrics import ANSWER_RULES, echo, first_line, subem
from harness.records import PREDICTIONS, SUMMARY, read_jsonl
from harness.stats import paired_bootstrap

MAX_ECHO = 5.0


def default_out(n: int | None) -> Path:
    """Where a stage's figures go: ``figures-n50.csv`` for the screening stage (``--n 50``), else ``-n100``."""
    return Path(__file__).with_name(f"figures-n{n or 100}.csv")


def records(summary: Path, n: int | None = None) -> list[dict]:
    """A run's first ``n`` prediction records (the first n of the shuffled sample; all when None), one per id."""
    return list({r["id"]: r for r in read_jsonl(summary.parent / PREDICTIONS)}.values())[:n]


def cut(raw: str, tokens: int, tokenizer) -> str:
    """A reply as ``max_new_tokens=tokens`` would have left it: its first ``tokens`` tokens (re-tokenised)."""
    ids = tokenizer(" " + raw, add_special_tokens=False)["input_ids"]
    return raw if len(ids) <= tokens else tokenizer.decode(ids[:tokens]).strip()


def cells(root: Path, n: int | None = None, cap: int | None = None, tokenizer=None) -> pd.DataFrame:
    """One row per (prompt, answer rule, dataset, method): n, SubEM, echo and SubEM from echo in percent, over
    each run's first ``n`` records (the first n of the shuffled sample; all when None). With ``cap``, every rule
    again on the replies cut to ``cap`` tokens (``<rule>@<cap>``)."""
    rules = dict(ANSWER_RULES)
    if cap:
        rules |= {f"{k}@{cap}": (lambda raw, f=f: f(cut(raw, cap, tokenizer))) for k, f in ANSWER_RULES.items()}
    rows = []
    for summary in sorted(root.rglob(SUMMARY)):
        s = json.loads(summary.read_text())
        prompt = s["generator_info"]["prompt"]["name"]
        recs = records(summary, n)
        for rule, answer_of in rules.items():
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


def paired(root: Path, a: str, b: str, n: int | None = None) -> pd.DataFrame:
    """Per (prompt, dataset): SubEM of method ``a`` minus ``b`` (``first_line`` answers) on the questions both
    ran, with the paired bootstrap's 95 % interval and p-value (``harness.stats``)."""
    runs: dict[tuple[str, str, str], dict[str, float]] = {}
    for summary in sorted(root.rglob(SUMMARY)):
        s = json.loads(summary.read_text())
        key = (s["generator_info"]["prompt"]["name"], s["dataset"], s["method"])
        runs[key] = {r["id"]: subem(first_line(r["raw_output"]), r["answers"]) for r in records(summary, n)}
    rows = []
    for (prompt, dataset, method), hits in sorted(runs.items()):
        other = runs.get((prompt, dataset, b))
        if method != a or other is None:
            continue
        ids = [i for i in hits if i in other]
        t = paired_bootstrap([hits[i] for i in ids], [other[i] for i in ids])
        mean_a, mean_b = (100 * sum(h[i] for i in ids) / len(ids) for h in (hits, other))
        rows.append(
            {"prompt": prompt, "dataset": dataset, "n": t.n, a: mean_a, b: mean_b, "delta": t.delta}
            | {"lo": t.lo, "hi": t.hi, "p": t.p, "significant": t.significant}
        )
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description="score the prompt-selection runs")
    ap.add_argument("root", type=Path)
    ap.add_argument("--n", type=int, help="the first n questions of each run (the screening stage: 50)")
    ap.add_argument("--out", type=Path, help="the figures' CSV (default: figures-n<N>.csv beside this file)")
    ap.add_argument("--prompts", help="comma-separated: only these candidates (the finalists of stage 2)")
    ap.add_argument("--markdown", action="store_true", help="print docs/models-and-prompts.md's table instead")
    ap.add_argument("--cap", type=int, help="also score every rule at this max_new_tokens (needs --tokenizer)")
    ap.add_argument("--tokenizer", help="the model whose tokenizer cuts replies for --cap (e.g. embedded:gemma3-270m)")
    ap.add_argument("--paired", help="A,B: the paired test of SubEM, method A minus method B, per prompt and dataset")
    args = ap.parse_args()
    if args.paired:
        test = paired(args.root, *args.paired.split(","), n=args.n).round(3)
        if args.out:
            test.to_csv(args.out, index=False)
        print(test.to_string(index=False))
        return
    tokenizer = None
    if args.cap:
        from transformers import AutoTokenizer

        from harness.lm.models import resolve

        tokenizer = AutoTokenizer.from_pretrained(resolve(args.tokenizer).path)
    df = cells(args.root, args.n, args.cap, tokenizer)
    df = df[df.method.isin(["full", "oracle_sentences"])]  # the selection's contexts (not naive, for the paired test)
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
