"""The "At the readers' scale" view: each Table 2 row's cost at the papers' model sizes on a GPU, predicted from the
tokens its records counted (issue 83).

Inputs, all read, nothing run:
- token records: ``<results>/scale/tokens-*.jsonl.gz``, one line per question (``tools.recount``: ``variant``,
  ``dataset``, ``profile``, ``generator``, ``id``, ``batch``, ``tokens``), the Table 2 rows recounted;
- the H200 device table (``leaderboard/data/devices/h200.json``) and the cost model (``leaderboard.costmodel``);
- the CPU check (``<results>/scale/cpu-check-*.json``, ``tools.cost_check``): the model against a latency pass
  measured on the same CPU, stated under the tables;
- the papers' latency figures (``leaderboard/data/scale.yaml``: CompSelect's Sec. 5.4).

Per row and dataset: batch-1 total and online seconds with Llama-3-8B reading on the H200, the serving engine's
CUDA-graph decode (the eager column, Hugging Face ``generate``, beside it), the compressors on their papers'
checkpoints (``costmodel.PAPER_COMPRESSORS``); compute per question for each reader size; the smallest reader at
which the row's compute falls below ``full``'s. ``scale_<profile>_<generator>.csv`` holds every (row, dataset,
reader, decode column) in long form.
"""

from __future__ import annotations

import gzip
import html as htmllib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from leaderboard import costmodel as cm
from leaderboard.page import Block, Data, Page, View
from leaderboard.reference import variant_order
from leaderboard.tables import datasets, label

DATA = Path(__file__).resolve().parents[1] / "data"  # leaderboard/data
DEVICE = "h200"
READER = "llama3_8b"
READER_NAMES = {
    "llama32_1b": "Llama-3.2-1B",
    "llama32_3b": "Llama-3.2-3B",
    "llama3_8b": "Llama-3-8B",
    "qwen3_14b": "Qwen3-14B",
    "llama33_70b": "Llama-3.3-70B",
}
SHORT = {"llama32_1b": "1B", "llama32_3b": "3B", "llama3_8b": "8B", "qwen3_14b": "Qwen3-14B", "llama33_70b": "70B"}
COLUMNS = ("cudagraph", "eager")


def read_tokens(results: str | Path) -> pd.DataFrame:
    """Every recounted question under ``results/scale`` (empty when there is none)."""
    rows = []
    for f in sorted(Path(results).glob("scale/tokens-*.jsonl.gz")):
        with gzip.open(f, "rt", encoding="utf-8") as fh:
            rows += [json.loads(x) for x in fh if x.strip()]
    return pd.DataFrame(rows)


def read_checks(results: str | Path) -> list[dict[str, Any]]:
    """The CPU checks (``tools.cost_check --out``) under ``results/scale``."""
    return [json.loads(f.read_text()) for f in sorted(Path(results).glob("scale/cpu-check-*.json"))]


def paper_figures() -> list[dict[str, Any]]:
    return yaml.safe_load((DATA / "scale.yaml").read_text())["latency"]


def predict(records: Sequence[dict[str, Any]], variant: str, table: cm.DeviceTable) -> dict[str, Any]:
    """One row's means per question: seconds per decode column with the 8B reader, and what compute needs."""
    out: dict[str, Any] = {}
    for column in COLUMNS:
        run = cm.predict_run(records, variant, table, cm.Scenario(reader=READER, column=column))
        out[column] = {"total_s": run["total_s"], "online_s": run["online_s"]}
        out.update({k: run[k] for k in ("compressor_flops", "reader_tokens", "n", "exact", "scaled_from")})
    return out


def row_figures(tokens: pd.DataFrame, table: cm.DeviceTable) -> pd.DataFrame:
    """Per (variant, dataset): predicted seconds, compute per reader size and the break-even reader."""
    out = []
    for dataset in datasets(tokens):
        d = tokens[tokens.dataset == dataset]
        groups = dict(tuple(d.groupby("variant", sort=False)))
        preds = {v: predict(groups[v].to_dict("records"), v, table) for v in variant_order(list(groups))}
        full = preds.get("full")
        for variant, p in preds.items():
            even = cm.break_even(p, full, table) if full is not None and variant != "full" else None
            row = {"variant": variant, "dataset": dataset, "n": p["n"], "exact": p["exact"]}
            for column in COLUMNS:
                row[f"total_s_{column}"], row[f"online_s_{column}"] = (p[column][k] for k in ("total_s", "online_s"))
            for reader in cm.READERS:
                flops = p["compressor_flops"] + 2.0 * table.params(reader) * p["reader_tokens"]
                row[f"tflops_{reader}"] = flops / 1e12
            row["break_even_reader"] = None if even is None else even["reader"]
            row["break_even_params_b"] = None if even is None or even["params"] is None else even["params"] / 1e9
            row["reader_tokens"], row["compressor_tflops"] = p["reader_tokens"], p["compressor_flops"] / 1e12
            out.append(row)
    return pd.DataFrame(out)


