"""``python -m methods.csm.train [--config-name train/csm_e2e] [profile=paper] [limit=N] ...``

CSM-st (``mode: st``, ``conf/train/csm.yaml``): oracle CI labels for the first ``limit`` questions of the
dataset's train split (cached, ``train_labels.py``), the last ``holdout`` share of them held back, rebalancing of
the rest (``train_rebalance.py``), then re-weighted regression + contrastive training of the head over frozen
pair features. CSM-e2e (``mode: e2e``, ``conf/train/csm_e2e.yaml``): the head trained through the frozen
generator (``train_e2e.py``); no labels needed except for the held-back Spearman check. Both write
``head.safetensors``, ``config.json`` and ``manifest.json`` (data hash, seeds, figures) to ``out_dir``.

Evaluation only (``mode: eval``, ``eval_head=<folder under artifacts/<profile>>``): labels the held-back
share of ``dataset``'s first ``limit`` train questions (the training split rule) and writes the head's
Spearman figures on them to ``eval_out`` (a head trained on one task checked on another; nothing is trained).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from harness.config import apply_profile_env, register_resolvers
from harness.protocols import Messages
from harness.provenance import REPO_ROOT

register_resolvers()
log = logging.getLogger(__name__)


class LazyScorer:
    """The configured generator as an ``AnswerScorer`` (through the model layer: vLLM by default), built only
    when a label is missing; its identity (for label keys) comes from the config, so a fully labelled re-run never
    loads a model. ``torch_model()`` gives CSM-e2e a transformers copy of the same weights (fp32), which
    back-propagation needs."""

    def __init__(self, gcfg: DictConfig, threads: int | None = None) -> None:
        self.gcfg, self.threads = gcfg, threads
        self._gen = None

    def messages(self, question: str, documents: Sequence[str]) -> Messages:
        """The generator's template (``generator.prompt``), known without building it: CI labels and their cache
        keys are asked with it."""
        from harness.prompt import build_messages

        return build_messages(question, documents, str(self.gcfg.prompt))

    def describe(self) -> dict[str, Any]:
        from harness.lm.models import resolve

        g = self.gcfg
        return {"name": g.name, "dtype": g.get("dtype"), "model": resolve(g.model).describe()}

    def answer_nll(self, prompts, answers):
        if not prompts:
            return []
        if self._gen is None:
            from harness.protocols import answer_scorer
            from harness.runner import get_generator

            self._gen = answer_scorer(get_generator(self.gcfg)[0], "CI-value labels")
            if self.threads:  # the generator may set its own thread count; the training config wins
                import torch

                torch.set_num_threads(self.threads)
        return self._gen.answer_nll(prompts, answers)

    def torch_model(self) -> tuple[Any, Any]:
        """(model, tokenizer): the generator's weights as a transformers model in fp32, for gradients."""
        from harness.lm.loading import load_hf

        return load_hf(self.gcfg.model, "float32")


def _units(cfg: DictConfig, examples):
    from harness.influence import example_units, mark_duplicates_batch
    from harness.lm.encoders import sentence_encoder

    enc = sentence_encoder(cfg.dedup.encoder) if cfg.dedup.encoder else None
    lists = [example_units(e, cfg.granularity, cfg.min_words) for e in examples]
    return list(zip(examples, mark_duplicates_batch(lists, enc, cfg.dedup.threshold), strict=True))


def _synthetic_example(sample, tag: str):
    from harness.types import Example, Passage

    return Example(tag, sample.question, tuple(sample.answers), tuple(Passage(text=t) for t in sample.texts))


def _feature_fn(encoder_ref: str, samples):
    """Pair features of every (question, unit) of ``samples``, computed once; returns a lookup by sample."""
    from methods.csm.features import PairEncoder

    enc = PairEncoder(encoder_ref)
    pairs = sorted({(s.question, t) for s in samples for t in s.texts})
    vecs = enc.encode([q for q, _ in pairs], [t for _, t in pairs])
    index = {p: i for i, p in enumerate(pairs)}
    return (lambda s: vecs[[index[(s.question, t)] for t in s.texts]]), enc.dim


