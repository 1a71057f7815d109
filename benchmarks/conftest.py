"""Prints the break-even table of ``bench_compress.py`` after a benchmark run (``--benchmark-enable``)."""

from __future__ import annotations

import os

os.environ.setdefault("RAG_HARNESS_LM_CACHE", "0")  # a benchmark times computation: no call is replayed


def pytest_terminal_summary(terminalreporter) -> None:
    from benchmarks.bench_compress import BREAK_EVEN

    if not BREAK_EVEN:
        return
    w = terminalreporter
    w.section("compression break-even (seconds per example; break-even = compression s / generation s saved)")
    w.write_line(
        f"{'method':34} {'mode':8} {'compress':>9} {'gen full':>9} {'gen comp':>9} {'saved':>8} "
        f"{'break-even':>10} {'CR':>7}"
    )

    def num(x, fmt):
        return format(x, fmt) if x is not None else format("-", f">{fmt.split('.')[0]}")

    for r in sorted(BREAK_EVEN, key=lambda r: (r["mode"], r["method"])):
        w.write_line(
            f"{r['method']:34} {r['mode']:8} {r['s_per_example']:9.3f} {r['generate_full_s']:9.3f} "
            f"{r['generate_compressed_s']:9.3f} {r['generation_saved_s']:8.3f} "
            f"{num(r['break_even'], '10.3f')} {num(r['cr'], '7.2f')}"
        )
