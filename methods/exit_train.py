"""``python -m methods.exit_train [key=value ...]``: EXIT's sentence classifier trained by our code (issue: the
embedded profile has no EXIT checkpoint, and zero-shot SmolLM2 keeps nothing at the paper's threshold).

EXIT (arXiv 2412.12559) fine-tunes a classifier LM (Gemma-2B, LoRA) to answer "Yes"/"No" to its prompt
(``methods.exit.build_user``: query, full passage, one sentence). Here the same prompt, built by the same code
(``Exit.classifier_prompt``), trains a LoRA on SmolLM2-135M-Instruct (``harness.lm.lora.train_lora``: resumable,
best step by validation loss). Labels, a departure (the paper's come from its own annotation pipeline): a
sentence is useful when it contains a gold answer after SQuAD normalisation (``harness.metrics.subem``); each
question gives its first ``max_positives`` answer sentences and ``negatives_per_positive`` non-answer sentences
of its passages drawn at random, ``hard_negative_share`` of them from the passages holding an answer (EXIT's own
preprocessing balances positives 1:1 against half hard negatives -- other sentences of a gold document -- and
half random ones); questions with no answer sentence (and HotpotQA's yes/no ones) are skipped. The default
``kind=cross_encoder`` trains ``methods.exit_cross_encoder`` instead (bf16 autocast where the CPU has it,
resumable at every validation).
Questions: a seeded shuffle of each shipped train split, the last ``val_fraction`` held out for validation
(loss for step selection, and the figures at the paper's threshold); test questions are never read.

Writes ``out_dir`` (the adapter, fp16), ``labels.jsonl`` and ``manifest.json`` beside it (configuration, data
hashes, counts, training report, validation figures of the zero-shot and the trained classifier, seconds).
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from harness.config import apply_profile_env, register_resolvers
from harness.provenance import REPO_ROOT

register_resolvers()


def labelled_sentences(example, max_positives: int, negatives: int, rng: random.Random,
                       hard_share: float | None = None) -> list[dict[str, Any]]:
    """(passage, sentence, context, text, label) rows of one question: its first ``max_positives`` answer
    sentences, and ``negatives`` non-answer sentences per positive drawn at random; none when no sentence holds an
    answer. ``hard_share``: the share of negatives drawn from the passages that hold an answer sentence (EXIT's
    hard negatives: other sentences of a gold document), the rest from the other passages (a pool that runs short
    is made up from the other one); None: from all passages alike."""
    from harness.metrics import subem
    from harness.text import split_sentences

    pos, hard, other, every = [], [], [], []
    for pi, p in enumerate(example.passages):
        text = p.text.strip()
        context = f"{p.title.strip()}\n{text}" if p.title.strip() else text
        rows = [{"passage": pi, "sentence": si, "context": context, "text": s}
                for si, s in enumerate(split_sentences(text))]
        answer = [subem(r["text"], example.answers) for r in rows]
        pos += [r for r, a in zip(rows, answer, strict=True) if a]
        negs = [r for r, a in zip(rows, answer, strict=True) if not a]
        (hard if any(answer) else other).extend(negs)
        every += negs
    pos = pos[:max_positives]
    if not pos:
        return []
    n = negatives * len(pos)
    if hard_share is None:
        neg = rng.sample(every, min(n, len(every)))
    else:
        n_hard = min(len(hard), max(round(hard_share * n), n - len(other)))
        neg = rng.sample(hard, n_hard) + rng.sample(other, min(len(other), n - n_hard))
    return [{**r, "label": True} for r in pos] + [{**r, "label": False} for r in neg]


def figures(classifier, examples) -> dict[str, Any]:
    """What the classifier keeps at its threshold on whole validation questions: share of questions with
    something kept, share of sentences kept, recall and precision of answer sentences."""
    from harness.metrics import subem
    from harness.text import split_sentences

    outs = classifier.compress_batch(examples)
    kept_any = kept = total = hits = answer_sents = 0
    for ex, c in zip(examples, outs, strict=True):
        per_passage = [split_sentences(p.text.strip()) for p in ex.passages]
        sents = {(pi, si): s for pi, ss in enumerate(per_passage) for si, s in enumerate(ss)}
        gold = {k for k, s in sents.items() if subem(s, ex.answers)}
        chosen = {(u.passage, u.sentence) for u in c.units}
        kept_any += bool(chosen)
        kept, total = kept + len(chosen), total + len(sents)
        hits, answer_sents = hits + len(chosen & gold), answer_sents + len(gold)
    return {
        "questions": len(examples),
        "kept_something": round(kept_any / max(1, len(examples)), 4),
        "sentences_kept": round(kept / max(1, total), 4),
        "answer_sentence_recall": round(hits / max(1, answer_sents), 4),
        "precision": round(hits / kept, 4) if kept else None,
    }


def questions(cfg: DictConfig) -> tuple[list, list, dict[str, str]]:
    """(train, validation) questions: a seeded shuffle of each train split, the last ``val_fraction`` held out
    (HotpotQA's yes/no questions left out: every sentence would "contain" their answer); and the files' hashes."""
    from harness.data import DatasetSpec, load_dataset
    from harness.models import file_sha256

    d = cfg.data
    train_q, val_q, hashes = [], [], {}
    for name, n in d.questions.items():
        path = Path(d.root) / name / f"{d.split}.jsonl.gz"
        examples = load_dataset(DatasetSpec(name, str(path), int(d.top_k), d.rank[name], None))
        hashes[str(path)] = file_sha256(path)
        examples = [e for e in examples if not {a.strip().lower() for a in e.answers} <= {"yes", "no"}]
        random.Random(f"{cfg.seed}:{name}").shuffle(examples)
        chosen = examples[: int(n)] if n is not None else examples
        n_val = round(float(d.val_fraction) * len(chosen))
        train_q += chosen[: len(chosen) - n_val]
        val_q += chosen[len(chosen) - n_val :]
    return train_q, val_q, hashes


def train_lm(cfg: DictConfig, rows: dict[str, list], by_id: dict, out: Path) -> dict[str, Any]:
    """``kind=lm``: a LoRA on the classifier LM answering EXIT's Yes/No prompt (resumable, best step by
    validation loss)."""
    from harness.lm.loading import load_hf
    from harness.lm.lora import SFTExample, save_adapter, train_lora
    from methods.exit import Exit

    model, tok = load_hf(cfg.model, str(cfg.dtype))
    classifier = Exit(cfg.model, prompt=cfg.prompt, max_length=int(cfg.max_length), threshold=float(cfg.threshold))
    classifier.use_tokenizer(tok)

    def examples(part: str) -> list[SFTExample]:
        return [SFTExample(classifier.classifier_prompt(by_id[r["id"]].question, r["context"], r["text"]),
                           [classifier.yes_id if r["label"] else classifier.no_id]) for r in rows[part]]

    tuned, report = train_lora(
        model, examples("train"), examples("val"), r=int(cfg.lora.r), alpha=int(cfg.lora.alpha),
        dropout=float(cfg.lora.dropout), target_modules=list(cfg.lora.target_modules), lr=float(cfg.lr),
        epochs=float(cfg.epochs), grad_accum=int(cfg.grad_accum), warmup_ratio=float(cfg.warmup_ratio),
        seed=int(cfg.seed), checkpoint=out.parent / f".{out.name}.checkpoint.pt", save_every=int(cfg.save_every),
        eval_every=int(cfg.eval_every), select_best=bool(cfg.select_best), progress=bool(cfg.progress),
    )
    save_adapter(tuned, out, cfg.model)
    return report


def train_cross(cfg: DictConfig, rows: dict[str, list], by_id: dict, out: Path) -> dict[str, Any]:
    """``kind=cross_encoder``: a LoRA and a one-logit head on the encoder (``methods.exit_cross_encoder``)."""
    from methods.exit_cross_encoder import save_classifier, train_cross_encoder

    def pairs(part: str) -> list:
        return [((by_id[r["id"]].question, r["text"], r["context"]), bool(r["label"])) for r in rows[part]]

    from harness.lm.lora import resolve_compute_dtype

    c = cfg.cross_encoder
    model, _, report = train_cross_encoder(
        cfg.model, pairs("train"), pairs("val"), lora=OmegaConf.to_container(c.lora), lr=float(c.lr),
        epochs=int(c.epochs), batch_size=int(c.batch_size), warmup_ratio=float(c.warmup_ratio),
        max_length=int(cfg.max_length), seed=int(cfg.seed), eval_every=int(c.eval_every),
        progress=bool(cfg.progress), compute_dtype=resolve_compute_dtype(c.get("compute_dtype")),
        checkpoint=out.parent / f".{out.name}.checkpoint.pt", init_from=c.get("init_from"))
    save_classifier(model, out, cfg.model)
    return report


def run(cfg: DictConfig) -> dict[str, Any]:
    import torch

    from harness import provenance
    from harness.lm import release
    from harness.models import resolve
    from harness.protocols import MethodEnv
    from methods.exit import Exit

    t0 = time.perf_counter()
    torch.set_num_threads(int(cfg.threads))
    if cfg.kind not in ("lm", "cross_encoder"):
        raise ValueError(f"kind={cfg.kind!r}; valid: lm, cross_encoder")
    out = Path(cfg.out_dir)
    rng = random.Random(int(cfg.seed))
    d = cfg.data
    train_q, val_q, hashes = questions(cfg)
    rows = {part: [{"id": e.id, "part": part, **r} for e in qs
                   for r in labelled_sentences(e, int(d.max_positives), int(d.negatives_per_positive), rng,
                                               d.get("hard_negative_share"))]
            for part, qs in (("train", train_q), ("val", val_q))}
    by_id = {e.id: e for e in train_q + val_q}
    out.parent.mkdir(parents=True, exist_ok=True)
    with (out.parent / "labels.jsonl").open("w", encoding="utf-8") as f:
        for r in rows["train"] + rows["val"]:
            row = {k: v for k, v in r.items() if k not in ("context", "text")}  # the sentence: (passage, sentence)
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    report = (train_cross if cfg.kind == "cross_encoder" else train_lm)(cfg, rows, by_id, out)
    t_train = time.perf_counter() - t0

    def write_manifest(found: dict[str, Any]) -> dict[str, Any]:
        manifest = {
            "what": f"EXIT classifier ({cfg.kind}) trained by methods/exit_train.py on answer-sentence labels",
            "labels": {p: {"questions": len({r["id"] for r in rs}), "sentences": len(rs),
                           "positive": sum(r["label"] for r in rs)} for p, rs in rows.items()},
            "questions": {"train": len(train_q), "val": len(val_q)},
            "data": {"files": hashes, "top_k": int(d.top_k), "rank": OmegaConf.to_container(d.rank)},
            "train": report,
            "validation_figures": found,
            "model": resolve(cfg.model).describe(),
            "seconds": {"train": round(t_train, 1), "total": round(time.perf_counter() - t0, 1)},
            "config": provenance.redact(OmegaConf.to_container(cfg, resolve=True)),
            "packages": provenance.package_versions(),
            "git": provenance.git_commit(),
            "hardware": provenance.hardware(),
        }
        (out.parent / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False, default=str))
        return manifest

    # written at once, so that the training report survives if the figures below are interrupted (the zero-shot
    # LM scores every sentence of the shown questions: minutes to half an hour when its calls are not cached)
    write_manifest({})
    shown = val_q[: int(d.val_questions)]
    env = MethodEnv(count_tokens=lambda s: 0)
    found: dict[str, Any] = {}
    zero = cfg.zero_shot  # null: no zero-shot figures (they cost minutes to half an hour uncached)
    shots = [("trained", {"model": cfg.model, "adapter": str(out), "prompt": cfg.prompt, "kind": cfg.kind,
                          "max_length": int(cfg.max_length), "threshold": float(cfg.threshold)})]
    if zero is not None:
        shots.insert(0, ("zero_shot", {"model": zero.model, "adapter": None, "prompt": zero.prompt, "kind": "lm",
                                       "max_length": int(zero.max_length), "threshold": float(zero.threshold)}))
    for label, kw in shots:
        if not shown:
            break
        c = Exit(dtype=cfg.inference_dtype, engine=cfg.engine, **kw)
        c.bind(env)
        found[label] = {"threshold": kw["threshold"], **figures(c, shown)}
    release(lambda m: m.info.get("adapter") == str(out))
    return write_manifest(found)


@hydra.main(version_base="1.3", config_path=str(REPO_ROOT / "conf"), config_name="train/exit")
def main(cfg: DictConfig) -> None:
    apply_profile_env(cfg)
    m = run(cfg)
    print(json.dumps({"out_dir": cfg.out_dir, "validation": m["validation_figures"], "seconds": m["seconds"]},
                     indent=1))


if __name__ == "__main__":
    main()
