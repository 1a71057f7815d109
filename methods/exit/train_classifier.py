"""Training EXIT's cross-encoder classifier (``classifier.py``): a LoRA and a new one-logit head on the encoder,
binary cross-entropy on (query, sentence, passage) triples, AdamW with linear warm-up then linear decay, the step
with the lowest validation loss kept, resumable at every validation. ``train.py`` calls it; the adapter is saved
with the model layer's ``harness.lm.lora.save_adapter``.

Stages of ``train_cross_encoder``: the model (``_with_lora``), the step plan and optimizer (``_plan``), the start
(fresh, or a checkpoint's state: ``_start``), the steps (``_steps``), then the best step's weights and a report.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.lm.lora import Progress, StepPlan
from methods.exit.classifier import Triple, features

Labelled = tuple[Triple, bool]


@dataclass
class _Objective:
    """The classifier's loss: BCE on its one logit, under CPU autocast when ``compute_dtype`` is set."""

    model: Any
    tok: Any
    max_length: int
    compute_dtype: str | None

    def batch(self, rows: Sequence[Labelled]):
        import torch

        feats = features(self.tok, [t for t, _ in rows], self.max_length)
        target = torch.tensor([float(y) for _, y in rows])
        autocast = torch.autocast(
            "cpu", dtype=getattr(torch, self.compute_dtype or "bfloat16"), enabled=bool(self.compute_dtype)
        )
        with autocast:
            logits = self.model(**feats).logits[:, 0]
        return torch.nn.BCEWithLogitsLoss()(logits.float(), target)

    def validation(self, val: Sequence[Labelled]) -> float:
        """Mean loss over ``val`` (batches of 64, no gradient), rounded as the report keeps it."""
        import torch

        self.model.eval()
        with torch.inference_mode():
            total = sum(float(self.batch(val[i : i + 64])) * len(val[i : i + 64]) for i in range(0, len(val), 64))
        self.model.train()
        return round(total / max(1, len(val)), 5)


def _with_lora(base: str, lora: dict[str, Any], init_from: str | Path | None) -> tuple[Any, Any, dict | None]:
    """(peft model, tokenizer, what it started from): a fresh LoRA and head on ``base``, or ``init_from``'s."""
    from peft import LoraConfig, PeftModel, TaskType, get_peft_model

    from harness.lm.encoders import load_sequence_classifier
    from harness.lm.models import file_sha256

    model, tok = load_sequence_classifier(base)
    if init_from is None:
        spec = LoraConfig(
            task_type=TaskType.SEQ_CLS,
            r=int(lora["r"]),
            lora_alpha=int(lora["alpha"]),
            lora_dropout=float(lora.get("dropout", 0.0)),
            target_modules=lora.get("target_modules", "all-linear"),
        )
        return get_peft_model(model, spec), tok, None
    init = {"path": str(init_from), "adapter_sha256": file_sha256(Path(init_from) / "adapter_model.safetensors")}
    model = PeftModel.from_pretrained(model, str(init_from), is_trainable=True)
    cfg = model.peft_config["default"]
    if (cfg.r, cfg.lora_alpha) != (int(lora["r"]), int(lora["alpha"])):
        raise ValueError(
            f"init_from={init_from} holds a LoRA of r={cfg.r}, alpha={cfg.lora_alpha}; "
            f"the settings ask for r={lora['r']}, alpha={lora['alpha']}"
        )
    return model, tok, init


def _plan(model, n_train: int, epochs: int, batch_size: int, warmup_ratio: float, lr: float, seed: int) -> StepPlan:
    """Shuffled epochs cut into batches of ``batch_size`` (one per step); AdamW, linear warm-up then decay."""
    import random

    import torch

    rng = random.Random(seed)
    order = [i for _ in range(epochs) for i in rng.sample(range(n_train), n_train)]
    steps = math.ceil(len(order) / batch_size)
    warm = max(1, int(warmup_ratio * steps))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (steps - s) / max(1, steps - warm)))
    )
    groups = [order[k : k + batch_size] for k in range(0, len(order), batch_size)]
    return StepPlan(groups, order, warm, opt, sched)


