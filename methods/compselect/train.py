"""``python -m methods.compselect.train [--config-name train/compselect_paper] [key=value ...]``

The CompSelect training pipeline (000 section 4; papers.md 3.11), configured by
``conf/train/compselect*.yaml``:

1. extractor targets (answer sentences + KNN within epsilon, ordered by similarity to the question) -> LoRA
   SFT;
2. the trained extractor runs on disjoint labelling questions; each clue alone goes to the generator:
   SubEM-correct clues are positives (``reranker.positives=answer|either``: those holding a gold answer; tried,
   not adopted) -> reranker (MultipleNegativesRankingLoss);
3. the clues reranked by the trained reranker; K = the smallest prefix the generator answers correctly from
   (0 when none) -> truncator LoRA SFT on the kept-prefix text (or on K, ``truncator.output=index``).

Every generator and extractor call goes through the model layer (``harness.lm``: the shared vLLM engine by default,
the extractor adapter merged into derived weights) and its persistent call cache, so a re-run only re-trains;
training itself runs in transformers (``lora_lm.LoraLM``, ``sft.train_lora``: resumable, see there). ``out_dir``
gets ``extractor/``, ``reranker/``, ``truncator/``, the labels (``labels/*.jsonl``), ``splits.json`` and
``manifest.json`` (seeds, data hashes, configuration, per-stage reports and times).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from harness.config import apply_profile_env, register_resolvers
from harness.lm.lora import resolve_compute_dtype
from harness.provenance import REPO_ROOT

register_resolvers()
log = logging.getLogger("compselect.train")


class Stopwatch:
    """Wall and process-CPU seconds per named stage."""

    def __init__(self) -> None:
        self.times: dict[str, dict[str, float]] = {}

    def __call__(self, name: str):
        watch = self

        class _Ctx:
            def __enter__(self):
                self.t, self.c = time.perf_counter(), time.process_time()

            def __exit__(self, *exc):
                watch.times[name] = {
                    "wall_s": round(time.perf_counter() - self.t, 1),
                    "cpu_s": round(time.process_time() - self.c, 1),
                }
                log.info("%s: %s", name, watch.times[name])

        return _Ctx()


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def load_sets(cfg: DictConfig) -> tuple[dict[str, list], dict[str, str]]:
    from harness.data import DatasetSpec, load_dataset
    from harness.lm.models import file_sha256

    sets, hashes = {}, {}
    for name in cfg.data.extractor:
        path = Path(cfg.data.root) / name / f"{cfg.data.split}.jsonl.gz"
        sets[name] = load_dataset(DatasetSpec(name, str(path), int(cfg.data.top_k), cfg.data.rank[name], None))
        hashes[str(path)] = file_sha256(path)
    return sets, hashes


def make_splits(sets: dict[str, list], cfg: DictConfig) -> dict[str, dict[str, list[str]]]:
    """Per dataset, a seeded shuffle cut into extractor / labelling questions, each with a validation tail."""
    splits: dict[str, dict[str, list[str]]] = {}
    for name, examples in sets.items():
        ids = [e.id for e in examples]
        random.Random(f"{cfg.seed}:{name}").shuffle(ids)
        n_ext, n_lab = int(cfg.data.extractor[name]), int(cfg.data.labels[name])
        parts = {"extractor": ids[:n_ext], "labels": ids[n_ext : n_ext + n_lab]}
        for part, chosen in parts.items():
            n_val = round(float(cfg.data.val_fraction) * len(chosen))
            splits.setdefault(part, {}).setdefault("train", []).extend(chosen[: len(chosen) - n_val])
            splits[part].setdefault("val", []).extend(chosen[len(chosen) - n_val :])
    return splits


class Labeller:
    """The generator's verdicts on (question, clue list) prompts: SubEM of its answer against the golds (its
    calls go through the model layer's cache)."""

    def __init__(self, generator) -> None:
        self.generator = generator
        self.calls = 0

    def answers(self, items: Sequence[tuple[str, list[str]]]) -> list[str]:
        from harness.prompt import build_messages

        self.calls += len(items)
        return [g.answer for g in self.generator.generate([build_messages(q, docs) for q, docs in items])]

    def correct(self, items: Sequence[tuple[str, list[str], Sequence[str]]]) -> list[bool]:
        from harness.metrics import subem

        answers = self.answers([(q, docs) for q, docs, _ in items])
        return [bool(subem(a, golds)) for a, (_, _, golds) in zip(answers, items, strict=True)]


