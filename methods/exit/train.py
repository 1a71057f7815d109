"""``python -m methods.exit.train [key=value ...]``: EXIT's sentence classifier trained by our code (the embedded
profile has no EXIT checkpoint, and zero-shot SmolLM2 keeps nothing at the paper's threshold).

EXIT (arXiv 2412.12559) fine-tunes a classifier LM (Gemma-2B, LoRA) to answer "Yes"/"No" to its prompt
(``method.build_user``: query, full passage, one sentence). ``kind=lm``: the same prompt, built by the same code
(``Exit.classifier_prompt``), trains a LoRA on SmolLM2-135M-Instruct (``harness.lm.lora.train_lora``: resumable,
best step by validation loss). The default ``kind=cross_encoder`` trains the MiniLM classifier of
``classifier.py`` instead (``train_classifier.py``; bf16 autocast where the CPU has it, resumable at every
validation). Questions and labels: ``train_data.py`` (a seeded shuffle of each shipped train split, the last
``val_fraction`` held out for validation: loss for step selection, and the figures at the paper's threshold;
test questions are never read). Configured by ``conf/train/exit.yaml``.

Writes ``out_dir`` (the adapter, fp16), ``labels.jsonl`` and ``manifest.json`` beside it (configuration, data
hashes, counts, training report, validation figures of the zero-shot and the trained classifier, seconds).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from harness.config import apply_profile_env, register_resolvers
from harness.provenance import REPO_ROOT
from methods.exit.train_data import label_rows, questions, write_labels

register_resolvers()
KINDS = ("lm", "cross_encoder")


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


def train_lm(cfg: DictConfig, rows: dict[str, list], by_id: dict, out: Path) -> dict[str, Any]:
    """``kind=lm``: a LoRA on the classifier LM answering EXIT's Yes/No prompt (resumable, best step by
    validation loss)."""
    from harness.lm.loading import load_hf
    from harness.lm.lora import SFTExample, save_adapter, train_lora
    from methods.exit.method import Exit

    model, tok = load_hf(cfg.model, str(cfg.dtype))
    classifier = Exit(cfg.model, prompt=cfg.prompt, max_length=int(cfg.max_length), threshold=float(cfg.threshold))
    classifier.use_tokenizer(tok)

    def examples(part: str) -> list[SFTExample]:
        return [
            SFTExample(
                classifier.classifier_prompt(by_id[r["id"]].question, r["context"], r["text"]),
                [classifier.yes_id if r["label"] else classifier.no_id],
            )
            for r in rows[part]
        ]

    tuned, report = train_lora(
        model,
        examples("train"),
        examples("val"),
        r=int(cfg.lora.r),
        alpha=int(cfg.lora.alpha),
        dropout=float(cfg.lora.dropout),
        target_modules=list(cfg.lora.target_modules),
        lr=float(cfg.lr),
        epochs=float(cfg.epochs),
        grad_accum=int(cfg.grad_accum),
        warmup_ratio=float(cfg.warmup_ratio),
        seed=int(cfg.seed),
        checkpoint=out.parent / f".{out.name}.checkpoint.pt",
        save_every=int(cfg.save_every),
        eval_every=int(cfg.eval_every),
        select_best=bool(cfg.select_best),
        progress=bool(cfg.progress),
    )
    save_adapter(tuned, out, cfg.model)
    return report


def train_cross(cfg: DictConfig, rows: dict[str, list], by_id: dict, out: Path) -> dict[str, Any]:
    """``kind=cross_encoder``: a LoRA and a one-logit head on the encoder (``train_classifier.py``), saved as a
    PEFT adapter folder (the head with it) that ``classifier.py`` loads."""
    from harness.lm.lora import resolve_compute_dtype, save_adapter
    from methods.exit.train_classifier import train_cross_encoder

    def pairs(part: str) -> list:
        return [((by_id[r["id"]].question, r["text"], r["context"]), bool(r["label"])) for r in rows[part]]

    c = cfg.cross_encoder
    model, _, report = train_cross_encoder(
        cfg.model,
        pairs("train"),
        pairs("val"),
        lora=OmegaConf.to_container(c.lora),
        lr=float(c.lr),
        epochs=int(c.epochs),
        batch_size=int(c.batch_size),
        warmup_ratio=float(c.warmup_ratio),
        max_length=int(cfg.max_length),
        seed=int(cfg.seed),
        eval_every=int(c.eval_every),
        progress=bool(cfg.progress),
        compute_dtype=resolve_compute_dtype(c.get("compute_dtype")),
        checkpoint=out.parent / f".{out.name}.checkpoint.pt",
        init_from=c.get("init_from"),
    )
    save_adapter(model, out, cfg.model, "float16", embedding_layers=False)
    return report


def validation_figures(cfg: DictConfig, out: Path, shown: list) -> dict[str, Any]:
    """``figures`` of the trained classifier, and of the zero-shot LM (``zero_shot``; null: none, it costs minutes
    to half an hour uncached), on the ``shown`` validation questions."""
    from harness.lm import release
    from harness.protocols import MethodEnv
    from methods.exit.method import Exit

    env = MethodEnv(count_tokens=lambda s: 0)
    found: dict[str, Any] = {}
    zero = cfg.zero_shot
    trained = {"model": cfg.model, "adapter": str(out), "prompt": cfg.prompt, "kind": cfg.kind}
    shots = [("trained", {**trained, "max_length": int(cfg.max_length), "threshold": float(cfg.threshold)})]
    if zero is not None:
        zero_kw = {"model": zero.model, "adapter": None, "prompt": zero.prompt, "kind": "lm"}
        zero_kw.update(max_length=int(zero.max_length), threshold=float(zero.threshold))
        shots.insert(0, ("zero_shot", zero_kw))
    for label, kw in shots:
        if not shown:
            break
        c = Exit(dtype=cfg.inference_dtype, engine=cfg.engine, **kw)
        c.bind(env)
        found[label] = {"threshold": kw["threshold"], **figures(c, shown)}
    release(lambda m: m.info.get("adapter") == str(out))
    return found


def classifier_hashes(out: Path) -> dict[str, str]:
    """SHA-256 of the classifier's files, keyed by their path beside the manifest (``harness.artifacts`` checks
    them before the classifier loads)."""
    from harness.lm.models import file_sha256

    return {f"{out.name}/{f.name}": file_sha256(f) for f in sorted(out.glob("adapter_*")) if f.is_file()}


def write_manifest(cfg: DictConfig, run: dict[str, Any], found: dict[str, Any]) -> dict[str, Any]:
    """``manifest.json`` beside the classifier: what ``run`` gathered, the validation figures, the seconds."""
    from harness import provenance
    from harness.lm.models import resolve

    d, rows = cfg.data, run["rows"]
    manifest = {
        "what": f"EXIT classifier ({cfg.kind}) trained by methods/exit/train.py on answer-sentence labels",
        "labels": {
            p: {"questions": len({r["id"] for r in rs}), "sentences": len(rs), "positive": sum(r["label"] for r in rs)}
            for p, rs in rows.items()
        },
        "questions": {"train": len(run["train_q"]), "val": len(run["val_q"])},
        "data": {"files": run["hashes"], "top_k": int(d.top_k), "rank": OmegaConf.to_container(d.rank)},
        "train": run["report"],
        "validation_figures": found,
        "model": resolve(cfg.model).describe(),
        "files": classifier_hashes(Path(cfg.out_dir)),
        "seconds": {"train": round(run["t_train"], 1), "total": round(time.perf_counter() - run["t0"], 1)},
        "config": provenance.redact(OmegaConf.to_container(cfg, resolve=True)),
        "packages": provenance.package_versions(),
        "git": provenance.git_commit(),
        "hardware": provenance.hardware(),
    }
    path = Path(cfg.out_dir).parent / "manifest.json"
    path.write_text(json.dumps(manifest, indent=1, ensure_ascii=False, default=str))
    return manifest


def run(cfg: DictConfig) -> dict[str, Any]:
    """Questions, labels, training, then the manifest: written at once, so that the training report survives if
    the validation figures are interrupted, and again with them."""
    import torch

    t0 = time.perf_counter()
    torch.set_num_threads(int(cfg.threads))
    if cfg.kind not in KINDS:
        raise ValueError(f"kind={cfg.kind!r}; valid: {', '.join(KINDS)}")
    out = Path(cfg.out_dir)
    train_q, val_q, hashes = questions(cfg)
    rows = label_rows(cfg, train_q, val_q)
    by_id = {e.id: e for e in train_q + val_q}
    write_labels(out.parent / "labels.jsonl", rows)
    report = (train_cross if cfg.kind == "cross_encoder" else train_lm)(cfg, rows, by_id, out)
    gathered = {"rows": rows, "train_q": train_q, "val_q": val_q, "hashes": hashes, "report": report}
    gathered.update(t0=t0, t_train=time.perf_counter() - t0)
    write_manifest(cfg, gathered, {})
    found = validation_figures(cfg, out, val_q[: int(cfg.data.val_questions)])
    return write_manifest(cfg, gathered, found)


@hydra.main(version_base="1.3", config_path=str(REPO_ROOT / "conf"), config_name="train/exit")
def main(cfg: DictConfig) -> None:
    apply_profile_env(cfg)
    m = run(cfg)
    summary = {"out_dir": cfg.out_dir, "validation": m["validation_figures"], "seconds": m["seconds"]}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
