"""``python -m methods.compselect.train [--config-name train/compselect_paper] [key=value ...]``

The CompSelect training pipeline (000 section 4; papers.md 3.11), configured by
``conf/train/compselect*.yaml``, one function per stage:

1. ``extractor_stage``: targets (answer sentences + KNN within epsilon, ordered by similarity to the question;
   ``train_data.extractor_targets``) -> LoRA SFT (``train_sft.sft_stage``);
2. ``label_clues``, ``reranker_stage``: the trained extractor runs on disjoint labelling questions; each clue alone
   goes to the generator (``train_verdicts``): SubEM-correct clues are positives (``reranker.positives=
   answer|either``: those holding a gold answer; tried, not adopted) -> reranker (MultipleNegativesRankingLoss,
   ``train_reranker``);
3. ``truncator_stage``: the clues reranked by the trained reranker; K = the smallest prefix the generator answers
   correctly from (0 when none) -> truncator LoRA SFT on the kept-prefix text (or on K, ``truncator.output=index``).

Every generator and extractor call goes through the model layer (``harness.lm``: the shared vLLM engine by default,
the extractor adapter merged into derived weights) and its persistent call cache, so a re-run only re-trains;
training itself runs in transformers (``train_lm.LoraLM``, ``harness.lm.lora.train_lora``: resumable, see there).
``out_dir`` gets ``extractor/``, ``reranker/``, ``truncator/``, the labels (``labels/*.jsonl``), ``splits.json``
and ``manifest.json`` (seeds, data hashes, configuration, per-stage reports and times; ``train_manifest``).
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from harness.config import apply_profile_env, register_resolvers
from harness.provenance import REPO_ROOT
from methods.compselect.train_data import (
    Stopwatch,
    clues_from_labels,
    extractor_targets,
    load_sets,
    make_splits,
    write_jsonl,
)
from methods.compselect.train_manifest import (
    carried_reports,
    earlier_runs,
    previous_manifest,
    previous_reports,
    resolved_config,
)
from methods.compselect.train_sft import ExportDone, evaluated_afterwards, make_example, sft_stage
from methods.compselect.train_verdicts import Labeller, NllLabeller, likelihood_fallback, truncation_labels

register_resolvers()
STAGES = ("extractor", "reranker", "truncator")


@dataclass(frozen=True)
class Settings:
    """The run's choices, checked before hours of labelling, not after."""

    stages: set[str]
    trunc_name: str  # the truncator's adapter folder and manifest entry
    fallback: str | None
    positives: str
    labels_from: str | None

    @classmethod
    def of(cls, cfg: DictConfig) -> Settings:
        from methods.compselect.train_labels import POSITIVES

        stages = set(cfg.stages)
        if not stages <= set(STAGES):
            raise ValueError(f"stages={sorted(stages)}; valid: {', '.join(STAGES)}")
        trunc_name = str(cfg.truncator.get("name") or "truncator")
        if trunc_name in ("labels", "extractor", "reranker"):  # the other folders under out
            raise ValueError(f"truncator.name={trunc_name!r} would overwrite the {trunc_name} folder")
        fallback = cfg.truncator.get("fallback")
        if fallback not in (None, "likelihood"):
            raise ValueError(f"truncator.fallback={fallback!r}; valid: null, likelihood")
        positives = str(cfg.reranker.get("positives") or "generator")
        labels_from = cfg.reranker.get("labels_from")
        if labels_from and "extractor" in stages:  # its clues came from the extractor this run replaces
            raise ValueError(
                "reranker.labels_from re-uses an earlier extractor's clues: not with stages=[extractor, ...]"
            )
        if positives not in POSITIVES:
            raise ValueError(f"reranker.positives={positives!r}; valid: {', '.join(POSITIVES)}")
        return cls(stages, trunc_name, fallback, positives, labels_from)


@dataclass
class Context:
    """What every stage reads: the configuration, the data and its splits, the models, the record being kept."""

    cfg: DictConfig
    settings: Settings
    out: Path
    watch: Stopwatch
    manifest: dict[str, Any]
    sets: dict[str, list]
    hashes: dict[str, str]
    splits: dict[str, dict[str, list[str]]]
    by_id: dict[str, Any]
    lm: Any  # the training LM (``train_lm.LoraLM``)
    generator: Any
    encoder: Any
    labeller: Labeller


@dataclass
class Clues:
    """The labelling questions' clues (in the extractor's order) and the generator's verdict on each alone."""

    label_ids: list[str]
    by_question: dict[str, list]
    items: list[tuple[str, Any]]
    verdicts: list[bool]
    ok: dict[tuple[str, int], bool]
    extractor_started: bool