def truncation_labels(
    labeller: Labeller, questions: Sequence[tuple[str, list[str], Sequence[str]]], scan: str
) -> list[int]:
    """K per question (``labels.truncation_label``); all questions advance through their scans in lock-step,
    so each round of generator calls is one batch, and a question stops at its first correct prefix."""
    from methods.compselect.labels import scan_order, truncation_label

    orders = [scan_order(len(clues), scan) for _, clues, _ in questions]
    verdicts: list[dict[int, bool]] = [{} for _ in questions]
    pos = [0] * len(questions)
    live = [i for i, o in enumerate(orders) if o]
    while live:
        asks = [(i, orders[i][pos[i]]) for i in live]
        got = labeller.correct([(questions[i][0], questions[i][1][:k], questions[i][2]) for i, k in asks])
        for (i, k), ok in zip(asks, got, strict=True):
            verdicts[i][k] = ok
            pos[i] += 1
        live = [i for i, k in asks if not verdicts[i][k] and pos[i] < len(orders[i])]
    return [truncation_label(len(o), verdicts[i].__getitem__, scan) for i, o in enumerate(orders)]


class NllLabeller:
    """The generator's teacher-forced gold-answer NLL for (question, clue list) prompts, the minimum over the
    first ``max_answers`` gold aliases (calls cached by the model layer)."""

    def __init__(self, generator, max_answers: int = 5) -> None:
        from harness.protocols import answer_scorer

        self.generator, self.max_answers = answer_scorer(generator, "CompSelect's NLL labels"), max_answers
        self.calls = 0

    def nll(self, items: Sequence[tuple[str, list[str], Sequence[str]]]) -> list[float]:
        from harness.prompt import build_messages

        pairs = [(build_messages(q, docs), a) for q, docs, golds in items for a in list(golds)[: self.max_answers]]
        self.calls += len(pairs)
        values = self.generator.answer_nll([m for m, _ in pairs], [a for _, a in pairs])
        out, i = [], 0
        for _, _, golds in items:
            n = len(list(golds)[: self.max_answers])
            out.append(min(values[i : i + n]) if n else float("inf"))
            i += n
        return out


def likelihood_fallback(
    nll: NllLabeller, questions: Sequence[tuple[str, list[str], Sequence[str]]], ks: Sequence[int]
) -> tuple[list[int], list[list[float] | None]]:
    """``ks`` with every empty label (0) replaced by ``labels.likelihood_label`` over the prefixes k = 0..n;
    also the NLLs behind each replaced label."""
    from methods.compselect.labels import likelihood_label

    todo = [i for i, k in enumerate(ks) if k == 0]
    asks = [(i, k) for i in todo for k in range(len(questions[i][1]) + 1)]
    values = nll.nll([(questions[i][0], questions[i][1][:k], questions[i][2]) for i, k in asks])
    per: dict[int, list[float]] = {}
    for (i, _), v in zip(asks, values, strict=True):
        per.setdefault(i, []).append(round(float(v), 5))
    return [likelihood_label(per[i]) if i in per else k for i, k in enumerate(ks)], [per.get(i) for i in range(len(ks))]


