"""``python -m leaderboard publish <results> <out>`` | ``archive <results>... <dest>`` | ``collect <results>`` |
``compare <results> A B --dataset D`` | ``export-contexts <results> <out.jsonl.gz>`` |
``backfill-contexts <results> <archive>``. (``add VARIANT`` only names
``python -m tools.add_row VARIANT``: publishing a new row runs models, and the leaderboard never does.)"""

from __future__ import annotations

import argparse
import os
import sys

import pandas as pd

from leaderboard.matched import MIN_N

COLLECTED = ("profile", "generator", "dataset", "variant", "n", "subem", "em", "f1", "cr", "commit", "finished_at")


def parser() -> argparse.ArgumentParser:
    """The subcommands: publish, archive, collect, compare, export-contexts, backfill-contexts; add only names the
    tool that adds a row."""
    ap = argparse.ArgumentParser(prog="python -m leaderboard", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("publish", help="write Markdown, CSV, LaTeX, plots and index.html")
    p.add_argument("results", help="results root (run folders with summary.json, at any depth)")
    p.add_argument("out", help="output folder")
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--baseline", default="full", help="variant the paired tests compare with (default full)")
    p.add_argument(
        "--min-n",
        type=int,
        default=MIN_N,
        help=f"rows with fewer records stay out of the shared-questions table (default {MIN_N})",
    )
    p.add_argument(
        "--headline",
        help="the block to open on: GENERATOR or PROFILE/GENERATOR (default: of the blocks that made their own "
        "contexts, the newest run's)",
    )
    r = sub.add_parser("archive", help="copy the newest run of each key, slimmed, into a folder kept in git")
    r.add_argument("results", nargs="+", help="results roots")
    r.add_argument("dest", help="archive folder (leaderboard/runs)")
    r.add_argument(
        "--shards",
        action="store_true",
        help="archive the finished shards of runs not merged yet instead (into leaderboard/pending/shards)",
    )
    r.add_argument("--generators", help="comma-separated: only the runs of these generator blocks")
    c = sub.add_parser("collect", help="print the collected table")
    c.add_argument("results")
    k = sub.add_parser("compare", help="two variants question by question: wins, losses, ties and the differences")
    k.add_argument("results", help="results root (or leaderboard/runs)")
    k.add_argument("a", help="variant A")
    k.add_argument("b", help="variant B")
    k.add_argument("--dataset", required=True, help="nq | triviaqa | hotpotqa")
    k.add_argument("--generator", help="the generator block (default: of those holding both, the newest run's)")
    k.add_argument("--no-contexts", action="store_true", help="leave the kept contexts out")
    a = sub.add_parser("add", help="not here: prints the command that runs, times and publishes a new row")
    a.add_argument("args", nargs=argparse.REMAINDER, help="VARIANT [options] [overrides], as tools.add_row takes them")
    x = sub.add_parser("export-contexts", help="a block's Table 2 contexts as JSONL.gz, for any generator to read")
    x.add_argument("results", help="results root, or the archive (leaderboard/runs: the texts from its store)")
    x.add_argument("out", help="output file (.jsonl.gz)")
    x.add_argument("--block", help="GENERATOR or PROFILE/GENERATOR (default: as publish's --headline)")
    x.add_argument("--variants", help="comma-separated variants (default: the 13 Table 2 rows)")
    x.add_argument("--sample", default="shuffled seed 0", help="the runs' sample (default 'shuffled seed 0')")
    x.add_argument("--datasets", default="nq,triviaqa,hotpotqa", help="comma-separated (default: the three)")
    x.add_argument("--limit", type=int, help="each row's first N examples (default: all the run scored)")
    b = sub.add_parser("backfill-contexts", help="archived runs' context texts from runs made again (same hashes)")
    b.add_argument("results", help="results root of the remade runs")
    b.add_argument("archive", help="the archive (leaderboard/runs)")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.cmd == "add":
        cmd = " ".join(["python -m tools.add_row", *a.args])
        print(f"the leaderboard never runs a model; a new row is run, timed and published by: {cmd}", file=sys.stderr)
        return 2
    if a.cmd == "compare":
        from leaderboard.compare import CompareError, compare, report

        try:
            c = compare(a.results, a.a, a.b, a.dataset, a.generator)
        except CompareError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        lines = report(c, contexts=not a.no_contexts)
    elif a.cmd == "export-contexts":
        from leaderboard.contexts import ExportError, export_contexts

        variants = a.variants.split(",") if a.variants else None
        try:
            lines = [
                str(export_contexts(a.results, a.out, a.block, variants, a.sample, a.datasets.split(","), a.limit))
            ]
        except ExportError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    elif a.cmd == "backfill-contexts":
        from leaderboard.backfill import backfill

        lines = [b.line() for b in backfill(a.results, a.archive)] or [f"{a.results}: no run of an archived key"]
    elif a.cmd == "publish":
        from leaderboard.publish import publish

        lines = map(str, publish(a.results, a.out, a.resamples, a.seed, a.baseline, a.min_n, a.headline))
    elif a.cmd == "archive":
        from leaderboard.archive import archive, archive_shards

        if a.shards:
            lines = map(str, archive_shards(a.results, a.dest))
        else:
            lines = map(str, archive(a.results, a.dest, a.generators.split(",") if a.generators else None))
    else:
        from leaderboard.collect import collect

        with pd.option_context("display.width", 200, "display.max_columns", 20):
            lines = [collect(a.results)[list(COLLECTED)].to_string(index=False)]
    for line in lines:
        print(line)
    return 0


def _quiet_on_closed_pipe() -> int:
    """``main``, ending quietly when the reader of stdout goes away (``... | head``), as the Python docs advise:
    stdout is pointed at devnull so the interpreter's final flush cannot raise again."""
    try:
        return main()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(_quiet_on_closed_pipe())
