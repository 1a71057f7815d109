"""Read run folders into one table, one row per (method variant, dataset, generator, profile), newest kept.

A run folder is any folder holding ``summary.json`` (Hydra single runs and multirun subfolders alike,
``results/<profile>/<generator>/<dataset>/<method>/<override_dirname>/``). The variant is the method's name,
plus the Hydra override string of the folder when there is one (``bm25[method.top_k=2]``); the dataset sample
(``dataset.sample``/``seed``) is not part of it but a column of its own, ``sample``, so the newest run of a
variant wins whichever sample it took. ``dataset.top_k`` is part of it when a run sets it (``full[dataset.top_k=10]``,
in its own folder ``.../full/dataset.sample=shuffled,dataset.seed=0,dataset.top_k=10``), so a run at more passages
never replaces the default's; ``top_k`` is also a column of its own. Provenance comes
from the records: the git commit, the config key of ``run.json``, and the model ids of ``generator_info`` and
``method_info``. Nothing here loads a model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from harness.lm.hardware import cpu_kind
from harness.records import (
    PREDICTIONS,
    RUN,
    SUMMARY,
    cr_nonempty,
    echo_share,
    hedge_share,
    kept_nothing,
    read_jsonl,
    subem_from_echo,
    subem_from_hedge,
    subem_strict,
)

KEY = ["profile", "generator", "dataset", "variant"]
# Overrides that change how a run executes, not what it computes: left out of the variant's name so that such
# runs compare with the others (torch thread count: the same greedy answers up to floating-point order).
EXECUTION_ONLY = {"generator.threads"}
METRICS = ("subem", "em", "f1")
NUMERIC = (
    "n",
    "subem",
    "em",
    "f1",
    "echo",
    "subem_from_echo",
    "hedge",
    "subem_from_hedge",
    "subem_strict",
    "cr",
    "cr_mean",
    "original_tokens",
    "compressed_tokens",
    "kept_nothing",
    "cr_nonempty",
    "failed_examples",
    "compress_s",
    "generate_s",
    "online_latency_s",
    "total_latency_s",
    "latency_n",
)
# Summary fields added after runs were archived: recounted from the records of a summary without them.
RECOUNTED = {
    "kept_nothing": kept_nothing,
    "cr_nonempty": cr_nonempty,
    "echo": echo_share,
    "subem_from_echo": subem_from_echo,
    "hedge": hedge_share,
    "subem_from_hedge": subem_from_hedge,
    "subem_strict": subem_strict,
}


def override_dirname(folder: Path) -> str:
    """The Hydra override string the run folder was named by ('' when none or unknown)."""
    hydra_yaml = folder / ".hydra" / "hydra.yaml"
    if not hydra_yaml.is_file():
        return ""
    try:
        job = (yaml.safe_load(hydra_yaml.read_text()) or {}).get("hydra", {}).get("job", {})
    except yaml.YAMLError:
        return ""
    value = job.get("override_dirname") or ""
    if "${" in str(value):
        return ""
    return ",".join(o for o in str(value).split(",") if o and o.lstrip("+~").split("=")[0] not in EXECUTION_ONLY)


LATENCY = ("compress_s", "generate_s", "online_latency_s", "total_latency_s")


def sample_name(summary: dict[str, Any]) -> str:
    """Which examples a run took: ``first`` (the split's first n; also summaries written before samples
    existed) or ``shuffled seed <s>`` (the first n of a seeded permutation, ``dataset.sample=shuffled``)."""
    if summary.get("sample", "first") in (None, "first"):
        return "first"
    return f"{summary['sample']} seed {summary.get('sample_seed')}"


def top_k(summary: dict[str, Any], run: dict[str, Any]) -> int | None:
    """The passages per question a run read (``dataset.top_k`` of its config; None for a run that kept none)."""
    cfg = summary.get("config") or run.get("config") or {}
    k = (cfg.get("dataset") or {}).get("top_k")
    return int(k) if isinstance(k, int | float) else None


def latency_fields(summary: dict[str, Any]) -> dict[str, Any]:
    """Latency from the batch-1 sample only, throughput (``batched_*``, seconds per example) from the accuracy
    pass only, and only where all its records were timed at one batch size and thread count. Summaries
    written before the two protocols were kept apart (``latency_protocol: batched``) give no latency."""
    out: dict[str, Any] = {
        "latency_protocol": summary.get("latency_protocol"),
        "latency_threads": ",".join(map(str, summary.get("latency_threads") or [])) or None,
        "latency_n": summary.get("latency_n"),
        **{k: summary.get(k) for k in LATENCY},
    }
    if out["latency_protocol"] != "batch1":
        out.update({k: None for k in LATENCY}, latency_protocol=None, latency_threads=None, latency_n=0)
    b = summary.get("batched") or {}
    t = summary.get("timed_at") or {}
    uniform = b.get("uniform")
    if uniform is None:  # older summaries: decide from the counts
        uniform = bool(t) and all(len(v) == 1 and "unknown" not in v for v in t.values())
    batch = next(iter(t.get("batch") or {}), None) if uniform else None
    out["batched_at"] = _whole(batch) if batch is not None else None
    out["batched_compress_s"] = b.get("compress_s") if uniform else None
    out["batched_generate_s"] = b.get("generate_s") if uniform else None
    return out


def timed_at(summary: dict[str, Any]) -> str | None:
    """The batch sizes and thread counts a run's timings were taken at, with their record counts (``b8x50
    b1x150 / t1x200``); ``?`` counts records made before these were kept. None for a summary without them."""
    t = summary.get("timed_at")
    if not t:
        return None

    def part(prefix: str, counts: dict[str, int]) -> str:
        merged: dict[str, int] = {}
        for k, v in counts.items():  # "1.0" and "1" are one setting (older summaries counted them apart)
            name = "?" if k == "unknown" else _whole(k)
            merged[name] = merged.get(name, 0) + v
        return " ".join(f"{prefix}{k}x{v}" for k, v in merged.items())

    return f"{part('b', t.get('batch') or {})} / {part('t', t.get('threads') or {})}"


def _whole(text: str) -> str:
    """``"1.0"`` as ``"1"``; any other text as it is."""
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() else text


def model_ids(info: Any) -> list[str]:
    """Every model named in a ``describe()`` dict: ``{"ref": ..., "sha256"|"revision": ...}`` entries and
    string values of keys that name a model or checkpoint."""
    out: list[str] = []
    if isinstance(info, dict):
        if isinstance(info.get("ref"), str):
            pin = info.get("sha256") or info.get("revision") or info.get("commit_hash") or ""
            out.append(f"{info['ref']}@{str(pin)[:12]}" if pin else info["ref"])
            return out
        for k, v in info.items():
            if isinstance(v, str) and any(w in k.lower() for w in ("model", "checkpoint", "encoder", "scorer_ref")):
                out.append(v)
            else:
                out.extend(model_ids(v))
    elif isinstance(info, list):
        for v in info:
            out.extend(model_ids(v))
    return list(dict.fromkeys(out))


def _trained_through(info: Any) -> list[str]:
    """Every ``trained_through`` value in a ``describe()`` tree, in order."""
    if isinstance(info, dict):
        own = [info["trained_through"]] if isinstance(info.get("trained_through"), str) else []
        return own + [g for k, v in info.items() if k != "trained_through" for g in _trained_through(v)]
    if isinstance(info, list):
        return [g for v in info for g in _trained_through(v)]
    return []


def trained_elsewhere(info: Any, generator: str) -> str | None:
    """The generators other than ``generator`` that a trained part of the method was trained through (the
    ``trained_through`` values of its ``describe()`` dict), comma-separated; None where all match or none is named."""
    return ", ".join(g for g in dict.fromkeys(_trained_through(info)) if g != generator) or None


def machine(summary: dict[str, Any]) -> str | None:
    """The CPU that made a run, as latency passes name it (``harness.lm.hardware.cpu_label``): the model name, plus
    what it runs natively where the generator recorded its CPU flags; the bare model name for runs made before."""
    cpu = (summary.get("hardware") or {}).get("cpu")
    lm = (summary.get("generator_info") or {}).get("lm")
    flags = (lm.get("hardware") or {}).get("cpu_flags") if isinstance(lm, dict) else None
    return f"{cpu}, {cpu_kind(flags)}" if cpu and flags else cpu


def _row(folder: Path, root: Path) -> dict[str, Any] | None:
    try:
        s = json.loads((folder / SUMMARY).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not all(k in s for k in ("method", "dataset", "generator", "profile")):
        return None
    od = override_dirname(folder)
    run = {}
    if (folder / RUN).is_file():
        run = json.loads((folder / RUN).read_text())
    git = s.get("git") or {}
    minfo, ginfo = s.get("method_info") or {}, s.get("generator_info") or {}
    row = {
        "profile": s["profile"],
        "generator": s["generator"],
        "dataset": s["dataset"],
        "method": s["method"],
        "variant": f"{s['method']}[{od}]" if od else s["method"],
        "overrides": od,
        "split": s.get("split"),
        "sample": sample_name(s),
        "top_k": top_k(s, run),
        **{k: s.get(k) for k in NUMERIC},
        **latency_fields(s),
        "timed_at": timed_at(s),
        "reused_contexts": int(s.get("reused_contexts") or 0),  # contexts read back from another reader's run
        "diagnostics": json.dumps(s.get("diagnostics") or {}, sort_keys=True),
        "oracle": bool(minfo.get("oracle", False)),
        "backbone": (s.get("backbone") or {}).get("switch"),  # the compressors' LM switch (conf/backbone/)
        "backbone_lm": (s.get("backbone") or {}).get("lm"),  # the methods' shared LM the run's config set
        "commit": git.get("commit"),
        "dirty": git.get("dirty"),
        "config_key": s.get("config_key") or run.get("key"),
        "generator_model": "; ".join(model_ids(ginfo.get("model"))) or None,
        "generator_backend": ginfo.get("backend"),
        "method_models": "; ".join(model_ids(minfo)) or None,
        "method_info": json.dumps(minfo, sort_keys=True, default=str),
        "trained_elsewhere": trained_elsewhere(minfo, s["generator"]),
        "packages": json.dumps(s.get("packages") or {}, sort_keys=True),
        "hardware": machine(s),
        "finished_at": s.get("finished_at"),
        "folder": str(folder.resolve()),
        "relpath": str(folder.resolve().relative_to(root.resolve()))
        if folder.resolve().is_relative_to(root.resolve())
        else str(folder),
        "mtime": (folder / SUMMARY).stat().st_mtime,
    }
    missing = [k for k in RECOUNTED if s.get(k) is None]
    if missing and (folder / PREDICTIONS).is_file():  # summaries written before these fields
        recs = read_records(folder, s.get("n"))
        row.update({k: RECOUNTED[k](recs) for k in missing})
    return row


def run_folders(root: str | Path) -> list[Path]:
    return sorted(p.parent for p in Path(root).rglob(SUMMARY))


def collect(roots: str | Path | Iterable[str | Path]) -> pd.DataFrame:
    """One row per (profile, generator, dataset, variant) over every run folder under ``roots``; the newest
    run (by ``finished_at``, then file time) wins. ``runs_seen`` counts the folders of each key."""
    roots = [roots] if isinstance(roots, str | Path) else list(roots)
    rows = [r for root in roots for f in run_folders(root) if (r := _row(f, Path(root))) is not None]
    if not rows:
        return pd.DataFrame(columns=[*KEY, "method", *NUMERIC])
    df = pd.DataFrame(rows)
    df["finished"] = pd.to_datetime(df["finished_at"], errors="coerce", utc=True, format="ISO8601")
    df = df.sort_values(["finished", "mtime"], na_position="first")
    seen = df.groupby(KEY).size().rename("runs_seen")
    df = df.drop_duplicates(KEY, keep="last").join(seen, on=KEY)
    return df.drop(columns=["mtime"]).sort_values(KEY).reset_index(drop=True)


def read_predictions(folder: str | Path, n: int | None = None) -> pd.DataFrame:
    """The scored records of a run (``read_records``) as a table."""
    return pd.DataFrame(read_records(folder, n))


def read_records(folder: str | Path, n: int | None = None) -> list[dict[str, Any]]:
    """The scored records of a run as written: the first ``n`` example ids in file order (the examples its
    summary was computed from), the last record of an id winning, as the harness reads them on resume."""
    recs = {r["id"]: r for r in read_jsonl(Path(folder) / PREDICTIONS)}
    scored = [r for r in recs.values() if "error" not in r]  # a failed example (on_error: skip) has no scores
    return scored[: n if n is not None else None]