def _e2e_settings(cfg: DictConfig) -> dict[str, Any]:
    """What a CSM-e2e run on another machine needs of the config (``train_e2e_file``)."""
    c = OmegaConf.to_container(cfg, resolve=True)
    return {
        "seed": int(cfg.seed),
        "select_epoch": cfg.select_epoch,
        "head": c["head"],
        "e2e": {k: v for k, v in c["e2e"].items() if k not in ("export", "import_from", "eval_labels")},
        "optim": {k: c["optim"][k] for k in ("weight_decay", "warmup")},
        "encoder": cfg.encoder,
        "granularity": cfg.granularity,
        "label_temperature": float(cfg.rebalance.label_temperature),
        "prompt": str(cfg.generator.prompt),
    }


@dataclass
class Labelled:
    """The run's questions: train and held-back unit lists, their labels where computed, the scorer behind them."""

    scorer: LazyScorer
    cache: Any  # train_labels.LabelCache
    train_items: list
    held_rows: list[dict[str, Any]]
    held: list  # train_rebalance.Sample per held-back question
    info: dict[str, Any]

    def label(self, cfg: DictConfig, items) -> list[dict[str, Any]]:
        from methods.csm.train_labels import label

        return label(self.scorer, items, self.cache, cfg.max_answers, chunk=int(cfg.label_chunk), progress=cfg.progress)


@dataclass
class Trained:
    """A trained (or imported) head, its training history, the pair features it was checked with, data keys."""

    head: Any
    history: list
    feats: Any
    data_keys: list[str]


def questions(cfg: DictConfig) -> Labelled:
    """The first ``limit`` train questions, the last ``holdout`` share held back (labelled unless CSM-e2e asks
    for no held-back figures), the rest kept for training (none in ``mode: eval``)."""
    from harness.data import DatasetSpec, load_dataset
    from methods.csm.train_labels import LabelCache
    from methods.csm.train_rebalance import from_row

    d = cfg.dataset
    examples = load_dataset(DatasetSpec(d.name, d.path, int(d.top_k), d.rank, int(cfg.limit)))
    split = len(examples) - round(float(cfg.holdout) * len(examples))
    held_items = _units(cfg, examples[split:])
    train_items = _units(cfg, examples[:split]) if cfg.mode != "eval" else []  # eval: nothing is trained
    scorer = LazyScorer(cfg.generator, int(cfg.threads) if cfg.threads else None)
    data = Labelled(scorer, LabelCache(cfg.label_cache), train_items, [], [], {})
    if cfg.mode in ("st", "eval") or cfg.e2e.eval_labels:
        data.held_rows = data.label(cfg, held_items)
    data.held = [from_row(r, cfg.rebalance.label_temperature) for r in data.held_rows]
    data.info = {"train_questions": split, "held_questions": len(held_items)}
    return data