def clues_from_labels(path: Path, label_ids: Sequence[str]) -> tuple[dict[str, list], dict[tuple[str, int], bool]]:
    """The clues (in the extractor's order) and generator verdicts of ``label_ids`` as an earlier run's
    ``reranker_labels.jsonl`` recorded them (``reranker.labels_from``): a reranker re-trained on them needs no
    extractor or generator call, and its labels are those of the run that wrote the file. The clues' ``source``
    is their position in the file (the sentence indices are not recorded)."""
    from methods.compselect.parsing import Clue

    rows = {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}
    missing = [i for i in label_ids if i not in rows]
    if missing:
        raise ValueError(f"reranker.labels_from={path}: {len(missing)} labelling questions missing (first: "
                         f"{missing[0]}); it must come from a run with the same data and splits")
    clues = {i: [Clue(j, c["text"], c["text"], 1.0) for j, c in enumerate(rows[i]["clues"])] for i in label_ids}
    ok = {(i, j): bool(c["correct"]) for i in label_ids for j, c in enumerate(rows[i]["clues"])}
    return clues, ok


def extractor_targets(cfg: DictConfig, lm, encoder, examples: Sequence) -> list[dict[str, Any]]:
    """Per example: the prompt's shown sentences, S^a, the KNN additions and the ordered target (flat
    indices)."""
    from methods.compselect.labels import answer_sentences, knn_expand, order_by_similarity, pad_target
    from methods.compselect.method import extractor_input

    rows = []
    for e in examples:
        x = extractor_input(lm, e, int(cfg.extractor.max_input_tokens))
        shown = x.sentences[: x.shown]
        seeds = answer_sentences(shown, e.answers, cfg.extractor.match)
        if not seeds:
            rows.append({"id": e.id, "target": [], "answer_sentences": []})
            continue
        emb = encoder.encode(
            [e.question, *shown], normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        chosen = knn_expand(emb[1:], seeds, float(cfg.extractor.epsilon))
        ordered = order_by_similarity(chosen, emb[1:], emb[0])
        expanded = len(ordered)
        ordered = pad_target(ordered, emb[1:], emb[0], cfg.extractor.get("pad_to"))
        rows.append(
            {
                "id": e.id,
                "target": ordered,
                "answer_sentences": seeds,
                "padded": len(ordered) - expanded,
                "units": [[x.units[i].passage, x.units[i].sentence] for i in ordered],
                "texts": [shown[i] for i in ordered],
            }
        )
    return rows


def sft_stage(name: str, cfg_stage: DictConfig, cfg: DictConfig, lm, train_ex, val_ex, out: Path) -> dict:
    """Train one LoRA stage and save its adapter; ``<stage>.from_checkpoint=best|last`` instead saves the adapter
    of a run stopped before its end (``harness.lm.lora.from_checkpoint``) and reports how far it got."""
    from harness.lm.lora import from_checkpoint
    from methods.compselect.sft import save_adapter, train_lora

    targets = cfg_stage.lora.target_modules
    targets = targets if isinstance(targets, str) else OmegaConf.to_container(targets)
    if cfg.get("export_sft") or cfg_stage.get("import_from"):
        return exported_stage(name, cfg_stage, cfg, train_ex, val_ex, out, targets)
    if cfg_stage.get("from_checkpoint"):
        model, report = from_checkpoint(
            lm.base, out / f".{name}.checkpoint.pt", r=int(cfg_stage.lora.r), alpha=int(cfg_stage.lora.alpha),
            dropout=float(cfg_stage.lora.dropout), target_modules=targets, which=str(cfg_stage.from_checkpoint),
        )
        report.update(examples=len(train_ex), val_examples=len(val_ex), lr=float(cfg_stage.lr),
                      epochs_planned=float(cfg_stage.epochs), grad_accum=int(cfg_stage.grad_accum),
                      compute_dtype=resolve_compute_dtype(cfg_stage.get("compute_dtype")))
        save_adapter(model, out / name, cfg.lm, "float16" if cfg.dtype == "float32" else cfg.dtype)
        del model
        return report
    model, report = train_lora(
        lm.base,
        train_ex,
        val_ex,
        r=int(cfg_stage.lora.r),
        alpha=int(cfg_stage.lora.alpha),
        dropout=float(cfg_stage.lora.dropout),
        target_modules=targets,
        lr=float(cfg_stage.lr),
        epochs=float(cfg_stage.epochs),
        grad_accum=int(cfg_stage.grad_accum),
        warmup_ratio=float(cfg_stage.warmup_ratio),
        seed=int(cfg.seed),
        loss_norm=str(cfg_stage.get("loss_norm") or "example"),
        checkpoint=out / f".{name}.checkpoint.pt",  # resumed after a kill, removed when the stage completes
        save_every=int(cfg_stage.get("save_every") or 0),
        eval_every=int(cfg_stage.get("eval_every") or 0),
        select_best=bool(cfg_stage.get("select_best")),
        progress=bool(cfg.get("progress", True)),
        compute_dtype=cfg_stage.get("compute_dtype"),
    )
    save_adapter(model, out / name, cfg.lm, "float16" if cfg.dtype == "float32" else cfg.dtype)
    del model
    return report


def sft_settings(cfg_stage: DictConfig, targets: Any) -> dict[str, Any]:
    """The ``train_lora`` keywords of a stage (what an exported stage is trained with elsewhere)."""
    return {
        "r": int(cfg_stage.lora.r), "alpha": int(cfg_stage.lora.alpha), "dropout": float(cfg_stage.lora.dropout),
        "target_modules": targets, "lr": float(cfg_stage.lr), "epochs": float(cfg_stage.epochs),
        "grad_accum": int(cfg_stage.grad_accum), "warmup_ratio": float(cfg_stage.warmup_ratio),
        "loss_norm": str(cfg_stage.get("loss_norm") or "example"), "eval_every": int(cfg_stage.get("eval_every") or 0),
        "select_best": bool(cfg_stage.get("select_best")), "compute_dtype": cfg_stage.get("compute_dtype"),
    }


def exported_stage(name: str, cfg_stage: DictConfig, cfg: DictConfig, train_ex, val_ex, out: Path, targets) -> dict:
    """``export_sft=DIR``: write the stage's token-id examples and settings to ``DIR/<name>.sft.json.gz`` (for
    ``python -m harness.lm.sft_file`` on another machine, a GPU one say) and stop. ``<stage>.import_from=DIR``: take
    the adapter that command wrote (or one of its snapshots), refused unless it was trained on exactly these
    examples; the manifest gets that run's report (its settings, device and times). Both in one run: the stages
    with ``import_from`` are imported and the first other trained stage is exported (``extractor.import_from=A
    export_sft=DIR`` labels with the imported extractor and exports the truncator)."""
    import shutil

    from harness.lm.sft_file import export_examples, read_report

    settings = sft_settings(cfg_stage, targets)
    if cfg.get("export_sft") and not cfg_stage.get("import_from"):  # an imported stage is taken, a later exported
        path = export_examples(Path(cfg.export_sft) / f"{name}.sft.json.gz", name, cfg.lm, train_ex, val_ex,
                               {**settings, "seed": int(cfg.seed)})
        raise ExportDone(path)
    report, adapter = read_report(Path(cfg_stage.import_from), train_ex, val_ex)
    dest = out / name
    dest.mkdir(parents=True, exist_ok=True)
    for f in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copyfile(adapter / f, dest / f)
    return {**report, "imported_from": str(adapter)}


class ExportDone(Exception):
    """Raised once a stage's examples are exported (``export_sft``): the run stops there."""


STAGES = ("extractor", "reranker", "truncator")
RUN_KEYS = ("created", "times", "total", "config", "packages", "git", "hardware")  # what one training run adds


def previous_manifest(out: Path) -> dict[str, Any]:
    old = out / "manifest.json"
    return json.loads(old.read_text()) if old.is_file() else {}


def stage_reports(manifest: dict[str, Any]) -> dict[str, Any]:
    """The stage reports of ``manifest``: every entry with a ``train`` report, which includes a truncator saved
    under another ``truncator.name``."""
    return {k: v for k, v in manifest.items() if isinstance(v, dict) and "train" in v}


def previous_reports(out: Path) -> dict[str, Any]:
    """The stage reports of the manifest already in ``out`` (empty when there is none)."""
    return stage_reports(previous_manifest(out))


def carried_reports(prev: dict[str, Any], digests: dict[str, str | None]) -> dict[str, Any]:
    """The stage reports of a previous manifest ``prev``, each marked ``stale`` when its adapter's digest now
    (``digests``) is not the one that manifest recorded: weights replaced outside this command (copied in, say)
    are not what the report describes, and the manifest must not say they are."""
    before = prev.get("artifacts", {})
    out = {}
    for stage, report in stage_reports(prev).items():
        if before.get(stage) != digests.get(stage):
            log.warning("%s: its weights changed since its report; run stages=[%s] again", stage, stage)
            report = {**report, "stale": "the weights in this folder are not the ones this report describes"}
        out[stage] = report
    return out


def earlier_runs(out: Path) -> list[dict[str, Any]]:
    """The run records (time, configuration, code, machine) of the trainings that wrote ``out`` before, oldest
    first, so that re-training one stage does not erase how the others were made."""
    prev = previous_manifest(out)
    if not prev:
        return []
    return [*prev.get("earlier_runs", []), {k: prev[k] for k in RUN_KEYS if k in prev}]


def evaluated_afterwards(base_lm, tuned_lm, name: str, val) -> dict[str, Any]:
    """For an adapter trained by a run that stopped before writing its manifest: its validation loss and the
    base model's, measured now on the same validation examples (the training curve itself is not known)."""
    from methods.compselect.sft import eval_loss

    tuned_lm.model.set_adapter(name)
    return {
        "note": "trained by an earlier run that was interrupted before its manifest was written; "
        "validation losses measured afterwards",
        "val_examples": len(val),
        "val_loss_before": eval_loss(base_lm.base, val),
        "val_loss_after": eval_loss(tuned_lm.model, val),
    }


def resolved_config(cfg: DictConfig) -> dict[str, Any]:
    """The training keys resolved (other methods' entries under ``models`` may need a dataset: left out)."""
    out = {
        k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
        for k, v in ((k, cfg[k]) for k in cfg if k != "models")
    }
    out["models"] = {"compselect": OmegaConf.to_container(cfg.models.compselect, resolve=True)}
    return out


def run(cfg: DictConfig) -> dict[str, Any]:
    import torch

    from harness import provenance
    from harness.lm import cache as lm_cache
    from harness.lm import get_lm, release
    from harness.lm.encoders import sentence_encoder
    from harness.lm.loading import adapter_digest
    from harness.lm.models import resolve
    from harness.runner import get_generator
    from methods.compselect.labels import (
        POSITIVES,
        balance_empty,
        contains_answer,
        reranker_pairs,
        reranker_positives,
        target_triplets,
    )
    from methods.compselect.lora_lm import LoraLM
    from methods.compselect.method import extractor_input
    from methods.compselect.parsing import map_clues
    from methods.compselect.prompts import sentence_lines, truncator_messages, truncator_target
    from methods.compselect.rerank_train import save_reranker, train_reranker_from_config
    from methods.compselect.reranker import ClueReranker
    from methods.compselect.sft import make_example

    torch.set_num_threads(int(cfg.threads))
    random.seed(int(cfg.seed))
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    replays_before = lm_cache.REPLAYS.calls
    stages = set(cfg.stages)
    if not stages <= set(STAGES):  # checked before hours of labelling, not after
        raise ValueError(f"stages={sorted(stages)}; valid: {', '.join(STAGES)}")
    trunc_name = str(cfg.truncator.get("name") or "truncator")  # the adapter folder and the manifest entry
    if trunc_name in ("labels", "extractor", "reranker"):  # the other folders under out
        raise ValueError(f"truncator.name={trunc_name!r} would overwrite the {trunc_name} folder")
    fallback = cfg.truncator.get("fallback")
    if fallback not in (None, "likelihood"):  # checked before hours of labelling, not after
        raise ValueError(f"truncator.fallback={fallback!r}; valid: null, likelihood")
    positives = str(cfg.reranker.get("positives") or "generator")
    labels_from = cfg.reranker.get("labels_from")
    if labels_from and "extractor" in stages:  # its clues came from the extractor this run replaces
        raise ValueError("reranker.labels_from re-uses an earlier extractor's clues: not with stages=[extractor, ...]")
    if positives not in POSITIVES:
        raise ValueError(f"reranker.positives={positives!r}; valid: {', '.join(POSITIVES)}")
    watch = Stopwatch()
    t_all, c_all = time.perf_counter(), time.process_time()
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
    labeller = Labeller(generator)

    # 1. extractor -------------------------------------------------------------------------------------------
    with watch("extractor_targets"):
        targets = {
            part: extractor_targets(cfg, lm, encoder, [by_id[i] for i in splits["extractor"][part]])
            for part in ("train", "val")
        }
    if "extractor" in stages or not (out / "labels" / "extractor_targets.jsonl").is_file():
        # left as they are when the extractor is not re-trained: the committed adapter was trained on them (a
        # near-tie of cosines can order two targets differently at another thread count)
        write_jsonl(out / "labels" / "extractor_targets.jsonl", [r for p in targets.values() for r in p])

    def ext_examples(rows):
        exs = []
        for r in rows:
            if r["target"]:
                x = extractor_input(lm, by_id[r["id"]], int(cfg.extractor.max_input_tokens))
                exs.append(make_example(lm, x.messages, sentence_lines(r["texts"])))
        return exs

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
    if "extractor" in stages:
        with watch("extractor_train"):
            manifest["extractor"] = {
                "targets": ext_stats,
                "train": sft_stage(
                    "extractor",
                    cfg.extractor,
                    cfg,
                    lm,
                    ext_examples(targets["train"]),
                    ext_examples(targets["val"]),
                    out,
                ),
            }

    # 2. reranker labels -------------------------------------------------------------------------------------
    if "extractor" not in stages and "extractor" not in previous_reports(out):
        tuned = LoraLM(cfg.lm, {"extractor": str(out / "extractor")}, cfg.dtype, cfg.device)
        manifest["extractor"] = {
            "targets": ext_stats,
            "train": evaluated_afterwards(lm, tuned, "extractor", ext_examples(targets["val"])),
        }
    label_ids = splits["labels"]["train"] + splits["labels"]["val"]
    extractor_started = False
    if labels_from:  # an earlier run's clues and verdicts: no extractor or generator call
        with watch("reranker_labels"):
            clues, ok = clues_from_labels(Path(labels_from), label_ids)
            items = [(i, c) for i in label_ids for c in clues[i]]
            verdicts = [ok[(i, c.source)] for i, c in items]
    else:
        with watch("extract_label_questions"):
            extractor_path = str(out / "extractor")
            # lazy: a re-run whose extractor calls all replay never starts the merged extractor's engine
            infer = get_lm(cfg.lm, engine=cfg.engine, dtype=cfg.inference_dtype, adapter=extractor_path,
                           device=cfg.device, lazy=True)
            running_before = infer.started
            inputs = [extractor_input(infer, by_id[i], int(cfg.extractor.max_input_tokens)) for i in label_ids]
            outs = [o.text.strip() for o in infer.generate([x.messages for x in inputs],
                                                           int(cfg.extractor.max_new_tokens))]
            extractor_started = infer.started and not running_before  # whether this run had to start it
            release(lambda m: m.info.get("adapter") == extractor_path)  # its engine's memory back before training
            clues = {
                i: map_clues(o, x.sentences[: x.shown])[0] for i, o, x in zip(label_ids, outs, inputs, strict=True)
            }
        with watch("reranker_labels"):
            items = [(i, c) for i in label_ids for c in clues[i]]
            verdicts = labeller.correct([(by_id[i].question, [c.text], by_id[i].answers) for i, c in items])
            ok = {(i, c.source): v for (i, c), v in zip(items, verdicts, strict=True)}
    rer_rows, triplets, n_positive = [], {"train": [], "val": []}, 0
    for part in ("train", "val"):
        for i in splits["labels"][part]:
            texts = [c.text for c in clues[i]]
            flags = [ok[(i, c.source)] for c in clues[i]]
            has = [contains_answer(t, by_id[i].answers, cfg.extractor.match) for t in texts]
            pos = reranker_positives(flags, has, positives)
            n_positive += sum(pos)
            pairs = reranker_pairs(texts, pos)
            triplets[part] += [(by_id[i].question, p, n) for p, n in pairs]
            rer_rows.append(
                {
                    "id": i,
                    "part": part,
                    "clues": [
                        {"text": t, "correct": f, "answer": a} for t, f, a in zip(texts, flags, has, strict=True)
                    ],
                    "pairs": len(pairs),
                }
            )
    write_jsonl(out / "labels" / "reranker_labels.jsonl", rer_rows)
    per_question = int(cfg.reranker.get("extractor_triplets") or 0)
    extra: list[tuple[str, str, str]] = []
    if per_question:  # a departure (labels.py): answer / non-answer pairs of the extractor questions' targets,
        # from the file the extractor was trained on (left as it is above)
        target_rows = [json.loads(x) for x in (out / "labels" / "extractor_targets.jsonl").read_text().splitlines()]
        extra = target_triplets(target_rows, {i: by_id[i].question for i in by_id}, per_question, int(cfg.seed))
    rer_stats = {
        "questions": len(rer_rows),
        "clues": len(items),
        "positives": positives,
        "positive_clues": n_positive,
        "generator_correct_clues": int(sum(verdicts)),
        "answer_clues": sum(c["answer"] for r in rer_rows for c in r["clues"]),
        "questions_kept": sum(r["pairs"] > 0 for r in rer_rows),
        "no_clue_questions": sum(not r["clues"] for r in rer_rows),
        "labels_from": str(labels_from) if labels_from else None,
        "extractor_triplets": per_question,
        "extractor_triplet_count": len(extra),
        "extractor_triplet_questions": len({t[0] for t in extra}),
    }
    if "reranker" in stages:
        with watch("reranker_train"):
            st, report = train_reranker_from_config(cfg, triplets["train"] + extra, triplets["val"])
            save_reranker(st, out / "reranker", cfg.reranker.base, bool(cfg.reranker.lora))
            manifest["reranker"] = {"labels": rer_stats, "train": report}
            del st

    # 3. truncator labels ------------------------------------------------------------------------------------
    reranker = ClueReranker(cfg.reranker.base, str(out / "reranker"), cfg.device)
    reranker.load()
    with watch("truncator_labels"):
        ranked = {}
        for i in label_ids:
            scores = reranker.score(by_id[i].question, [c.text for c in clues[i]])
            ranked[i] = [clues[i][j] for j in sorted(range(len(scores)), key=lambda j: (-scores[j], j))]
        questions = [i for i in label_ids if ranked[i]]
        asked = [(by_id[i].question, [c.text for c in ranked[i]], by_id[i].answers) for i in questions]
        paper_ks = truncation_labels(labeller, asked, cfg.truncator.scan)
        nlls: list[list[float] | None] = [None] * len(questions)
        final_ks = paper_ks
        nll_labeller = NllLabeller(generator)
        if fallback == "likelihood":
            final_ks, nlls = likelihood_fallback(nll_labeller, asked, paper_ks)
        ks = dict(zip(questions, final_ks, strict=True))
    write_jsonl(
        out / "labels" / "truncator_labels.jsonl",
        [
            {
                "id": i,
                "ranked": [c.text for c in ranked[i]],
                "k": ks[i],
                **({"paper_k": pk, "nll": nl} if nl is not None else {}),
            }
            for i, pk, nl in zip(questions, paper_ks, nlls, strict=True)
        ],
    )

    def trunc_examples(ids):
        return [
            make_example(
                lm,
                truncator_messages(by_id[i].question, [c.text for c in ranked[i]]),
                truncator_target([c.text for c in ranked[i]], ks[i], cfg.truncator.output),
            )
            for i in ids
            if i in ks
        ]

    k_hist: dict[int, int] = {}
    for k in ks.values():
        k_hist[k] = k_hist.get(k, 0) + 1
    trunc_stats = {
        "questions": len(ks),
        "k_histogram": dict(sorted(k_hist.items())),
        "empty": k_hist.get(0, 0),
        "balance_empty": cfg.truncator.get("balance_empty"),
        "fallback": fallback,
        "paper_empty": sum(1 for k in paper_ks if k == 0),
        "output": cfg.truncator.output,
        "scan": cfg.truncator.scan,
    }
    if "truncator" in stages:
        with watch("truncator_train"):
            manifest[trunc_name] = {
                "labels": trunc_stats,
                "train": sft_stage(
                    trunc_name,
                    cfg.truncator,
                    cfg,
                    lm,
                    trunc_examples(
                        balance_empty(
                            [i for i in splits["labels"]["train"] if i in ks],
                            ks,
                            cfg.truncator.get("balance_empty"),
                            int(cfg.seed),
                        )
                    ),
                    trunc_examples(splits["labels"]["val"]),
                    out,
                ),
            }

    manifest.update(
        {
            "labels_only": {
                "extractor_targets": ext_stats,
                "reranker_labels": rer_stats,
                "truncator_labels": trunc_stats,
            },
            "data": {
                "files": hashes,
                "top_k": int(cfg.data.top_k),
                "rank": OmegaConf.to_container(cfg.data.rank),
            },
            "splits": {p: {s: len(v) for s, v in d.items()} for p, d in splits.items()},
            "models": {
                "lm": resolve(cfg.lm).describe(),
                "encoder": resolve(cfg.encoder).describe(),
                "reranker_base": resolve(cfg.reranker.base).describe(),
                "generator": generator.describe(),
            },
            "artifacts": {
                n: adapter_digest(out / n)
                for n in dict.fromkeys((*STAGES, trunc_name, *previous_reports(out)))  # incl. other truncators
                if (out / n).is_dir()
            },
            "lm_calls": {
                "cache": str(lm_cache.cache_path()) if lm_cache.enabled() else None,
                "generator": labeller.calls + nll_labeller.calls,
                "extractor": 0 if labels_from else len(label_ids),
                "extractor_engine_started": extractor_started,
                "replayed": lm_cache.REPLAYS.calls - replays_before,
            },
            "times": watch.times,
            "total": {
                "wall_s": round(time.perf_counter() - t_all, 1),
                "cpu_s": round(time.process_time() - c_all, 1),
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


@hydra.main(version_base="1.3", config_path=str(REPO_ROOT / "conf"), config_name="train/compselect")
def main(cfg: DictConfig) -> None:
    apply_profile_env(cfg)
    try:
        m = run(cfg)
    except ExportDone as done:
        print(f"exported {done.args[0]}: train it with `python -m harness.lm.sft_file {done.args[0]} OUT`, then run "
              "this command again without export_sft and with <stage>.import_from=OUT")
        return
    print(json.dumps({"out_dir": cfg.out_dir, "total": m["total"], "times": m["times"]}, indent=1))


if __name__ == "__main__":
    main()
