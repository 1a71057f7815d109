"""Two robustness views of CompSelect's paper (000), read from the records: no model is loaded.

- **When retrieval fails** (000 Table 7): every row re-scored on the questions whose passages, as the run read
  them, hold no gold answer, and on the others. "As the run read them": the dataset file is read by id with the
  harness's own loader (``harness.data``: the run's ``dataset.top_k`` after its ``dataset.rank``, BM25 on HotpotQA),
  and a passage holds a gold answer by the data's ``has_answer`` (the SubEM test of the passage text where the field
  is missing). Archived records keep no context text, so the file is the only place to look.
- **More passages** (000's appendix retriever study): a row run with ``dataset.top_k=K`` (its variant is
  ``<method>[dataset.top_k=K]``, its own folder and key) beside the same method at the default k, on the questions
  both answered: SubEM and CR at each k, the change and its paired bootstrap interval. A dataset that ships no more
  passages than the default k is named as such.

Intervals and tests are ``harness.stats`` (percentile bootstrap, paired bootstrap against ``full``).
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.data import DatasetError, DatasetSpec, load_dataset, read_examples
from harness.metrics import corpus_cr, normalize, subem
from harness.provenance import REPO_ROOT
from harness.records import SUMMARY, kept_nothing
from harness.stats import RESAMPLES, SEED, bootstrap_ci, paired_bootstrap
from leaderboard.collect import read_predictions
from leaderboard.page import Block, Data, Page, View
from leaderboard.reference import method_map, variant_order
from leaderboard.tables import DAGGER, datasets, label

NO_GOLD, GOLD = "no gold", "gold"
TABLE7 = "Table 7"
# Table 7's own rows beside the Table 2 labels of data/methods.yaml
PAPER_ROWS = {"Ours w/ truncator": "compselect", "Ours w/o truncator": "compselect_no_truncator"}
_TOP_K = re.compile(r"(^|,)dataset\.top_k=(\d+)(?=,|$)")


def data_root() -> Path:
    """Where the datasets are: ``RAG_HARNESS_DATA``, else ``shared/data`` beside the repository (as ``conf/``)."""
    return Path(os.environ.get("RAG_HARNESS_DATA") or (REPO_ROOT / ".." / "shared" / "data").resolve())


def _dataset_config(folder: str | Path) -> dict[str, Any]:
    """The ``dataset`` part of a run's config (its summary)."""
    s = json.loads((Path(folder) / SUMMARY).read_text(encoding="utf-8"))
    return (s.get("config") or {}).get("dataset") or {"name": s["dataset"], "split": s.get("split") or "test"}


def _holds(passage, answers) -> bool:
    has = passage.meta.get("has_answer")
    return bool(has) if has is not None else bool(subem(passage.text, answers))


@lru_cache(maxsize=32)
def gold_in_top_k(dataset: str, split: str, top_k: int, rank: str) -> dict[str, bool]:
    """Per example id of ``<data root>/<dataset>/<split>.jsonl.gz``: whether its top ``top_k`` passages after
    ``rank`` (``harness.data.load_dataset``) hold a gold answer."""
    path = data_root() / dataset / f"{split}.jsonl.gz"
    spec = DatasetSpec(dataset, str(path), top_k=top_k, rank=rank, skip_unanswerable=True)
    return {ex.id: any(_holds(p, ex.answers) for p in ex.passages) for ex in load_dataset(spec)}


def run_gold(folder: str | Path) -> dict[str, bool]:
    """``gold_in_top_k`` for the passages a run read (its config's dataset, split, ``top_k`` and ``rank``)."""
    d = _dataset_config(folder)
    return gold_in_top_k(d["name"], d.get("split") or "test", int(d.get("top_k") or 5), d.get("rank") or "none")


@lru_cache(maxsize=8)
def passages_per_question(dataset: str, split: str = "test") -> int:
    """The most passages any question of a dataset file ships with."""
    return max(len(ex.passages) for ex in read_examples(data_root() / dataset / f"{split}.jsonl.gz", True))