def rebalanced(cfg: DictConfig, data: Labelled, rng: random.Random) -> tuple[list, list[dict[str, Any]]]:
    """CSM-st's training lists: the labelled lists down-sampled and marked hard, plus intervened copies of the
    hard ones (relabelled by the generator when ``rebalance.relabel``), weighted by rarity; and the label rows."""
    from harness.influence import example_units
    from harness.lm.encoders import sentence_encoder
    from methods.csm.train_rebalance import (
        build_intervened,
        downsample,
        from_row,
        interventions,
        mark_hard,
        weights_from_rarity,
    )

    rb = cfg.rebalance
    rows = data.label(cfg, data.train_items)
    samples = [s for s in (from_row(r, rb.label_temperature) for r in rows) if s.texts]
    d1, d2 = mark_hard(samples, rb.alpha, rb.delta1, rb.delta2, rb.hard_fraction)
    data.info.update(delta=[d1, d2], hard=sum(s.hard for s in samples))
    kept = downsample(samples, d1, rb.keep_trivial, rng)
    qenc = sentence_encoder(cfg.encoder_for_questions)
    qv = qenc.encode([s.question for s in samples], normalize_embeddings=True, show_progress_bar=False)
    plans = interventions(
        samples, lambda i, j: float(qv[i] @ qv[j]), rb.gamma, rb.max_question_sim, rng, int(rb.interventions_per_hard)
    )
    synth = [build_intervened(plan, rng)[0] for plan in plans]
    if rb.relabel and synth:
        syn_ex = [_synthetic_example(s, f"synthetic-{k}-{s.origin}") for k, s in enumerate(synth)]
        syn_items = [(ex, example_units(ex, cfg.granularity, cfg.min_words)) for ex in syn_ex]
        syn_rows = data.label(cfg, syn_items)
        synth = [from_row(r, rb.label_temperature, origin=s.origin) for r, s in zip(syn_rows, synth, strict=True)]
    mark_hard(synth, rb.alpha, d1, d2)
    train = kept + synth
    weights_from_rarity(train)
    data.info.update(
        after_downsampling=len(kept), interventions=len(synth), training_lists=len(train), relabelled=bool(rb.relabel)
    )
    return train, rows


def train_st(cfg: DictConfig, data: Labelled, rng: random.Random) -> Trained:
    """CSM-st: re-weighted regression + contrastive training of the head over frozen pair features, the epoch
    kept by the held-back figures (``select_epoch``)."""
    from methods.csm.head import CSMHead
    from methods.csm.train_fit import heldout_figures
    from methods.csm.train_fit import train_st as fit_st

    train, rows = rebalanced(cfg, data, rng)
    held = data.held
    feats, dim = _feature_fn(cfg.encoder, train + held)
    head = CSMHead(dim, cfg.head.layers, cfg.head.heads, cfg.head.ffn_dim, cfg.head.dropout)
    o = cfg.optim
    t0 = time.perf_counter()
    metric = cfg.select_epoch  # the epoch kept: best on the held-back share (validation, from train)

    def validate(h):
        return heldout_figures(h, held, feats)[metric]

    history = fit_st(
        head,
        train,
        feats,
        o.epochs,
        o.batch_size,
        o.lr,
        o.weight_decay,
        o.warmup,
        o.beta,
        o.tau,
        int(cfg.seed),
        validate if held and metric else None,
    )
    data.info["train_seconds"] = time.perf_counter() - t0
    return Trained(head, history, feats, sorted(r["key"] for r in rows + data.held_rows))


def e2e_samples(data: Labelled) -> list:
    """CSM-e2e's training lists: every train question's active units, unlabelled."""
    from methods.csm.train_rebalance import Sample

    samples = [
        Sample(ex.question, list(ex.answers), [ul.texts[i] for i in ul.active()], []) for ex, ul in data.train_items
    ]
    return [s for s in samples if s.texts]


def e2e_imported(cfg: DictConfig, data: Labelled, doc: dict[str, Any]) -> tuple[Any, list]:
    """The head a ``train_e2e_file`` run trained elsewhere (``e2e.import_from``), checked against this run's
    export; its report's times and figures go to ``info``."""
    from methods.csm import train_e2e_file
    from methods.csm.head import load_head

    e = cfg.e2e
    report = train_e2e_file.read_report(Path(e.import_from), doc)
    head, _ = load_head(e.import_from)
    keys = ("train_seconds", "seconds_per_step", "steps_for_schedule", "device", "time_budget_s")
    data.info.update(
        {k: report[k] for k in keys},
        imported_from=os.path.relpath(Path(e.import_from).resolve(), REPO_ROOT),
        heldout_where_trained=report["heldout"],
    )
    return head, report["history"]


