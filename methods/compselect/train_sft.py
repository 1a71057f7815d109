"""CompSelect's LoRA stages (000 section 4.1 Eq. 4, section 4.3 Eq. 11) on the model layer's trainer
(``harness.lm.lora``), for ``train.py``: the examples (``make_example``: a target is followed by the end-of-turn
token, so an empty target teaches the model to stop at once, the truncator's empty set), one stage trained and
saved (``sft_stage``: resumable; or its adapter taken from a stopped run's checkpoint), or exported to train on
another machine and imported back (``exported_stage``), and the losses of an adapter trained by an interrupted
run (``evaluated_afterwards``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from harness.lm.lora import SFTExample, resolve_compute_dtype


def make_example(lm, messages: list[dict[str, str]], target: str) -> SFTExample:
    """Token ids of a chat prompt and its target (+ the model's end-of-turn token)."""
    ids = lm.tokenizer(target, add_special_tokens=False)["input_ids"] if target else []
    return SFTExample(lm.encode(messages), [*ids, lm.eos_ids()[0]])


def sft_stage(name: str, cfg_stage: DictConfig, cfg: DictConfig, lm, train_ex, val_ex, out: Path) -> dict:
    """Train one LoRA stage and save its adapter; ``<stage>.from_checkpoint=best|last`` instead saves the adapter
    of a run stopped before its end (``harness.lm.lora.from_checkpoint``) and reports how far it got."""
    from harness.lm.lora import from_checkpoint, save_adapter, train_lora

    targets = cfg_stage.lora.target_modules
    targets = targets if isinstance(targets, str) else OmegaConf.to_container(targets)
    if cfg.get("export_sft") or cfg_stage.get("import_from"):
        return exported_stage(name, cfg_stage, cfg, train_ex, val_ex, out, targets)
    if cfg_stage.get("from_checkpoint"):
        model, report = from_checkpoint(
            lm.base,
            out / f".{name}.checkpoint.pt",
            r=int(cfg_stage.lora.r),
            alpha=int(cfg_stage.lora.alpha),
            dropout=float(cfg_stage.lora.dropout),
            target_modules=targets,
            which=str(cfg_stage.from_checkpoint),
        )
        report.update(
            examples=len(train_ex),
            val_examples=len(val_ex),
            lr=float(cfg_stage.lr),
            epochs_planned=float(cfg_stage.epochs),
            grad_accum=int(cfg_stage.grad_accum),
            compute_dtype=resolve_compute_dtype(cfg_stage.get("compute_dtype")),
        )
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
        "r": int(cfg_stage.lora.r),
        "alpha": int(cfg_stage.lora.alpha),
        "dropout": float(cfg_stage.lora.dropout),
        "target_modules": targets,
        "lr": float(cfg_stage.lr),
        "epochs": float(cfg_stage.epochs),
        "grad_accum": int(cfg_stage.grad_accum),
        "warmup_ratio": float(cfg_stage.warmup_ratio),
        "loss_norm": str(cfg_stage.get("loss_norm") or "example"),
        "eval_every": int(cfg_stage.get("eval_every") or 0),
        "select_best": bool(cfg_stage.get("select_best")),
        "compute_dtype": cfg_stage.get("compute_dtype"),
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
        path = export_examples(
            Path(cfg.export_sft) / f"{name}.sft.json.gz",
            name,
            cfg.lm,
            train_ex,
            val_ex,
            {**settings, "seed": int(cfg.seed)},
        )
        raise ExportDone(path)
    report, adapter = read_report(Path(cfg_stage.import_from), train_ex, val_ex)
    dest = out / name
    dest.mkdir(parents=True, exist_ok=True)
    for f in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copyfile(adapter / f, dest / f)
    return {**report, "imported_from": str(adapter)}


class ExportDone(Exception):
    """Raised once a stage's examples are exported (``export_sft``): the run stops there."""


def evaluated_afterwards(base_lm, tuned_lm, name: str, val) -> dict[str, Any]:
    """For an adapter trained by a run that stopped before writing its manifest: its validation loss and the
    base model's, measured now on the same validation examples (the training curve itself is not known)."""
    from harness.lm.lora import eval_loss

    tuned_lm.model.set_adapter(name)
    return {
        "note": "trained by an earlier run that was interrupted before its manifest was written; "
        "validation losses measured afterwards",
        "val_examples": len(val),
        "val_loss_before": eval_loss(base_lm.base, val),
        "val_loss_after": eval_loss(tuned_lm.model, val),
    }