def load(cfg: DictConfig, settings: Settings, out: Path, watch: Stopwatch) -> Context:
    """Data, splits (``splits.json``), the training LM, the generator and the encoder."""
    from harness.lm.encoders import sentence_encoder
    from harness.runner import get_generator
    from methods.compselect.train_lm import LoraLM

    manifest: dict[str, Any] = {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "seed": int(cfg.seed)}
    with watch("load"):
        sets, hashes = load_sets(cfg)
        splits = make_splits(sets, cfg)
        by_id = {e.id: e for ex in sets.values() for e in ex}
        lm = LoraLM(cfg.lm, {}, cfg.dtype, cfg.device)
        generator = get_generator(cfg.generator)
        generator = generator[0] if isinstance(generator, tuple) else generator  # (generator, fresh) in newer cores
        encoder = sentence_encoder(cfg.encoder)
    (out / "splits.json").write_text(json.dumps(splits, indent=1))
    fields = (sets, hashes, splits, by_id, lm, generator, encoder, Labeller(generator))
    return Context(cfg, settings, out, watch, manifest, *fields)


def extractor_examples(ctx: Context, rows: list[dict[str, Any]]) -> list:
    """The extractor's SFT examples: its prompt over each question's shown sentences, its target's lines."""
    from methods.compselect.method import extractor_input
    from methods.compselect.prompts import sentence_lines

    exs = []
    for r in rows:
        if r["target"]:
            x = extractor_input(ctx.lm, ctx.by_id[r["id"]], int(ctx.cfg.extractor.max_input_tokens))
            exs.append(make_example(ctx.lm, x.messages, sentence_lines(r["texts"])))
    return exs


def extractor_stage(ctx: Context) -> dict[str, Any]:
    """The extractor's targets (``labels/extractor_targets.jsonl``), its training when asked, and its report (one
    measured now for an adapter an interrupted run left without one); returns the targets' counts."""
    cfg, out, splits, by_id = ctx.cfg, ctx.out, ctx.splits, ctx.by_id
    with ctx.watch("extractor_targets"):
        targets = {
            part: extractor_targets(cfg, ctx.lm, ctx.encoder, [by_id[i] for i in splits["extractor"][part]])
            for part in ("train", "val")
        }
    if "extractor" in ctx.settings.stages or not (out / "labels" / "extractor_targets.jsonl").is_file():
        # left as they are when the extractor is not re-trained: the committed adapter was trained on them (a
        # near-tie of cosines can order two targets differently at another thread count)
        write_jsonl(out / "labels" / "extractor_targets.jsonl", [r for p in targets.values() for r in p])
    ext_stats = {
        p: {
            "questions": len(rows),
            "with_target": sum(bool(r["target"]) for r in rows),
            "target_sentences": sum(len(r["target"]) for r in rows),
            "knn_added": sum(len(r["target"]) - len(r["answer_sentences"]) - r.get("padded", 0) for r in rows),
            "padded": sum(r.get("padded", 0) for r in rows),
        }
        for p, rows in targets.items()
    }
    if "extractor" in ctx.settings.stages:
        with ctx.watch("extractor_train"):
            train_ex, val_ex = extractor_examples(ctx, targets["train"]), extractor_examples(ctx, targets["val"])
            report = sft_stage("extractor", cfg.extractor, cfg, ctx.lm, train_ex, val_ex, out)
            ctx.manifest["extractor"] = {"targets": ext_stats, "train": report}
    if "extractor" not in ctx.settings.stages and "extractor" not in previous_reports(out):
        from methods.compselect.train_lm import LoraLM

        tuned = LoraLM(cfg.lm, {"extractor": str(out / "extractor")}, cfg.dtype, cfg.device)
        report = evaluated_afterwards(ctx.lm, tuned, "extractor", extractor_examples(ctx, targets["val"]))
        ctx.manifest["extractor"] = {"targets": ext_stats, "train": report}
    return ext_stats