def e2e_here(cfg: DictConfig, data: Labelled, samples: list, feats, lm, dim: int) -> tuple[Any, list]:
    """CSM-e2e trained in this process, through the frozen generator."""
    import torch

    from methods.csm.head import CSMHead
    from methods.csm.train_fit import heldout_figures, train_e2e

    e, held = cfg.e2e, data.held
    torch.manual_seed(int(cfg.seed))
    head = CSMHead(dim, cfg.head.layers, cfg.head.heads, cfg.head.ffn_dim, cfg.head.dropout)
    metric = cfg.select_epoch
    t0 = time.perf_counter()
    history = train_e2e(
        head,
        samples,
        feats,
        lm,
        e.epochs,
        e.batch_size,
        e.lr,
        cfg.optim.weight_decay,
        cfg.optim.warmup,
        e.lambda_nec,
        e.temperature,
        e.max_steps,
        int(cfg.seed),
        validate=(lambda h: heldout_figures(h, held, feats)[metric]) if held and metric else None,
    )
    data.info["train_seconds"] = time.perf_counter() - t0
    data.info["seconds_per_step"] = data.info["train_seconds"] / max(len(history), 1)
    data.info["steps_for_schedule"] = e.epochs * -(-len(samples) // e.batch_size)
    return head, history


def train_e2e(cfg: DictConfig, data: Labelled) -> Trained | dict[str, Any]:
    """CSM-e2e: the head trained through the frozen generator, here or on another machine (``e2e.export``
    writes the file and stops: its path and digest are returned; ``e2e.import_from`` takes the result)."""
    from methods.csm import train_e2e_file
    from methods.csm.train_e2e import SoftMaskLM

    samples = e2e_samples(data)
    feats, dim = _feature_fn(cfg.encoder, samples + data.held)
    e = cfg.e2e
    model, tokenizer = data.scorer.torch_model()
    lm = SoftMaskLM(model, tokenizer, e.gate, str(cfg.generator.prompt))
    if e.get("export") or e.get("import_from"):
        doc = train_e2e_file.build_export(str(cfg.generator.model), _e2e_settings(cfg), samples, data.held, feats, lm)
        if e.get("export"):
            path = train_e2e_file.write_export(Path(e.export) / f"{Path(cfg.out_dir).name}.pt", doc)
            log.info(
                "wrote %s (%d training lists, %d held back); train it with `python -m "
                "methods.csm.train_e2e_file %s OUT --base ...`, then e2e.import_from=OUT",
                path,
                len(doc["train"]),
                len(doc["held"]),
                path,
            )
            return {"export": str(path), "digest": doc["digest"]}
        head, history = e2e_imported(cfg, data, doc)
    else:
        head, history = e2e_here(cfg, data, samples, feats, lm, dim)
    keys = sorted(hashlib.sha256(json.dumps([s.question, s.texts, s.answers]).encode()).hexdigest() for s in samples)
    return Trained(head, history, feats, keys)


def save(cfg: DictConfig, data: Labelled, trained: Trained, t_start: float) -> dict[str, Any]:
    """The head (``head.safetensors``, ``config.json``) and ``manifest.json`` (data hash, seeds, held-back
    figures) in ``out_dir``."""
    from methods.csm.head import save_head
    from methods.csm.train_fit import heldout_figures

    figures = heldout_figures(trained.head, data.held, trained.feats) if data.held else {}
    data_hash = hashlib.sha256("\n".join(trained.data_keys).encode()).hexdigest()
    out = Path(cfg.out_dir)
    extra = {
        "encoder": cfg.encoder,
        "granularity": cfg.granularity,
        "mode": cfg.mode,
        "label_temperature": cfg.rebalance.label_temperature,
    }
    save_head(trained.head, out, extra)
    manifest = {
        "mode": cfg.mode,
        "dataset": cfg.dataset.name,
        "split": cfg.dataset.split,
        "profile": cfg.profile.name,
        "generator": data.scorer.describe(),
        "encoder": cfg.encoder,
        "seed": int(cfg.seed),
        "data_sha256": data_hash,
        "label_cache": os.path.relpath(cfg.label_cache, REPO_ROOT),
        "data": data.info,
        "history": trained.history,
        "heldout": figures,
        "wall_seconds": time.perf_counter() - t_start,
        "command": "python -m methods.csm.train " + " ".join(sys.argv[1:]),
        "config": OmegaConf.to_container(cfg, resolve=True),
        "files": {
            p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.glob("*"))
            if p.name != "manifest.json"
        },
    }
    manifest["config"] = json.loads(json.dumps(manifest["config"]).replace(str(REPO_ROOT) + "/", ""))
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    log.info("held-out figures: %s", figures)
    return manifest