def long_form(figs: pd.DataFrame, tokens: pd.DataFrame, table: cm.DeviceTable) -> pd.DataFrame:
    """The CSV: one line per (method, dataset, reader, decode column) on the H200."""
    lines = []
    for (variant, dataset), g in tokens.groupby(["variant", "dataset"], sort=False):
        recs = g.to_dict("records")
        f = figs[(figs.variant == variant) & (figs.dataset == dataset)].iloc[0]
        for reader in cm.READERS:
            for column in COLUMNS:
                run = cm.predict_run(recs, variant, table, cm.Scenario(reader=reader, column=column))
                lines.append({
                    "method": variant, "dataset": dataset, "reader": READER_NAMES[reader], "device": "NVIDIA H200",
                    "decode": column, "total_s": run["total_s"], "online_s": run["online_s"],
                    "compute_tflops": f[f"tflops_{reader}"], "break_even_reader": f.break_even_reader,
                    "n": run["n"], "exact": run["exact"],
                })  # fmt: skip
    return pd.DataFrame(lines)


def _num(x: Any, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and pd.isna(x)) else format(x, spec)


def markdown_table(figs: pd.DataFrame, dataset: str, papers: Sequence[dict[str, Any]]) -> list[str]:
    """One dataset's table: seconds with the 8B reader, TFLOPs per reader size, the break-even reader."""
    head = ["method", "n", "total s", "online s", "total s (eager)"]
    head += [f"TFLOPs at {SHORT[r]}" for r in cm.READERS] + ["breaks even from"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in figs[figs.dataset == dataset].itertuples():
        cells = [f"`{r.variant}`", str(r.n), _num(r.total_s_cudagraph, ".2f"), _num(r.online_s_cudagraph, ".2f")]
        cells += [_num(r.total_s_eager, ".2f")] + [_num(getattr(r, f"tflops_{x}"), ".2f") for x in cm.READERS]
        cells.append(_even(r))
        lines.append("| " + " | ".join(cells) + " |")
    for p in papers:
        if p["dataset"] == dataset:
            blank = ["-"] * (len(cm.READERS) + 1)
            lines.append(
                f"| {p['label']} | - | {p['total_s']:.2f} | {p['online_s']:.2f} | - | " + " | ".join(blank) + " |"
            )
    return lines


def _even(r: Any) -> str:
    if r.variant == "full":
        return "(reference)"
    if r.break_even_reader is None or pd.isna(r.break_even_reader):
        return "never" if pd.isna(r.break_even_params_b) else f"none of these ({r.break_even_params_b:.0f}B)"
    return f"{SHORT[r.break_even_reader]} ({r.break_even_params_b:.1f}B)"


def check_lines(checks: Sequence[dict[str, Any]]) -> list[str]:
    """The CPU check, stated: the model against a latency pass on the same CPU."""
    out = []
    for c in checks:
        o, dev = c["overall"], c["meta"].get("device") or {}
        worst = max(c["rows"], key=lambda r: abs(r["total"]["median_error"] or 0))
        out.append(
            f"Checked on {dev.get('cpu_name') or dev.get('device_name') or 'a CPU'}: predicted from that CPU's table "
            f"and each question's tokens, the batch-1 seconds of {o['n']} timed questions (NQ, the Table 2 rows) "
            f"are off by a median {o['median_error']:+.0%} (largest {o['largest_error']:+.0%}); the row furthest "
            f"off at its median is `{worst['variant']}` ({worst['total']['median_error']:+.0%})."
        )
    return out


def sentences(figs: pd.DataFrame) -> str:
    """What the view shows, from its figures: which rows cost less time than ``full`` with an 8B reader at batch 1,
    and from which reader size each row's compute falls below ``full``'s."""
    said = []
    for dataset, d in figs.groupby("dataset", sort=False):
        full = d[d.variant == "full"]
        if full.empty:
            continue
        base = float(full.total_s_cudagraph.iloc[0])
        rest = d[d.variant != "full"]
        faster = rest[rest.total_s_cudagraph < base].variant.tolist()
        slowest = rest.loc[rest.total_s_cudagraph.idxmax()] if len(rest) else None
        text = f"On {label(dataset)}, `full` costs {base:.2f} s a question (total = online, Llama-3-8B, CUDA graphs)"
        if slowest is not None:
            text += (
                f"; {len(faster)} of {len(rest)} rows cost less in all, the dearest is `{slowest.variant}` "
                f"({slowest.total_s_cudagraph:.2f} s)"
            )
        never = rest[rest.break_even_reader.isna()].variant.tolist()
        text += f"; by compute, {len(rest) - len(never)} rows fall below `full` at some reader size of "
        text += f"{READER_NAMES['llama32_1b']} to {READER_NAMES['llama33_70b']}"
        text += f" and {len(never)} never do ({', '.join(f'`{v}`' for v in never)})." if never else "."
        said.append(text)
    return " ".join(said)


def relative_compute(figs: pd.DataFrame, dataset: str, params: Sequence[float]) -> dict[str, list[float]]:
    """Per row of ``dataset``, its compute per question over ``full``'s at each reader size in ``params``:
    (compressor FLOPs + 2 x p x reader tokens) / (``full``'s)."""
    d = figs[figs.dataset == dataset]
    full = d[d.variant == "full"].iloc[0]

    def flops(r: Any, p: float) -> float:
        return float(r.compressor_tflops) * 1e12 + 2.0 * p * float(r.reader_tokens)

    return {r.variant: [flops(r, p) / flops(full, p) for p in params] for r in d.itertuples()}


def compute_plot(figs: pd.DataFrame, path: Path) -> Path:
    """Per dataset, each row's compute relative to ``full`` against reader size (log-log, 135M to 70B): the
    embedded readers (``reader_sizes.yaml``) dashed, the papers' readers dotted, break-even at 1.0."""
    import numpy as np

    from leaderboard.plots import _plt, _save_png
    from leaderboard.reference import reader_sizes

    plt = _plt()
    embedded = sorted((int(e["params"]), str(e["size"])) for e in reader_sizes().values())
    table = cm.DeviceTable.load(DEVICE)
    papers = [(table.params(r), SHORT[r]) for r in cm.READERS]
    grid = np.geomspace(1e8, 1e11, 200)
    ds = [d for d in datasets(figs) if (figs[figs.dataset == d].variant == "full").any()]
    fig, axes = plt.subplots(1, len(ds), figsize=(4.6 * len(ds), 4.4), squeeze=False, sharey=True)
    colours = plt.get_cmap("tab20").colors
    for ax, d in zip(axes[0], ds, strict=True):
        for k, (v, ys) in enumerate(relative_compute(figs, d, grid).items()):
            if v != "full":
                ax.plot(grid, ys, lw=1.4, color=colours[k % len(colours)], label=v)
        ax.axhline(1.0, color="black", lw=1)
        for p, name in embedded:
            ax.axvline(p, color="0.5", ls="--", lw=0.8)
            ax.annotate(name, (p, 1.0), xycoords=("data", "axes fraction"), rotation=90, fontsize=7, va="top")
        for p, name in papers:
            ax.axvline(p, color="0.75", ls=":", lw=0.8)
            ax.annotate(name, (p, 0.0), xycoords=("data", "axes fraction"), rotation=90, fontsize=7, va="bottom")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("reader parameters (log)")
        ax.set_title(label(d))
        ax.grid(alpha=0.2)
    axes[0][0].set_ylabel("compute per question / full's (log; below 1: cheaper)")
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(len(names), 7), fontsize=8)
    fig.suptitle(
        "Compute relative to full by reader size: where a row crosses 1.0 it breaks even "
        "(dashed: the embedded readers; dotted: the papers')"
    )
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    _save_png(fig, path)
    plt.close(fig)
    return path