def extract(ctx: Context, label_ids: list[str]) -> tuple[dict[str, list], bool]:
    """The trained extractor's clues on the labelling questions, through the model layer (merged adapter, lazy:
    a re-run whose extractor calls all replay never starts its engine); also whether this run started it."""
    from harness.lm import get_lm, release
    from methods.compselect.method import extractor_input
    from methods.compselect.parsing import map_clues

    cfg = ctx.cfg
    extractor_path = str(ctx.out / "extractor")
    infer = get_lm(
        cfg.lm, engine=cfg.engine, dtype=cfg.inference_dtype, adapter=extractor_path, device=cfg.device, lazy=True
    )
    running_before = infer.started
    inputs = [extractor_input(infer, ctx.by_id[i], int(cfg.extractor.max_input_tokens)) for i in label_ids]
    outs = [o.text.strip() for o in infer.generate([x.messages for x in inputs], int(cfg.extractor.max_new_tokens))]
    started = infer.started and not running_before
    release(lambda m: m.info.get("adapter") == extractor_path)  # its engine's memory back before training
    clues = {i: map_clues(o, x.sentences[: x.shown])[0] for i, o, x in zip(label_ids, outs, inputs, strict=True)}
    return clues, started


def label_clues(ctx: Context) -> Clues:
    """The labelling questions' clues and verdicts: an earlier run's (``reranker.labels_from``: no extractor or
    generator call), or the extractor's, each judged by the generator alone."""
    label_ids = ctx.splits["labels"]["train"] + ctx.splits["labels"]["val"]
    labels_from = ctx.settings.labels_from
    if labels_from:
        with ctx.watch("reranker_labels"):
            clues, ok = clues_from_labels(Path(labels_from), label_ids)
            items = [(i, c) for i in label_ids for c in clues[i]]
            verdicts = [ok[(i, c.source)] for i, c in items]
        return Clues(label_ids, clues, items, verdicts, ok, False)
    with ctx.watch("extract_label_questions"):
        clues, started = extract(ctx, label_ids)
    with ctx.watch("reranker_labels"):
        items = [(i, c) for i in label_ids for c in clues[i]]
        asked = [(ctx.by_id[i].question, [c.text], ctx.by_id[i].answers) for i, c in items]
        verdicts = ctx.labeller.correct(asked)
        ok = {(i, c.source): v for (i, c), v in zip(items, verdicts, strict=True)}
    return Clues(label_ids, clues, items, verdicts, ok, started)


def reranker_rows(ctx: Context, clues: Clues) -> tuple[list[dict], dict[str, list], int]:
    """Per labelling question its clues with their verdicts and answer flags (``labels/reranker_labels.jsonl``),
    the (question, positive, negative) triplets per split part, and the count of positive clues."""
    from methods.compselect.train_labels import contains_answer, reranker_pairs, reranker_positives

    rows, triplets, n_positive = [], {"train": [], "val": []}, 0
    for part in ("train", "val"):
        for i in ctx.splits["labels"][part]:
            ex = ctx.by_id[i]
            texts = [c.text for c in clues.by_question[i]]
            flags = [clues.ok[(i, c.source)] for c in clues.by_question[i]]
            has = [contains_answer(t, ex.answers, ctx.cfg.extractor.match) for t in texts]
            pos = reranker_positives(flags, has, ctx.settings.positives)
            n_positive += sum(pos)
            pairs = reranker_pairs(texts, pos)
            triplets[part] += [(ex.question, p, n) for p, n in pairs]
            labelled = [{"text": t, "correct": f, "answer": a} for t, f, a in zip(texts, flags, has, strict=True)]
            rows.append({"id": i, "part": part, "clues": labelled, "pairs": len(pairs)})
    return rows, triplets, n_positive


def reranker_stage(ctx: Context, clues: Clues) -> dict[str, Any]:
    """The reranker's labels and triplets, its training when asked; returns the labels' counts."""
    from methods.compselect.train_labels import target_triplets
    from methods.compselect.train_reranker import save_reranker, train_reranker_from_config

    cfg, out = ctx.cfg, ctx.out
    rer_rows, triplets, n_positive = reranker_rows(ctx, clues)
    write_jsonl(out / "labels" / "reranker_labels.jsonl", rer_rows)
    per_question = int(cfg.reranker.get("extractor_triplets") or 0)
    extra: list[tuple[str, str, str]] = []
    if per_question:  # a departure (train_labels.py): answer / non-answer pairs of the extractor questions' targets,
        # from the file the extractor was trained on (left as it is above)
        target_rows = [json.loads(x) for x in (out / "labels" / "extractor_targets.jsonl").read_text().splitlines()]
        questions = {i: ctx.by_id[i].question for i in ctx.by_id}
        extra = target_triplets(target_rows, questions, per_question, int(cfg.seed))
    labels_from = ctx.settings.labels_from
    rer_stats = {
        "questions": len(rer_rows),
        "clues": len(clues.items),
        "positives": ctx.settings.positives,
        "positive_clues": n_positive,
        "generator_correct_clues": int(sum(clues.verdicts)),
        "answer_clues": sum(c["answer"] for r in rer_rows for c in r["clues"]),
        "questions_kept": sum(r["pairs"] > 0 for r in rer_rows),
        "no_clue_questions": sum(not r["clues"] for r in rer_rows),
        "labels_from": str(labels_from) if labels_from else None,
        "extractor_triplets": per_question,
        "extractor_triplet_count": len(extra),
        "extractor_triplet_questions": len({t[0] for t in extra}),
    }
    if "reranker" in ctx.settings.stages:
        with ctx.watch("reranker_train"):
            st, report = train_reranker_from_config(cfg, triplets["train"] + extra, triplets["val"])
            save_reranker(st, out / "reranker", cfg.reranker.base, bool(cfg.reranker.lora))
            ctx.manifest["reranker"] = {"labels": rer_stats, "train": report}
            del st
    return rer_stats