def _fingerprint(settings: dict[str, Any], train: Sequence[Labelled], val: Sequence[Labelled]) -> str:
    """What a checkpoint must match to be resumed: every setting and the data."""
    import hashlib
    import json

    text = json.dumps([settings, list(train), list(val)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _start(ckpt: Path | None, fingerprint: str, plan: StepPlan, objective: _Objective, val) -> Progress:
    """A checkpoint's progress (weights, optimizer, scheduler and RNG restored), or a fresh one after the
    validation loss of the untrained classifier."""
    from harness.lm.lora import resume_checkpoint

    if ckpt is not None and ckpt.is_file():
        saved = resume_checkpoint(ckpt, fingerprint, objective.model, plan.opt, plan.sched)  # incl. dropout's RNG
        step = int(saved["step"])
        return Progress(step, step, saved["losses"], saved["history"], saved["best"])
    history = [{"step": 0, "val_loss": objective.validation(val)}]
    return Progress(history=history, best={"loss": history[0]["val_loss"], "step": 0, "weights": None})


def _steps(
    objective: _Objective,
    plan: StepPlan,
    progress: Progress,
    train: Sequence[Labelled],
    val: Sequence[Labelled],
    *,
    eval_every: int,
    fingerprint: str,
    ckpt: Path | None,
    on_step: Callable[[int], None] | None,
    show: bool,
) -> None:
    """The optimizer steps from ``progress.start``: a validation (and a checkpoint) every ``eval_every``."""
    import torch
    from tqdm import tqdm

    from harness.lm.lora import save_checkpoint, trainable_state

    model, opt, sched = objective.model, plan.opt, plan.sched
    model.train()
    for step in tqdm(
        range(progress.start + 1, len(plan.groups) + 1),
        initial=progress.start,
        total=len(plan.groups),
        disable=not show,
        desc="exit classifier",
    ):
        loss = objective.batch([train[i] for i in plan.groups[step - 1]])
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        progress.losses.append(round(float(loss.detach()), 4))
        if step % eval_every == 0 or step == len(plan.groups):
            loss_now = objective.validation(val)
            progress.history.append({"step": step, "val_loss": loss_now})
            if loss_now < progress.best["loss"]:
                progress.best = {"loss": loss_now, "step": step, "weights": trainable_state(model)}
            if ckpt is not None and step < len(plan.groups):
                save_checkpoint(
                    ckpt,
                    {
                        "fingerprint": fingerprint,
                        "step": step,
                        "weights": trainable_state(model),
                        "opt": opt.state_dict(),
                        "sched": sched.state_dict(),
                        "losses": progress.losses,
                        "torch_rng": torch.get_rng_state(),
                        "history": progress.history,
                        "best": progress.best,
                    },
                )
        if on_step is not None:
            on_step(step)


def train_cross_encoder(
    base: str,
    train: Sequence[Labelled],
    val: Sequence[Labelled],
    *,
    lora: dict[str, Any],
    lr: float,
    epochs: int,
    batch_size: int,
    warmup_ratio: float,
    max_length: int,
    seed: int,
    eval_every: int,
    progress: bool = True,
    compute_dtype: str | None = None,
    checkpoint: str | Path | None = None,
    on_step: Callable[[int], None] | None = None,
    init_from: str | Path | None = None,
) -> tuple[Any, Any, dict[str, Any]]:
    """LoRA (plus the new head) on ``base`` with binary cross-entropy; AdamW, linear warm-up then linear decay;
    the step with the lowest validation loss is kept. Returns (peft model, tokenizer, report).

    ``compute_dtype="bfloat16"``: forward and backward under CPU autocast (fp32 master weights, fp32 loss).
    ``checkpoint``: after every validation the trainable weights, optimizer, scheduler, losses and best step are
    saved there (atomically); the same call with the same data and settings resumes from it and ends with the
    adapter an uninterrupted run gives (other settings or data: refused). ``on_step(step)`` runs after each step
    and its checkpoint (tests kill the run there). ``init_from``: an earlier classifier's folder (as
    ``train.py`` saves it) whose LoRA and head this run starts from instead of a fresh LoRA and a new head
    (further training; ``lora`` must then name the same LoRA)."""
    import time

    import torch

    from harness.lm.lora import load_trainable

    torch.manual_seed(seed)
    model, tok, init = _with_lora(base, lora, init_from)
    objective = _Objective(model, tok, max_length, compute_dtype)
    plan = _plan(model, len(train), epochs, batch_size, warmup_ratio, lr, seed)
    settings = {
        "base": base,
        "lora": lora,
        "lr": lr,
        "epochs": epochs,
        "batch_size": batch_size,
        "warmup_ratio": warmup_ratio,
        "max_length": max_length,
        "seed": seed,
        "eval_every": eval_every,
        "compute_dtype": compute_dtype,
        "init_from": init,
    }
    fingerprint = _fingerprint(settings, train, val)
    ckpt = Path(checkpoint) if checkpoint else None
    t0 = time.perf_counter()
    state = _start(ckpt, fingerprint, plan, objective, val)
    _steps(
        objective,
        plan,
        state,
        train,
        val,
        eval_every=eval_every,
        fingerprint=fingerprint,
        ckpt=ckpt,
        on_step=on_step,
        show=progress,
    )
    if state.best["weights"] is not None:
        load_trainable(model, state.best["weights"])
    model.eval()
    if ckpt is not None and ckpt.is_file():
        ckpt.unlink()  # complete: the adapter is the caller's to save
    report = {
        "train_pairs": len(train),
        "val_pairs": len(val),
        "positive_share": round(sum(y for _, y in train) / max(1, len(train)), 4),
        "epochs": epochs,
        "steps": len(plan.groups),
        "batch_size": batch_size,
        "lr": lr,
        "lora": lora,
        "max_length": max_length,
        "compute_dtype": compute_dtype,
        "init_from": init,
        "step_losses": state.losses,
        "val_history": state.history,
        "selected_step": state.best["step"],
        "resumed_at_step": state.resumed_at,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    return model, tok, report