def run(cfg: DictConfig) -> dict[str, Any]:
    """Questions and labels, then CSM-st, CSM-e2e or the held-back figures of an existing head (``mode``)."""
    import torch

    if cfg.mode not in ("st", "e2e", "eval"):
        raise ValueError(f"mode={cfg.mode!r}; valid: st, e2e, eval")
    t_start = time.perf_counter()
    torch.set_num_threads(int(cfg.threads) if cfg.threads else (os.cpu_count() or 1))
    rng = random.Random(int(cfg.seed))
    data = questions(cfg)
    if cfg.mode == "eval":
        return _evaluate_only(cfg, data.held, data.held_rows, t_start)
    trained = train_st(cfg, data, rng) if cfg.mode == "st" else train_e2e(cfg, data)
    if isinstance(trained, dict):  # exported for another machine
        return trained
    return save(cfg, data, trained, t_start)


def _evaluate_only(cfg: DictConfig, held, held_rows, t_start: float) -> dict[str, Any]:
    """``mode: eval``: the figures of an existing head on this dataset's held-back questions."""
    from methods.csm.head import load_head
    from methods.csm.train_fit import heldout_figures

    if not cfg.get("head_dir"):
        raise ValueError("mode=eval needs eval_head=<folder of a trained CSM head under artifacts/<profile>>")
    head, hcfg = load_head(cfg.head_dir)
    if hcfg.get("encoder") not in (None, cfg.encoder) or hcfg.get("granularity") not in (None, cfg.granularity):
        raise ValueError(
            f"head {cfg.head_dir} was trained with encoder={hcfg.get('encoder')} "
            f"granularity={hcfg.get('granularity')}; this run has {cfg.encoder} / {cfg.granularity}"
        )
    feats, _ = _feature_fn(cfg.encoder, held)
    head_manifest = Path(cfg.head_dir) / "manifest.json"
    trained_on = json.loads(head_manifest.read_text()).get("dataset") if head_manifest.is_file() else None
    out = {
        "mode": "eval",
        "head_dir": os.path.relpath(cfg.head_dir, REPO_ROOT),
        "head_trained_on": trained_on,
        "dataset": cfg.dataset.name,
        "split": cfg.dataset.split,
        "limit": cfg.limit,
        "holdout": cfg.holdout,
        "label_cache": os.path.relpath(cfg.label_cache, REPO_ROOT),
        "data_sha256": hashlib.sha256("\n".join(sorted(r["key"] for r in held_rows)).encode()).hexdigest(),
        "heldout": heldout_figures(head, held, feats) if held else {},
        "wall_seconds": time.perf_counter() - t_start,
        "command": "python -m methods.csm.train " + " ".join(sys.argv[1:]),
    }
    path = Path(cfg.eval_out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    log.info("held-out figures of %s on %s: %s", cfg.head_dir, cfg.dataset.name, out["heldout"])
    return out


@hydra.main(version_base="1.3", config_path=str(REPO_ROOT / "conf"), config_name="train/csm")
def main(cfg: DictConfig) -> None:
    apply_profile_env(cfg)
    m = run(cfg)
    if cfg.mode == "eval":
        print(json.dumps({"out": cfg.eval_out, "heldout": m["heldout"]}, indent=1))
        return
    if "export" in m:
        print(json.dumps(m, indent=1))
        return
    print(json.dumps({"out": cfg.out_dir, "data": m["data"], "heldout": m["heldout"]}, indent=1))


if __name__ == "__main__":
    main()