def truncator_examples(ctx: Context, ranked: dict[str, list], ks: dict[str, int], ids: list[str]) -> list:
    """The truncator's SFT examples: its prompt over each question's ranked clues, the labelled prefix (or K)."""
    from methods.compselect.prompts import truncator_messages, truncator_target

    out = []
    for i in ids:
        if i in ks:
            texts = [c.text for c in ranked[i]]
            target = truncator_target(texts, ks[i], ctx.cfg.truncator.output)
            out.append(make_example(ctx.lm, truncator_messages(ctx.by_id[i].question, texts), target))
    return out


def truncation_ks(ctx: Context, clues: Clues) -> tuple[dict[str, list], list[int], dict[str, int], int]:
    """The clues ranked by the trained reranker and K per question (``labels/truncator_labels.jsonl``): the
    paper's label, or the likelihood fallback's where it is empty. Returns (ranked clues by question, the
    paper's Ks, the final K by question with clues, the NLL labeller's call count)."""
    from methods.compselect.reranker import ClueReranker

    cfg, by_id = ctx.cfg, ctx.by_id
    reranker = ClueReranker(cfg.reranker.base, str(ctx.out / "reranker"), cfg.device)
    reranker.load(check="reranker" not in cfg.stages)  # trained by this run: its manifest is not written yet
    with ctx.watch("truncator_labels"):
        ranked = {}
        for i in clues.label_ids:
            scores = reranker.score(by_id[i].question, [c.text for c in clues.by_question[i]])
            order = sorted(range(len(scores)), key=lambda j: (-scores[j], j))
            ranked[i] = [clues.by_question[i][j] for j in order]
        questions = [i for i in clues.label_ids if ranked[i]]
        asked = [(by_id[i].question, [c.text for c in ranked[i]], by_id[i].answers) for i in questions]
        paper_ks = truncation_labels(ctx.labeller, asked, cfg.truncator.scan)
        nlls: list[list[float] | None] = [None] * len(questions)
        final_ks = paper_ks
        nll_labeller = NllLabeller(ctx.generator)
        if ctx.settings.fallback == "likelihood":
            final_ks, nlls = likelihood_fallback(nll_labeller, asked, paper_ks)
        ks = dict(zip(questions, final_ks, strict=True))
    rows = []
    for i, pk, nl in zip(questions, paper_ks, nlls, strict=True):
        fallback = {} if nl is None else {"paper_k": pk, "nll": nl}
        rows.append({"id": i, "ranked": [c.text for c in ranked[i]], "k": ks[i], **fallback})
    write_jsonl(ctx.out / "labels" / "truncator_labels.jsonl", rows)
    return ranked, paper_ks, ks, nll_labeller.calls


def truncator_stage(ctx: Context, clues: Clues) -> tuple[dict[str, Any], int]:
    """The truncator's labels, its training when asked; returns the labels' counts and the NLL calls made."""
    from methods.compselect.train_labels import balance_empty

    cfg, splits = ctx.cfg, ctx.splits
    ranked, paper_ks, ks, nll_calls = truncation_ks(ctx, clues)
    k_hist: dict[int, int] = {}
    for k in ks.values():
        k_hist[k] = k_hist.get(k, 0) + 1
    trunc_stats = {
        "questions": len(ks),
        "k_histogram": dict(sorted(k_hist.items())),
        "empty": k_hist.get(0, 0),
        "balance_empty": cfg.truncator.get("balance_empty"),
        "fallback": ctx.settings.fallback,
        "paper_empty": sum(1 for k in paper_ks if k == 0),
        "output": cfg.truncator.output,
        "scan": cfg.truncator.scan,
    }
    if "truncator" in ctx.settings.stages:
        name = ctx.settings.trunc_name
        with ctx.watch("truncator_train"):
            train_ids = [i for i in splits["labels"]["train"] if i in ks]
            kept = balance_empty(train_ids, ks, cfg.truncator.get("balance_empty"), int(cfg.seed))
            train_ex = truncator_examples(ctx, ranked, ks, kept)
            val_ex = truncator_examples(ctx, ranked, ks, splits["labels"]["val"])
            report = sft_stage(name, cfg.truncator, cfg, ctx.lm, train_ex, val_ex, ctx.out)
            ctx.manifest[name] = {"labels": trunc_stats, "train": report}
    return trunc_stats, nll_calls


