"""The papers' numbers (``data/reference.csv``), their settings (``data/settings.yaml``), the map
from paper row labels to harness method variants (``data/methods.yaml``) and what each reader's validation
showed (``data/readers.yaml``).

Every reference number carries its source paper, table, setting, generator, condition, method, dataset and
metric. ``comparison`` puts our rows beside the papers' rows of a comparable setting only (CompSelect's),
with the difference; the other settings are rendered as their own tables and never share a column with ours.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

DATA = Path(__file__).resolve().parent / "data"
COMPARED = ("subem", "f1", "cr")


def load_reference(path: str | Path = DATA / "reference.csv") -> pd.DataFrame:
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    df["value_text"] = df["value"]
    df["value"] = df["value"].astype(float)
    return df


@lru_cache(maxsize=1)
def settings() -> dict[str, dict[str, Any]]:
    return yaml.safe_load((DATA / "settings.yaml").read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def method_map() -> dict[str, list[str]]:
    """Paper label -> harness variants, in the papers' row order."""
    return {k: list(v or []) for k, v in yaml.safe_load((DATA / "methods.yaml").read_text("utf-8")).items()}


@lru_cache(maxsize=1)
def reader_notes() -> dict[str, str]:
    """Generator name -> what its prompt selection on validation showed, where that qualifies its rows."""
    return dict(yaml.safe_load((DATA / "readers.yaml").read_text(encoding="utf-8")) or {})


def table2_variants() -> set[str]:
    """The variants that make the rows of the paper's Table 2 (every label of ``methods.yaml``)."""
    return {v for vs in method_map().values() for v in vs}


def variant_order(variants: list[str]) -> list[str]:
    """Our variants in the papers' row order; unknown variants alphabetically after them."""
    known = [v for vs in method_map().values() for v in vs]

    def key(v: str) -> tuple[int, str]:
        base = v.split("[", 1)[0]
        return (known.index(base) if base in known else len(known), v)

    return sorted(variants, key=key)


def paper_generator(generator: str) -> tuple[str, bool]:
    """(the paper's generator label to compare a harness generator with, whether it is the same model)."""
    s = settings()["compselect"]
    if generator in s["generators"]:
        return s["generators"][generator], True
    return s["anchor"], False


def _value(series: pd.Series) -> float | None:
    v = series.iloc[0] if len(series) else None
    return None if v is None or pd.isna(v) else float(v)


def comparison(ours: pd.DataFrame, reference: pd.DataFrame, profile: str, generator: str) -> pd.DataFrame:
    """CompSelect's Table 2 (Table 12 for the 70B generator; Table 1 for the oracle "Sentences w/ answer"
    row of the 8B) beside our rows of one (profile, generator): one row per (paper label, our variant) with
    ``<ds>_<m>_ours``, ``_paper`` and ``_diff``. Paper rows without an adapter (BottleNeck) have no numbers
    of ours."""
    label, same = paper_generator(generator)
    tables = ["Table 12"] if label.startswith("LLaMA3.3-70B") else ["Table 2", "Table 1"]
    ref = reference[
        (reference.setting == "compselect")
        & reference.table.isin(tables)
        & (reference.generator == label)
        & reference.metric.isin(COMPARED)
    ]
    mine = ours[(ours.profile == profile) & (ours.generator == generator)]
    datasets = list(dict.fromkeys([*ref.dataset, *mine.dataset]))
    rows = []
    for paper_label, variants in method_map().items():
        r = ref[ref.method == paper_label]
        if r.empty:
            continue
        table = next(t for t in tables if t in set(r.table))
        r = r[r.table == table]
        present = [v for v in mine.variant.unique() if v.split("[", 1)[0] in variants] or [None]
        for v in present:
            row: dict[str, Any] = {
                "paper_method": paper_label,
                "variant": v,
                "paper_generator": label,
                "same_generator": same,
                "source": f"000 CompSelect {table}",
            }
            for ds in datasets:
                for m in COMPARED:
                    p = _value(r[(r.dataset == ds) & (r.metric == m)].value)
                    o = _value(mine[(mine.variant == v) & (mine.dataset == ds)][m]) if v else None
                    row[f"{ds}_{m}_ours"], row[f"{ds}_{m}_paper"] = o, p
                    row[f"{ds}_{m}_diff"] = o - p if o is not None and p is not None else None
            rows.append(row)
    return pd.DataFrame(rows)


def setting_tables(reference: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The papers' numbers as their own tables, one per (source, table, generator): rows are (condition,
    method), columns ``<dataset> <metric>``; titles name the setting. Never merged with our columns."""
    out = []
    for (src, tab, gen), g in reference.groupby(["source", "table", "generator"], sort=False):
        setting = g.setting.iloc[0]
        s = settings()[setting]
        ds, ms = list(dict.fromkeys(g.dataset)), list(dict.fromkeys(g.metric))
        g = g.assign(column=g.dataset + " " + g.metric, condition=g.condition.replace("", "-"))
        wide = g.pivot_table(
            index=["condition", "method"], columns="column", values="value_text", aggfunc="first", sort=False
        )
        cols = [f"{d} {m}" for d in ds for m in ms if f"{d} {m}" in wide.columns]
        wide = wide[cols].reset_index().fillna("")
        if (wide.condition == "-").all():
            wide = wide.drop(columns="condition")
        title = (
            f"{src}, {tab} — setting `{setting}` ({'comparable' if s['comparable'] else 'not comparable'}"
            f" with ours), generator {gen}; {s['retrieval']}; metrics: {s['metrics']}"
        )
        out.append((title, wide))
    return out


@lru_cache(maxsize=1)
def claims() -> dict[str, dict]:
    """Seed method -> ``{paper, above}`` (``data/claims.yaml``): the rows its paper reports it above."""
    return dict(yaml.safe_load((DATA / "claims.yaml").read_text(encoding="utf-8")) or {})


@lru_cache(maxsize=1)
def reader_sizes() -> dict[str, dict]:
    """Model reference -> ``{label, params, size}`` (``data/reader_sizes.yaml``): the readers' names and sizes in
    the views."""
    return dict(yaml.safe_load((DATA / "reader_sizes.yaml").read_text(encoding="utf-8")) or {})
