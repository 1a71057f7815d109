"""What did a second reader's block cost against its generation time alone? Issue 73's bar for reused contexts.

``python -m tools.reuse_cost ROOT GENERATOR`` reads every run of GENERATOR (its folder name) under the results root
ROOT and prints, per dataset and in all: the run's cost, ``run.wall_s + run.load_s`` (everything from the first
model load to the last record written), its generation time, ``batched.generate_s`` times ``n`` (the reader's own
share of the batched accuracy pass), their ratio, how many runs bound their method (loaded a compressor) and how
many records took a reused context. Exit status 1 when the total ratio is above ``--bar`` (default 1.2).

The LM cache (``harness.lm.cache``) replays a generation it has seen at the seconds it took when computed, so a
run whose prompts an earlier run already read records generation time it did not spend, and its ratio flatters
it. The table counts those records (a batch that replayed a generate call), and the tool says so: measure with
``lm.cache=false`` for the bar.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from harness.records import PREDICTIONS, read_jsonl


def runs(root: Path, generator: str) -> list[dict]:
    """Each finished run of ``generator`` under ``root``: dataset, method, cost_s, generate_s, bound, reused, n,
    cached (records whose batch replayed a generation from the LM cache)."""
    rows = []
    for path in sorted(root.glob(f"*/{generator}/*/*/*/summary.json")):
        s = json.loads(path.read_text())
        run, batched = s.get("run") or {}, s.get("batched") or {}
        if "wall_s" not in run or batched.get("generate_s") is None:
            continue
        rows.append(
            {
                "dataset": s["dataset"],
                "method": s["method"],
                "n": s["n"],
                "cost_s": run["wall_s"] + run.get("load_s", 0.0),
                "generate_s": batched["generate_s"] * s["n"],
                "bound": bool(run.get("method_bound", True)),
                "reused": s.get("reused_contexts", 0),
                "cached": _cached(path.parent / PREDICTIONS),
            }
        )
    return rows


def _cached(predictions: Path) -> int:
    """Records of a run whose batch took a generation from the LM cache."""
    if not predictions.is_file():
        return 0
    return sum(bool((r.get("replayed") or {}).get("generate_calls")) for r in read_jsonl(predictions))


def totals(rows: list[dict]) -> dict[str, dict]:
    """Per dataset and ``all``: runs, n, cost_s, generate_s, ratio, bound, reused, cached."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[r["dataset"]].append(r)
        groups["all"].append(r)
    out = {}
    for name, rs in groups.items():
        cost, gen = sum(r["cost_s"] for r in rs), sum(r["generate_s"] for r in rs)
        out[name] = {
            "runs": len(rs),
            "n": sum(r["n"] for r in rs),
            "cost_s": cost,
            "generate_s": gen,
            "ratio": cost / gen if gen > 0 else None,
            "bound": sum(r["bound"] for r in rs),
            "reused": sum(r["reused"] for r in rs),
            "cached": sum(r["cached"] for r in rs),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.reuse_cost", description=__doc__.splitlines()[0])
    ap.add_argument("root", help="a results root (or leaderboard/runs)")
    ap.add_argument("generator", help="the reader's folder name, e.g. gemma3-270m-vllm-completion_k3-first_line")
    ap.add_argument("--bar", type=float, default=1.2)
    a = ap.parse_args(argv)
    table = totals(runs(Path(a.root), a.generator))
    if not table:
        print(f"{a.root}: no finished run of {a.generator}")
        return 1
    print(
        "| dataset | runs | records | reused contexts | records with cached generations "
        "| runs that loaded a compressor "
        "| cost s | generation s | cost/generation |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in sorted(table, key=lambda k: (k == "all", k)):
        t = table[name]
        ratio = "-" if t["ratio"] is None else f"{t['ratio']:.2f}x"
        print(
            f"| {name} | {t['runs']} | {t['n']} | {t['reused']} | {t['cached']} | {t['bound']} | {t['cost_s']:.0f} | "
            f"{t['generate_s']:.0f} | {ratio} |"
        )
    if table["all"]["cached"]:
        print(
            f"{table['all']['cached']} records took generations from the LM cache at their recorded seconds: the "
            "ratio flatters these runs; re-run them with lm.cache=false to measure the bar"
        )
    ratio = table["all"]["ratio"]
    return 0 if ratio is not None and ratio <= a.bar else 1


if __name__ == "__main__":
    sys.exit(main())