def table7_variants(variants: list[str]) -> list[str]:
    """The rows shown: the Table 2 rows (``data/methods.yaml``) and Table 7's own (``PAPER_ROWS``) that ran."""
    known = {v for vs in method_map().values() for v in vs} | set(PAPER_ROWS.values())
    return variant_order([v for v in dict.fromkeys(variants) if v in known])


def _yes_no(answers) -> bool:
    """A yes/no question (every gold answer normalises to ``yes`` or ``no``): its answer is in no passage's
    words, and SQuAD F1 gives it 0 unless the reply is exactly that word."""
    return bool(answers) and all(normalize(a) in ("yes", "no") for a in answers)


def _scores(p: pd.DataFrame, base: pd.DataFrame, resamples: int, seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {"n": len(p)}
    both = p.merge(base, on="id", suffixes=("", "_b")) if len(base) and len(p) else pd.DataFrame()
    out["n_paired"] = len(both)
    for m in ("f1", "subem"):
        ci = bootstrap_ci(p[m], resamples, seed)
        out.update({m: ci.mean, f"{m}_lo": ci.lo, f"{m}_hi": ci.hi})
        t = paired_bootstrap(both[m], both[f"{m}_b"], resamples, seed) if len(both) else None
        out.update(
            {
                f"d_{m}": t.delta if t else None,
                f"d_{m}_lo": t.lo if t else None,
                f"d_{m}_hi": t.hi if t else None,
                f"p_{m}": t.p if t else None,
                f"sig_{m}": t.significant if t else None,
            }
        )
    return out


def unreliable(
    df: pd.DataFrame, profile: str, generator: str, baseline: str = "full", resamples: int = RESAMPLES, seed: int = SEED
) -> pd.DataFrame:
    """One row per (variant, dataset, subset: ``no gold`` / ``gold``) of one block: ``n`` (of ``n_run``), F1 and SubEM
    with 95% intervals, ``d_``/``p_``/``sig_`` against ``baseline`` on the shared ids of the same subset, the share
    of the subset's contexts the method emptied (``kept_nothing``: the paper's truncator may keep nothing) and its
    yes/no questions (``yes_no``)."""
    g = df[(df.profile == profile) & (df.generator == generator)]
    cols = ["id", "answers", "f1", "subem", "compressed_tokens"]
    rows = []
    for ds in datasets(g):
        by_variant = {r.variant: r for r in g[g.dataset == ds].itertuples()}
        read = lambda r: read_predictions(r.folder, None if pd.isna(r.n) else int(r.n))[cols]  # noqa: E731
        base = read(by_variant[baseline]) if baseline in by_variant else pd.DataFrame(columns=cols)
        shown = table7_variants(list(by_variant))
        for v in ([baseline] if baseline in by_variant and baseline not in shown else []) + shown:
            gold = run_gold(by_variant[v].folder)
            p = read(by_variant[v])
            p = p[p.id.isin(gold.keys())]
            b = base if v != baseline else base.iloc[0:0]
            for subset, flag in ((NO_GOLD, False), (GOLD, True)):
                part = p[p.id.map(gold) == flag]
                s = _scores(part, b[b.id.map(gold) == flag], resamples, seed)
                s["yes_no"] = int(part.answers.map(_yes_no).sum())
                s["kept_nothing"] = kept_nothing(part.to_dict("records"))
                rows.append({"variant": v, "dataset": ds, "subset": subset, "n_run": len(p), **s})
    return pd.DataFrame(rows)


def _ci(r: dict, m: str) -> str:
    return "-" if pd.isna(r[m]) else f"{r[m]:.2f} [{r[f'{m}_lo']:.1f}, {r[f'{m}_hi']:.1f}]"


def _delta(r: dict, m: str) -> str:
    v = r.get(f"d_{m}")
    if v is None or pd.isna(v):
        return "-"
    mark = "" if r[f"sig_{m}"] else f" {DAGGER}"
    return f"{v:+.2f} [{r[f'd_{m}_lo']:+.1f}, {r[f'd_{m}_hi']:+.1f}], p={r[f'p_{m}']:.3f}{mark}"


def unreliable_rows(t: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """``unreliable``'s table, one line per (dataset, variant): the no-gold subset, then the gold one beside it."""
    head = ["Dataset", "Method", "n no gold / n", "kept nothing % no gold / gold"]
    for s in (NO_GOLD, GOLD):
        head += [f"F1 {s} [95% CI]", f"ΔF1 {s} vs full, p", f"SubEM {s} [95% CI]", f"ΔSubEM {s} vs full, p"]
    head.insert(8, "n gold")
    rows = []
    for (ds, v), g in t.groupby(["dataset", "variant"], sort=False):
        no, yes = (g[g.subset == s].iloc[0].to_dict() for s in (NO_GOLD, GOLD))
        kept = " / ".join("-" if r["kept_nothing"] is None else f"{100 * r['kept_nothing']:.1f}" for r in (no, yes))
        cells = [label(ds), v, f"{no['n']} / {no['n_run']}", kept]
        cells += [_ci(no, "f1"), _delta(no, "f1"), _ci(no, "subem"), _delta(no, "subem"), str(yes["n"])]
        cells += [_ci(yes, "f1"), _delta(yes, "f1"), _ci(yes, "subem"), _delta(yes, "subem")]
        rows.append(cells)
    return head, rows


def paper_rows(reference: pd.DataFrame, t: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The paper's Table 7 (F1 on its no-gold questions, its generator) row by row, with the variant that
    implements each label and, apart, our F1 on our no-gold subset."""
    ref = reference[(reference.source == "000 CompSelect") & (reference.table == TABLE7)]
    ds = list(dict.fromkeys(ref.dataset))
    gen = ref.generator.iloc[0] if len(ref) else "?"
    head = ["Paper method", "Ours"] + [f"{label(d)} F1 paper ({gen})" for d in ds]
    head += [f"{label(d)} F1 no gold, ours" for d in ds]
    labels = {**{k: (v[0] if v else None) for k, v in method_map().items()}, **PAPER_ROWS}
    rows = []
    for lab, r in ref.groupby("method", sort=False):
        v = labels.get(lab)
        paper = [r[r.dataset == d].value_text.iloc[0] if (r.dataset == d).any() else "-" for d in ds]
        ours = []
        for d in ds:
            hit = t[(t.variant == v) & (t.dataset == d) & (t.subset == NO_GOLD)] if v else t.iloc[0:0]
            ours.append(f"{hit.f1.iloc[0]:.2f}" if len(hit) and pd.notna(hit.f1.iloc[0]) else "-")
        rows.append([lab, v or "— (no adapter)", *paper, *ours])
    return head, rows


def findings(t: pd.DataFrame, baseline: str = "full") -> str:
    """Per dataset, the no-gold share, which rows differ significantly from ``baseline`` in F1 there, and how often
    the paper's own rows (``PAPER_ROWS``) kept nothing there (the truncator's way of suppressing noise)."""
    parts = []
    for ds, g in t[t.subset == NO_GOLD].groupby("dataset", sort=False):
        b = g[g.variant == baseline]
        share = f"{int(b.n.iloc[0])} of {int(b.n_run.iloc[0])}" if len(b) else "?"
        if len(b) and b.yes_no.iloc[0]:
            share += f", {int(b.yes_no.iloc[0])} of them yes/no"
        sig = g[g.sig_f1.fillna(False).astype(bool)]
        named = ", ".join(f"`{r.variant}` {r.d_f1:+.1f}" for r in sig.itertuples()) or "none"
        own = g[g.variant.isin(PAPER_ROWS.values()) & g.kept_nothing.notna()]
        kept = ", ".join(f"`{r.variant}` {100 * r.kept_nothing:.1f}%" for r in own.itertuples())
        kept = f"; kept nothing on them: {kept}" if kept else ""
        parts.append(f"{label(ds)} ({share} questions): F1 significantly different from `{baseline}`: {named}{kept}.")
    return " ".join(parts)


# ---- more passages ---------------------------------------------------------------------------------------------


def more_k(variant: str) -> tuple[str, int] | None:
    """(the variant at the default k, K) for a variant run with ``dataset.top_k=K`` (``full[dataset.top_k=10]``
    -> ``("full", 10)``); None for any other."""
    m = re.fullmatch(r"([^\[]+)\[(.*)\]", variant)
    if not m or not (k := _TOP_K.search(m.group(2))):
        return None
    rest = _TOP_K.sub(lambda x: x.group(1), m.group(2)).strip(",").replace(",,", ",")
    return (f"{m.group(1)}[{rest}]" if rest else m.group(1)), int(k.group(2))


def with_top_k(df: pd.DataFrame) -> pd.Series:
    """The rows of collected runs run with ``dataset.top_k`` set: only "More passages" reads them
    (``MORE_VIEW.owns``)."""
    return df.variant.map(lambda v: more_k(v) is not None).astype(bool)


def split_more(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the rows at the default k, the rows run with ``dataset.top_k`` set): Table 2 and the other views read the
    first only, so a k = 10 row is never ranked or compared with the k = 5 ones."""
    more = with_top_k(df)
    return df[~more].reset_index(drop=True), df[more].reset_index(drop=True)


def _cr_change(a: pd.DataFrame, resamples: int, seed: int) -> tuple[float, float, float]:
    """CR (ratio of sums) at the larger k minus at the default k on the same questions, with its paired
    percentile bootstrap interval (the questions resampled together, as ``harness.stats``)."""
    o5, c5, o10, c10 = (a[c].to_numpy(float) for c in ("ot_5", "ct_5", "ot_k", "ct_k"))
    idx = np.random.default_rng(seed).integers(0, len(a), size=(resamples, len(a)))
    with np.errstate(divide="ignore", invalid="ignore"):
        d = o10[idx].sum(1) / c10[idx].sum(1) - o5[idx].sum(1) / c5[idx].sum(1)
        lo, hi = np.nanquantile(d, [0.025, 0.975])
    cr5, cr10 = corpus_cr(list(o5), list(c5))[0], corpus_cr(list(o10), list(c10))[0]
    return (cr10 - cr5 if cr5 is not None and cr10 is not None else float("nan")), float(lo), float(hi)


def more_passages(
    base: pd.DataFrame, more: pd.DataFrame, profile: str, generator: str, resamples: int = RESAMPLES, seed: int = SEED
) -> pd.DataFrame:
    """One row per (variant run at K passages, dataset) of a block beside the same variant at the default k, on
    the questions both answered: ``subem_5``/``subem_k``, ``cr_5``/``cr_k``, ``d_subem`` with its paired interval
    and p, ``d_cr`` with its interval. A variant at K without a default-k row is left out."""
    pick = lambda d: d[(d.profile == profile) & (d.generator == generator)]  # noqa: E731
    b, m = pick(base), pick(more)
    rows = []
    for r in m.itertuples():
        v5, k = more_k(r.variant)  # type: ignore[misc]
        hit = b[(b.variant == v5) & (b.dataset == r.dataset)]
        if hit.empty:
            continue
        h = hit.iloc[0]
        pk = read_predictions(r.folder, None if pd.isna(r.n) else int(r.n))
        p5 = read_predictions(h.folder, None if pd.isna(h.n) else int(h.n))
        a = p5.merge(pk, on="id", suffixes=("_5", "_k")).rename(
            columns={
                "original_tokens_5": "ot_5",
                "compressed_tokens_5": "ct_5",
                "original_tokens_k": "ot_k",
                "compressed_tokens_k": "ct_k",
            }
        )
        t = paired_bootstrap(a.subem_k, a.subem_5, resamples, seed)
        d_cr, cr_lo, cr_hi = _cr_change(a, resamples, seed)
        rows.append(
            {
                "variant": v5,
                "dataset": r.dataset,
                "k": k,
                "k_default": int(h.top_k) if "top_k" in h and pd.notna(h.top_k) else 5,
                "n": len(a),
                "subem_5": 100 * a.subem_5.mean(),
                "subem_k": 100 * a.subem_k.mean(),
                "d_subem": t.delta,
                "d_subem_lo": t.lo,
                "d_subem_hi": t.hi,
                "p_subem": t.p,
                "sig_subem": t.significant,
                "cr_5": corpus_cr(list(a.ot_5), list(a.ct_5))[0],
                "cr_k": corpus_cr(list(a.ot_k), list(a.ct_k))[0],
                "d_cr": d_cr,
                "d_cr_lo": cr_lo,
                "d_cr_hi": cr_hi,
            }
        )
    out = pd.DataFrame(rows)
    return out.sort_values(["dataset", "d_subem"], ascending=[True, False]).reset_index(drop=True) if rows else out


def _known(x: Any) -> bool:
    """A number to print (a CR is undefined where a row keeps no token, e.g. ``naive``)."""
    return x is not None and not pd.isna(x)


def more_rows(t: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    head = ["Dataset", "Method", "k", "n", "SubEM k=5", "SubEM at k", "ΔSubEM [95% CI], p", "CR k=5", "CR at k"]
    head.append("ΔCR [95% CI]")
    rows = [
        [
            label(r.dataset),
            r.variant,
            f"{r.k_default} → {r.k}",
            str(r.n),
            f"{r.subem_5:.2f}",
            f"{r.subem_k:.2f}",
            f"{r.d_subem:+.2f} [{r.d_subem_lo:+.1f}, {r.d_subem_hi:+.1f}], p={r.p_subem:.3f}"
            + ("" if r.sig_subem else f" {DAGGER}"),
            f"{r.cr_5:.2f}×" if _known(r.cr_5) else "-",
            f"{r.cr_k:.2f}×" if _known(r.cr_k) else "-",
            f"{r.d_cr:+.2f} [{r.d_cr_lo:+.2f}, {r.d_cr_hi:+.2f}]" if _known(r.d_cr) else "-",
        ]
        for r in t.itertuples()
    ]
    return head, rows


def more_words(t: pd.DataFrame, names: list[str], k_default: int = 5) -> str:
    """Per dataset, in words: which methods lose the least SubEM at more passages, or why there is no row."""
    parts = []
    for ds in names:
        g = t[t.dataset == ds] if len(t) else t
        if len(g):
            order = ", ".join(f"`{r.variant}` {r.d_subem:+.1f}" for r in g.itertuples())
            k = int(g.k.iloc[0])
            sig = g[g.sig_subem.fillna(False).astype(bool)]
            down = ", ".join(f"`{r.variant}`" for r in sig.itertuples() if r.d_subem < 0) or "none"
            up = ", ".join(f"`{r.variant}`" for r in sig.itertuples() if r.d_subem > 0) or "none"
            parts.append(
                f"{label(ds)}, {k_default} → {k} passages, SubEM change, least lost first: {order}; "
                f"significantly lower at {k}: {down}; significantly higher: {up}"
            )
            continue
        try:
            most = passages_per_question(ds)
        except (DatasetError, OSError):
            parts.append(f"{label(ds)}: its data file is not here to say how many passages it ships")
            continue
        if most <= k_default:
            parts.append(
                f"{label(ds)}: cannot give more passages (its data ship {most} per question, all of them read at "
                f"k = {k_default})"
            )
        else:
            parts.append(f"{label(ds)}: ships up to {most} passages per question, no run at more than {k_default} yet")
    return "; ".join(parts) + "." if parts else ""


# ---- the page's sections ------------------------------------------------------------------------------------------

FAILS = "When retrieval fails"
MORE = "More passages"
_FAILS_INTRO = (
    "CompSelect's Table 7 on this block: every Table 2 row (and `compselect_no_truncator`, the paper's \"Ours w/o "
    'truncator", where it ran) re-scored on the questions whose passages, as the run read them (its top-k after its '
    "ranking: BM25 on HotpotQA), hold no gold answer (the data's `has_answer`), and beside it on the others. "
    "95% bootstrap intervals; Δ = the row minus `{baseline}` on the same questions of the same subset (paired "
    f"bootstrap; {DAGGER} = not significant). n no gold / n: of the run's own questions (rows at n = 200: the "
    "shuffled 200)."
)
_PAPER_NOTE = (
    "The paper's Table 7 (000 CompSelect, F1 on its test questions whose top-5 hold no gold answer, {gen}, "
    "adversarial DPR top-5 from full Wikipedia): the paper's figures, not ours. Our F1 on our no-gold subset is "
    "beside them to read, not to compare: another generator and another retrieval."
)
_MORE_INTRO = (
    "The same method at more passages per question (`dataset.top_k=K`: the variant `<method>[dataset.top_k=K]`, its "
    "own run folder, never mixed into the tables above) beside its row at the default k, on the questions both "
    f"answered: SubEM and CR at each k, the change (more passages minus the default) with its paired bootstrap 95% "
    f"interval ({DAGGER} = not significant). CR = original / compressed tokens (ratio of sums); at more passages the "
    "original counts all of them, so a method that keeps as much as before doubles its CR."
)


def _frame_html(head: list[str], rows: list[list[str]]) -> str:
    from leaderboard import html

    return html.frame_html(pd.DataFrame(rows, columns=head))


def _note_html(text: str) -> str:
    from leaderboard import html

    return html.note(text)


def fails_section(
    full: pd.DataFrame, reference: pd.DataFrame, profile: str, generator: str, baseline: str, csv: Path
) -> tuple[str, str, bool]:
    """ "When retrieval fails": its Markdown, its HTML, and whether ``csv`` (``unreliable``'s table) was written."""
    from leaderboard.tables import markdown

    intro = _FAILS_INTRO.format(baseline=baseline)
    try:
        t = unreliable(full, profile, generator, baseline)
    except (DatasetError, OSError) as e:
        why = f"Not shown: the passages the runs read cannot be re-read here ({' '.join(str(e).split())[:300]})."
        return f"{intro}\n\n{why}\n", _note_html(f"{intro} {why}"), None
    if t.empty:
        return "", "", None
    t.to_csv(csv, index=False)
    head, rows = unreliable_rows(t)
    words = findings(t, baseline)
    md = f"{intro}\n\n{markdown(head, rows)}\n\n{words}\n"
    body = _note_html(intro) + _frame_html(head, rows) + _note_html(words)
    ph, pr = paper_rows(reference, t)
    if pr:
        gen = reference[reference.table == TABLE7].generator.iloc[0]
        note = _PAPER_NOTE.format(gen=gen)
        md += f"\n{note}\n\n{markdown(ph, pr)}\n"
        body += _note_html(note) + _frame_html(ph, pr)
    return md, body, csv


def more_section(
    base: pd.DataFrame, more: pd.DataFrame, profile: str, generator: str, csv: Path
) -> tuple[str, str, bool]:
    """ "More passages": its Markdown, its HTML, and whether ``csv`` (``more_passages``' table) was written."""
    from leaderboard.tables import markdown

    t = more_passages(base, more, profile, generator)
    names = datasets(base[(base.profile == profile) & (base.generator == generator)])
    words = more_words(t, names)
    if t.empty:
        return f"{_MORE_INTRO}\n\n{words}\n", _note_html(f"{_MORE_INTRO} {words}"), None
    t.to_csv(csv, index=False)
    head, rows = more_rows(t)
    md = f"{_MORE_INTRO}\n\n{markdown(head, rows)}\n\n{words}\n"
    return md, _note_html(_MORE_INTRO) + _frame_html(head, rows) + _note_html(words), csv


def _render(page: Page, d: Data, b: Block, which: str) -> None:
    """ "When retrieval fails" (000 Table 7) or "More passages" with its CSV (in an archived block, the latter only
    where it has rows run with ``dataset.top_k``)."""
    if which == FAILS:
        title = f"{which} (CompSelect's Table 7)"
        out = page.out / f"unreliable_{b.slug}.csv"
        md, body, csv = fails_section(d.full, d.ref, b.profile, b.gen, b.baseline, out)
    else:
        title = f"{which} (k = 5 against k = 10)"
        out = page.out / f"more_passages_{b.slug}.csv"
        md, body, csv = more_section(d.full, d.rows_of("passages"), b.profile, b.gen, out)
    if md and (csv or which == FAILS or not page.archive):
        page.md.append(f"{page.h(3, title)}\n\n{md}")
        page.html(title, body)
    if csv:
        page.written.append(csv)


FAILS_VIEW = View("retrieval", "retrieval", lambda p, d, b: _render(p, d, b, FAILS))
# rows run with dataset.top_k: never ranked or compared with the default k's anywhere else
MORE_VIEW = View(
    "passages",
    "passages",
    lambda p, d, b: _render(p, d, b, MORE),
    owns=with_top_k,
)
