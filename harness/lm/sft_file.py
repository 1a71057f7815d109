"""Train a LoRA SFT stage from an exported file, on any machine (a GPU one, say):

    python -m harness.lm.sft_file extractor.sft.json.gz OUT --base PATH [--epochs 12] [--time-budget-s 300]

A training script (``methods.compselect.train export_sft=DIR``) writes the stage's token-id examples and its
``train_lora`` settings to one gzipped JSON file; this command needs only torch, transformers, peft (and gguf for a
``.gguf`` base) and this package's ``harness/lm/lora.py``. It writes ``OUT/adapter`` (the step selected on
validation loss when the settings ask for it), ``OUT/snapshots/step<N>`` every ``--snapshot-epochs`` epochs (to
select among them on another validation measure) and ``OUT/report.json`` (the settings it ran with, and the
export's digest, so that ``<stage>.import_from=OUT`` or ``=OUT/snapshots/step<N>`` refuses an adapter trained on
other examples).

``--time-budget-s``: times 16 training examples first and lowers the epochs (never raises them) so the run fits
(whole epochs, or tenths of one below one); the report says how many it ran and why. ``--epochs``/``--lr``
override the exported settings (recorded).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.lm.lora import SFTExample


def _digest(name: str, base: str, train: Sequence[SFTExample], val: Sequence[SFTExample]) -> str:
    """What an adapter must have been trained on to be imported: the stage, the base and every example (the
    settings it ran with are the report's to say: a run may override the exported epochs or rate)."""
    h = hashlib.sha256(json.dumps({"stage": name, "base": base}, sort_keys=True).encode())
    for part in (train, val):
        for e in part:
            h.update(json.dumps([e.prompt, e.target]).encode())
        h.update(b"|")
    return h.hexdigest()


def export_examples(
    path: Path, name: str, base: str, train: Sequence[SFTExample], val: Sequence[SFTExample], settings: dict[str, Any]
) -> Path:
    """Write one stage's examples and settings (the file this module trains from); returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "stage": name,
        "base": base,
        "settings": settings,
        "digest": _digest(name, base, train, val),
        "train": [[e.prompt, e.target] for e in train],
        "val": [[e.prompt, e.target] for e in val],
    }
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return path


def read_report(out: Path, train: Sequence[SFTExample], val: Sequence[SFTExample]) -> tuple[dict, Path]:
    """The report of a run of this module and the adapter to take: ``out`` (its selected ``adapter``) or one of
    its ``out/snapshots/step<N>``; refused unless that run trained on exactly these examples."""
    out = Path(out)
    root, adapter = (out.parent.parent, out) if out.parent.name == "snapshots" else (out, out / "adapter")
    report = json.loads((root / "report.json").read_text())
    want = _digest(report["stage"], report["base"], train, val)
    if report["export_digest"] != want:
        raise ValueError(
            f"{root} was trained on other examples than this run builds (digest "
            f"{report['export_digest'][:12]} != {want[:12]}): export and train again"
        )
    if adapter != root / "adapter":
        report = {**report, "snapshot": adapter.name, "selected_step": int(adapter.name.removeprefix("step"))}
    return report, adapter


def load_base(base: str, device: str):
    """A causal LM from a ``.gguf`` file (de-quantised to fp32, as ``harness.lm.models`` does), a local folder or a
    model reference of ``harness.lm.models``."""
    import torch
    from transformers import AutoModelForCausalLM

    p = Path(base)
    if p.suffix == ".gguf":
        model = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=torch.float32)
    else:
        if not p.is_dir():
            from harness.lm.models import resolve

            p = Path(resolve(base).path)
        model = AutoModelForCausalLM.from_pretrained(str(p), dtype=torch.float32)
    return model.to(device).eval()


def seconds_per_example(base, train: Sequence[SFTExample], settings: dict, micro_batch: int = 1, n: int = 16) -> float:
    """Forward + backward seconds per training example, timed on a throw-away LoRA copy (after one warm-up)."""
    import torch
    from peft import get_peft_model

    from harness.lm.lora import _chunks, _losses, lora_config, resolve_compute_dtype, weight_sharing_copy

    model = get_peft_model(
        weight_sharing_copy(base),
        lora_config(settings["r"], settings["alpha"], settings["dropout"], settings["target_modules"]),
    )
    model.train()
    sample = [train[i % len(train)] for i in range(n + micro_batch)]
    dtype = resolve_compute_dtype(settings.get("compute_dtype"))
    _losses(model, sample[:micro_batch], dtype).sum().backward()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t = time.perf_counter()
    for chunk in _chunks(sample[micro_batch:], micro_batch):
        _losses(model, chunk, dtype).sum().backward()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    del model
    return (time.perf_counter() - t) / n


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("export", help="the .sft.json.gz a training script wrote with export_sft")
    ap.add_argument("out")
    ap.add_argument("--base", required=True, help="the base model: .gguf file, folder or model reference")
    ap.add_argument("--device", default="auto", help="auto (cuda if present), cuda, cpu")
    ap.add_argument("--epochs", type=float, help="override the exported epochs")
    ap.add_argument("--lr", type=float, help="override the exported learning rate")
    ap.add_argument("--eval-every-epoch", action="store_true", help="validation loss at each epoch's end")
    ap.add_argument("--snapshot-epochs", type=int, default=0, help="keep the adapter every N epochs (0: none)")
    ap.add_argument("--time-budget-s", type=float, help="lower the epochs so training fits this many seconds")
    ap.add_argument("--micro-batch", type=int, default=1, help="examples per padded forward pass (GPU: 4-8)")
    ap.add_argument("--progress", action="store_true")
    return ap.parse_args(argv)


def _fit_budget(base, train: Sequence[SFTExample], run: dict[str, Any], overrides: dict[str, Any], a) -> dict | None:
    """``--time-budget-s``: the epochs lowered (in ``run`` and ``overrides``) to what fits the budget, timed on
    this machine; the timing, or None without a budget."""
    if not a.time_budget_s:
        return None
    spe = seconds_per_example(base, train, run, a.micro_batch)
    x = a.time_budget_s / (spe * len(train) * 1.1)  # 10% for validation passes
    fits = float(math.floor(x)) if x >= 1 else max(0.1, math.floor(10 * x) / 10)  # whole epochs, else tenths
    if fits < run["epochs"]:
        run["epochs"] = overrides["epochs"] = float(fits)
    return {"seconds_per_example": round(spe, 4), "budget_s": a.time_budget_s, "epochs_fit": fits}


SHOWN = ("epochs", "optimizer_steps", "val_loss_before", "val_loss_after", "selected_step", "wall_s", "timing")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    import torch

    from harness.lm.lora import save_adapter, train_lora

    a = _arguments(argv)
    t0 = time.perf_counter()
    with gzip.open(a.export, "rt") as f:
        doc = json.load(f)
    settings = dict(doc["settings"])
    train = [SFTExample(p, t) for p, t in doc["train"]]
    val = [SFTExample(p, t) for p, t in doc["val"]]
    if _digest(doc["stage"], doc["base"], train, val) != doc["digest"]:
        raise ValueError(f"{a.export}: its examples do not match its digest (a damaged or edited file)")
    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    base = load_base(a.base, device)
    overrides: dict[str, Any] = {}
    if a.epochs is not None:
        overrides["epochs"] = a.epochs
    if a.lr is not None:
        overrides["lr"] = a.lr
    run = {**settings, **overrides}
    steps_per_epoch = math.ceil(len(train) / int(run["grad_accum"]))
    if a.eval_every_epoch:
        run["eval_every"] = overrides["eval_every"] = steps_per_epoch
    timing = _fit_budget(base, train, run, overrides, a)
    out = Path(a.out)
    kept: list[int] = []

    def snapshot(step: int, model) -> None:
        save_adapter(model, out / "snapshots" / f"step{step}", doc["base"])
        kept.append(step)

    model, report = train_lora(
        base,
        train,
        val,
        r=run["r"],
        alpha=run["alpha"],
        dropout=run["dropout"],
        target_modules=run["target_modules"],
        lr=run["lr"],
        epochs=run["epochs"],
        grad_accum=run["grad_accum"],
        warmup_ratio=run["warmup_ratio"],
        seed=run["seed"],
        loss_norm=run["loss_norm"],
        eval_every=run["eval_every"],
        select_best=run["select_best"] and bool(run["eval_every"]),
        compute_dtype=run["compute_dtype"],
        progress=a.progress,
        micro_batch=a.micro_batch,
        snapshot_every=a.snapshot_epochs * steps_per_epoch,
        on_snapshot=snapshot if a.snapshot_epochs else None,
    )
    save_adapter(model, out / "adapter", doc["base"])
    report.update(
        stage=doc["stage"],
        base=doc["base"],
        export_digest=doc["digest"],
        overrides=overrides,
        timing=timing,
        snapshots=kept,
        trained_on={
            "device": device,
            "name": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "torch": torch.__version__,
        },
        total_wall_s=round(time.perf_counter() - t0, 1),
    )
    (out / "report.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: report[k] for k in (*SHOWN, "snapshots")}, indent=1))
    return report


if __name__ == "__main__":
    main()