def section(results: str | Path, profile: str, generator: str, csv: Path) -> tuple[str, str, Path | None]:
    """The view's Markdown, HTML and CSV for the block (profile, generator), and beside the CSV its picture
    (``compute_plot``, same stem, ``.png``); ``("", "", None)`` without recounted records of it."""
    from leaderboard import html

    tokens = read_tokens(results)
    if tokens.empty:
        return "", "", None
    tokens = tokens[(tokens.profile == profile) & (tokens.generator == generator)]
    if tokens.empty:
        return "", "", None
    table = cm.DeviceTable.load(DEVICE)
    figs = row_figures(tokens, table)
    long_form(figs, tokens, table).to_csv(csv, index=False)
    key = legend(tokens)
    png = compute_plot(figs, csv.with_suffix(".png"))
    md = [f"{key}\n", f"![compute relative to full by reader size]({png.name})\n"]
    body = [html.note(key), html.figure(profile, generator, png)]
    papers = paper_figures()
    for dataset in figs.dataset.unique():
        lines = markdown_table(figs, dataset, papers)
        md.append(f"### {label(dataset)}\n\n" + "\n".join(lines) + "\n")
        body.append(html.section(label(dataset), _html_table(lines), 3))
    said = sentences(figs)
    checks = " ".join(check_lines(read_checks(results)))
    for text in (said, checks, paper_note(figs, papers)):
        if text:
            md.append(f"{text}\n")
            body.append(f"<p>{htmllib.escape(text.replace('`', ''))}</p>")
    return "\n".join(md), "".join(body), csv