def finish(ctx: Context, stats: dict[str, Any], calls: dict[str, Any], started: tuple[float, float]) -> dict:
    """The manifest: this run's stages, labels, data, models, adapters' digests, LM calls, times and provenance,
    with the reports of the stages it did not re-run carried over; written to ``manifest.json``."""
    from harness import provenance
    from harness.lm.loading import adapter_digest
    from harness.lm.models import resolve

    cfg, out, manifest = ctx.cfg, ctx.out, ctx.manifest
    folders = dict.fromkeys((*STAGES, ctx.settings.trunc_name, *previous_reports(out)))  # incl. other truncators
    manifest.update(
        {
            "labels_only": stats,
            "data": {"files": ctx.hashes, "top_k": int(cfg.data.top_k), "rank": OmegaConf.to_container(cfg.data.rank)},
            "splits": {p: {s: len(v) for s, v in d.items()} for p, d in ctx.splits.items()},
            "models": {
                "lm": resolve(cfg.lm).describe(),
                "encoder": resolve(cfg.encoder).describe(),
                "reranker_base": resolve(cfg.reranker.base).describe(),
                "generator": ctx.generator.describe(),
            },
            "artifacts": {n: adapter_digest(out / n) for n in folders if (out / n).is_dir()},
            "lm_calls": calls,
            "times": ctx.watch.times,
            "total": {
                "wall_s": round(time.perf_counter() - started[0], 1),
                "cpu_s": round(time.process_time() - started[1], 1),
                "threads": int(cfg.threads),
            },
            "config": provenance.redact(resolved_config(cfg)),
            "packages": provenance.package_versions(),
            "git": provenance.git_commit(),
            "hardware": provenance.hardware(),
        }
    )
    for stage, report in carried_reports(previous_manifest(out), manifest["artifacts"]).items():
        if stage not in manifest:  # keep the reports of stages not re-run
            manifest[stage] = report
    manifest["earlier_runs"] = earlier_runs(out)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False, default=str))
    return manifest


def run(cfg: DictConfig) -> dict[str, Any]:
    """The three stages in order (see the module docstring); returns the manifest."""
    import torch

    from harness.lm import cache as lm_cache

    torch.set_num_threads(int(cfg.threads))
    random.seed(int(cfg.seed))
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    replays_before = lm_cache.REPLAYS.calls
    settings = Settings.of(cfg)
    watch = Stopwatch()
    started = (time.perf_counter(), time.process_time())
    ctx = load(cfg, settings, out, watch)
    ext_stats = extractor_stage(ctx)
    clues = label_clues(ctx)
    rer_stats = reranker_stage(ctx, clues)
    trunc_stats, nll_calls = truncator_stage(ctx, clues)
    stats = {"extractor_targets": ext_stats, "reranker_labels": rer_stats, "truncator_labels": trunc_stats}
    calls = {
        "cache": str(lm_cache.cache_path()) if lm_cache.enabled() else None,
        "generator": ctx.labeller.calls + nll_calls,
        "extractor": 0 if settings.labels_from else len(clues.label_ids),
        "extractor_engine_started": clues.extractor_started,
        "replayed": lm_cache.REPLAYS.calls - replays_before,
    }
    return finish(ctx, stats, calls, started)


@hydra.main(version_base="1.3", config_path=str(REPO_ROOT / "conf"), config_name="train/compselect")
def main(cfg: DictConfig) -> None:
    apply_profile_env(cfg)
    try:
        m = run(cfg)
    except ExportDone as done:
        print(
            f"exported {done.args[0]}: train it with `python -m harness.lm.sft_file {done.args[0]} OUT`, then run "
            "this command again without export_sft and with <stage>.import_from=OUT"
        )
        return
    print(json.dumps({"out_dir": cfg.out_dir, "total": m["total"], "times": m["times"]}, indent=1))


if __name__ == "__main__":
    main()
