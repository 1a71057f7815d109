"""Choose each budget variant's knob per dataset on train questions (issue 84): the value whose CR lands closest to
CompSelect's.

The variants are the method configs whose knob reads ``${.per_dataset.${dataset.name}}`` (``conf/method/*_budget
.yaml``). Their candidate values run first on a train slice, as any run (``research/budget/README.md``)::

    python -m harness -m method=bm25_sentences_budget method.rate=0.12,0.14,0.16 dataset=nq dataset.split=train \\
        dataset.sample=shuffled dataset.seed=0 limit=100 latency.samples=0 results_dir=results-budget-choice

then ``python -m tools.choose_budget results-budget-choice`` reads every run there, sets each beside the target (the
CR of CompSelect's archived run of the same dataset in the headline block, a budget figure: no test question's
answer or score enters), writes the choice table (CSV and Markdown) and, with ``--apply``, the chosen values into the
variants' ``per_dataset`` lines. Only CR is read: the train answers play no part in the choice.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf" / "method"
KNOB_LINE = re.compile(r"^(\w+): \$\{\.per_dataset\.\$\{dataset\.name\}\}\s*$", re.M)
HEADLINE = "embedded/smollm2-135m-instruct-vllm-documents_first-unlabelled"


def knob_of(variant: str) -> str | None:
    """The knob a budget variant sets per dataset (the key its YAML points at ``per_dataset``), None otherwise."""
    path = CONF / f"{variant}.yaml"
    m = KNOB_LINE.search(path.read_text(encoding="utf-8")) if path.is_file() else None
    return m.group(1) if m else None


def budget_variants() -> list[str]:
    """Every method config with a per-dataset knob, by name."""
    return sorted(p.stem for p in CONF.glob("*.yaml") if knob_of(p.stem))


def targets(archive: Path, block: str = HEADLINE, method: str = "compselect") -> dict[str, float]:
    """Per dataset: the CR of ``method``'s archived run in ``block`` (the largest n where there are several)."""
    best: dict[str, tuple[int, float]] = {}
    for f in (archive / block).glob(f"*/{method}/*/summary.json"):
        s = json.loads(f.read_text(encoding="utf-8"))
        if s.get("cr") and s.get("n", 0) > best.get(s["dataset"], (0, 0.0))[0]:
            best[s["dataset"]] = (s["n"], float(s["cr"]))
    return {d: cr for d, (_, cr) in best.items()}


def trials(results: Path) -> pd.DataFrame:
    """One line per candidate run under ``results``: variant, dataset, knob, value, n, CR, kept-nothing share."""
    rows = []
    for f in sorted(results.glob("**/summary.json")):
        s = json.loads(f.read_text(encoding="utf-8"))
        knob = knob_of(s["method"])
        if knob is None:
            continue
        value = s["config"]["method"][knob]
        rows.append(
            {
                "variant": s["method"],
                "dataset": s["dataset"],
                "split": s.get("split"),
                "knob": knob,
                "value": value,
                "n": s["n"],
                "cr": s.get("cr"),
                "kept_nothing": s.get("kept_nothing"),
            }
        )
    return pd.DataFrame(rows)


def choose(t: pd.DataFrame, target: dict[str, float]) -> pd.DataFrame:
    """``t`` with the target CR, the ratio to it and ``chosen``: per (variant, dataset), the value whose CR is
    nearest the target in log terms (only train runs count)."""
    t = t[t.split == "train"].copy()
    t["target_cr"] = t.dataset.map(target)
    t["cr_over_target"] = t.cr / t.target_cr
    t["off"] = t.cr_over_target.map(lambda r: abs(math.log(r)) if r and r > 0 else math.inf)
    t["chosen"] = False
    for _, g in t.groupby(["variant", "dataset"]):
        t.loc[g.off.idxmin(), "chosen"] = True
    return t.drop(columns="off").sort_values(["variant", "dataset", "value"]).reset_index(drop=True)


def apply(chosen: pd.DataFrame) -> list[Path]:
    """Write the chosen values into each variant's ``per_dataset`` line (datasets not chosen keep theirs)."""
    written = []
    for variant, g in chosen[chosen.chosen].groupby("variant"):
        path = CONF / f"{variant}.yaml"
        text = path.read_text(encoding="utf-8")
        m = re.search(r"^per_dataset: \{(.*)\}\s*$", text, re.M)
        if not m:
            raise SystemExit(f"{path}: no one-line `per_dataset: {{...}}` to update")
        values = dict(kv.split(": ") for kv in m.group(1).split(", ")) if m.group(1).strip() else {}
        values.update({r.dataset: _fmt(r.value) for r in g.itertuples()})
        line = "per_dataset: {" + ", ".join(f"{k}: {v}" for k, v in values.items()) + "}"
        path.write_text(text[: m.start()] + line + text[m.end() :], encoding="utf-8")
        written.append(path)
    return written


def _fmt(v: float | int) -> str:
    """A knob's value as YAML reads it back (``3`` for a count, ``0.15`` for a rate)."""
    return f"{float(v):g}"


def markdown(t: pd.DataFrame) -> str:
    head = "| variant | dataset | knob | value | n | CR | kept nothing | target CR | CR / target | chosen |"
    lines = [head, "|" + "---|" * 10]
    for r in t.itertuples():
        kept = "-" if pd.isna(r.kept_nothing) else f"{100 * r.kept_nothing:.0f}%"
        lines.append(
            f"| {r.variant} | {r.dataset} | {r.knob} | {_fmt(r.value)} | {r.n} | {r.cr:.2f} | {kept} | "
            f"{r.target_cr:.2f} | {r.cr_over_target:.2f} | {'**yes**' if r.chosen else ''} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, help="the results root of the candidate runs (train split)")
    p.add_argument("--archive", type=Path, default=REPO / "leaderboard" / "runs", help="where the targets' runs are")
    p.add_argument("--out", type=Path, default=REPO / "research" / "budget", help="choice.csv and choice.md go here")
    p.add_argument("--apply", action="store_true", help="write the chosen values into conf/method/*_budget.yaml")
    a = p.parse_args(argv)
    t = trials(a.results)
    if t.empty:
        raise SystemExit(f"no run of a budget variant ({', '.join(budget_variants())}) under {a.results}")
    c = choose(t, targets(a.archive))
    a.out.mkdir(parents=True, exist_ok=True)
    c.to_csv(a.out / "choice.csv", index=False)
    (a.out / "choice.md").write_text(markdown(c), encoding="utf-8")
    print(markdown(c))
    if a.apply:
        for path in apply(c):
            print(f"updated {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