def legend(tokens: pd.DataFrame) -> str:
    n = tokens.groupby("dataset").id.nunique()
    counts = ", ".join(f"{label(d)} {n[d]}" for d in datasets(tokens))
    return (
        f"Predicted, not measured: each row's batch-1 seconds and compute per question from the tokens its records "
        f"counted ({counts} questions, the shuffled sample), on one NVIDIA H200 (`leaderboard/data/devices/h200.json`"
        ", random weights, bf16). The reader is Llama-3-8B; each compressor runs on its paper's checkpoint shape "
        "(CompSelect's extractor and truncator Llama-3.2-3B, EXIT Gemma-2B, Refiner and LongLLMLingua Llama-2-7B, "
        "RECOMP-abs T5-large, Selective-Context GPT-2, the encoders BERT or XLM-R sizes). Total = compression + "
        "generation; online = generation. Decode at a serving engine's CUDA-graph speed (the eager column is "
        "Hugging Face `generate`; T5 has only an eager figure, so RECOMP-abs decodes at it in both). "
        "Token counts are this profile's: its stand-ins and SmolLM2's tokenizer, not the "
        "papers' models and Llama-3's. Compute: 2 x parameters x tokens read and written, per reader: Llama-3.2-1B, "
        "Llama-3.2-3B, Llama-3-8B, Qwen3-14B, Llama-3.3-70B. Breaks even from: the smallest of those readers at which "
        "the row's compute per question falls below `full`'s (the continuous size in brackets)."
    )


def paper_note(figs: pd.DataFrame, papers: Sequence[dict[str, Any]]) -> str:
    """Our prediction beside each paper figure, with the setting that separates them."""
    out = []
    for p in papers:
        ours = figs[(figs.variant == p["variant"]) & (figs.dataset == p["dataset"])]
        if ours.empty:
            continue
        r = ours.iloc[0]
        out.append(
            f"{p['label']}: {p['total_s']:.2f} s total, {p['online_s']:.2f} s online ({p['setting']}); predicted "
            f"here {r.total_s_cudagraph:.2f} s and {r.online_s_cudagraph:.2f} s."
        )
    return " ".join(out)


def _html_table(lines: list[str]) -> str:
    """A Markdown pipe table as an HTML table (the cells are plain text)."""
    cells = [[c.strip().replace("`", "") for c in x.strip("|").split("|")] for x in lines if not x.startswith("|---")]
    head = "".join(f"<th>{htmllib.escape(c)}</th>" for c in cells[0])
    body = "".join("<tr>" + "".join(f"<td>{htmllib.escape(c)}</td>" for c in row) + "</tr>" for row in cells[1:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render(page: Page, d: Data, b: Block) -> None:
    """The headline's Table 2 rows at the papers' reader sizes on a GPU, predicted from their recounted tokens,
    with ``scale_<profile>_<generator>.csv``; nothing without recounted records."""
    if not page.archive:
        md, body, csv = section(d.results, b.profile, b.gen, page.out / f"scale_{b.slug}.csv")
        page.view(md, body, csv)
        page.written += [csv.with_suffix(".png")] if csv else []


VIEW = View("scale", "scale", render)
