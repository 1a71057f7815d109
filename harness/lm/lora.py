"""LoRA supervised fine-tuning, the model layer's training half (CompSelect's extractor and truncator, EXIT's
classifier): the adapters it writes are served merged by ``harness.lm.get_lm(..., adapter=...)``.

Loss: cross-entropy on the target tokens only (the prompt is masked with -100). One example per forward pass
(no padding), ``grad_accum`` examples per optimizer step, AdamW, linear warm-up then cosine decay (CompSelect's
LLaMA-Factory recipe: cosine, warm-up ratio 0.1). LoRA goes onto a weight-sharing copy of the base
(``weight_sharing_copy``): the base weights are frozen and never written.

Resumable: with a ``checkpoint`` path, the LoRA weights, optimizer, scheduler, RNG, losses and the best
validation state are saved there (atomically) every ``save_every`` optimizer steps; the same call after a kill
resumes from it and ends with the adapter an uninterrupted run gives (a checkpoint of other settings or data is
refused, not silently mixed in). ``eval_every`` records the validation loss along the way and ``select_best``
returns the step with the lowest one (000 App. B.2 keeps the best checkpoint on validation).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SFTExample:
    prompt: list[int]
    target: list[int]


def weight_sharing_copy(model):
    """A copy of ``model``'s module tree whose parameters and buffers are the original tensors (LoRA layers
    injected into it leave the original, which a generator may be serving, untouched)."""
    import copy

    memo: dict[int, Any] = {id(p): p for p in model.parameters()}
    memo.update({id(b): b for b in model.buffers()})
    return copy.deepcopy(model, memo)


def lora_config(r: int, alpha: int, dropout: float, target_modules: Any):
    from peft import LoraConfig

    return LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        bias="none",
        task_type="CAUSAL_LM",
        target_modules=list(target_modules) if not isinstance(target_modules, str) else target_modules,
    )


def _loss(model, ex: SFTExample, compute_dtype: str | None = None):
    """The example's mean target-token loss; ``compute_dtype`` (``bfloat16``) runs the forward pass under CPU/GPU
    autocast while the weights, the LoRA and the optimizer stay in their own dtype (mixed precision)."""
    import contextlib

    import torch

    ids = torch.tensor([ex.prompt + ex.target], device=model.device)
    labels = torch.tensor([[-100] * len(ex.prompt) + ex.target], device=model.device)
    amp = (
        torch.autocast(model.device.type, dtype=getattr(torch, compute_dtype))
        if compute_dtype
        else contextlib.nullcontext()
    )
    with amp:
        return model(input_ids=ids, labels=labels).loss.float()


def _losses(model, batch: Sequence[SFTExample], compute_dtype: str | None = None):
    """Each example's mean target-token loss from one right-padded forward pass (a tensor of ``len(batch)``);
    one example goes through ``_loss`` unpadded. Right padding leaves the real tokens' positions and causal
    attention as they are, so the losses equal the one-at-a-time ones up to float rounding."""
    import contextlib

    import torch

    if len(batch) == 1:
        return _loss(model, batch[0], compute_dtype).reshape(1)
    width = max(len(e.prompt) + len(e.target) for e in batch)
    ids = torch.zeros((len(batch), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for b, e in enumerate(batch):
        n = len(e.prompt) + len(e.target)
        ids[b, :n] = torch.tensor(e.prompt + e.target)
        mask[b, :n] = 1
        labels[b, len(e.prompt) : n] = torch.tensor(e.target)
    ids, mask, labels = (t.to(model.device) for t in (ids, mask, labels))
    amp = (
        torch.autocast(model.device.type, dtype=getattr(torch, compute_dtype))
        if compute_dtype
        else contextlib.nullcontext()
    )
    with amp:
        logits = model(input_ids=ids, attention_mask=mask).logits
    shifted = labels[:, 1:]
    nll = torch.nn.functional.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]), shifted.reshape(-1), ignore_index=-100, reduction="none"
    ).view(shifted.shape)
    keep = (shifted != -100).float()
    return (nll * keep).sum(1) / keep.sum(1)


def _chunks(items: Sequence[Any], n: int) -> list[Sequence[Any]]:
    return [items[k : k + n] for k in range(0, len(items), max(1, n))]


def eval_loss(
    model, examples: Sequence[SFTExample], compute_dtype: str | None = None, micro_batch: int = 1
) -> float | None:
    """Mean per-example target-token loss (no gradient), ``micro_batch`` examples per forward pass."""
    import torch

    if not examples:
        return None
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        losses = [float(v) for c in _chunks(examples, micro_batch) for v in _losses(model, c, compute_dtype)]
    model.train(was_training)
    return sum(losses) / len(losses)


def _fingerprint(base, train: Sequence[SFTExample], val: Sequence[SFTExample], settings: dict[str, Any]) -> str:
    """What a checkpoint must match to be resumed: the base, the data and every training setting."""
    h = hashlib.sha256(
        json.dumps(
            {"base": str(getattr(base.config, "_name_or_path", "")), **settings}, sort_keys=True, default=str
        ).encode()
    )
    for part in (train, val):
        for e in part:
            h.update(json.dumps([e.prompt, e.target]).encode())
        h.update(b"|")
    return h.hexdigest()


def trainable_state(model) -> dict[str, Any]:
    """Copies of the parameters that train (a checkpoint's weights)."""
    return {k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad}


def load_trainable(model, state: dict[str, Any]) -> None:
    """Copy a ``trainable_state`` back into the model's parameters."""
    import torch

    params = dict(model.named_parameters())
    with torch.no_grad():
        for k, v in state.items():
            params[k].copy_(v)


def resume_checkpoint(path: Path, fingerprint: str, model, opt, sched, weights: str = "weights") -> dict[str, Any]:
    """Load a ``save_checkpoint`` file into the model's trainable weights (key ``weights``), the optimizer, the
    scheduler and torch's RNG, and return it; refused when ``fingerprint`` (data and settings) differs."""
    import torch

    saved = torch.load(path, weights_only=True)
    if saved["fingerprint"] != fingerprint:
        raise ValueError(f"{path} was written by a training run of other settings or data: delete it to start over")
    load_trainable(model, saved[weights])
    opt.load_state_dict(saved["opt"])
    sched.load_state_dict(saved["sched"])
    torch.set_rng_state(saved["torch_rng"])
    return saved


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """``torch.save`` through a temporary file and an atomic rename."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)  # a kill leaves the previous checkpoint or this one, never half of one


def resolve_compute_dtype(value: str | None) -> str | None:
    """A stage's ``compute_dtype`` as it runs: ``auto`` is bfloat16 where the device has native bf16 (a GPU, or a
    CPU with avx512_bf16 / amx_bf16) and None (the weights' own dtype) elsewhere, where emulated bf16 autocast is
    several times slower than fp32; ``float32`` is None too (no autocast); other values unchanged."""
    from harness.lm.hardware import pick_dtype

    value = pick_dtype(value or "float32")
    return None if value == "float32" else value


@dataclass
class StepPlan:
    """A training run's optimizer steps: each step's example indices (``groups``, cut from ``order``), the warm-up
    steps, the optimizer and its schedule (``train_lora``'s; EXIT's classifier loop builds one too)."""

    groups: list[list[int]]
    order: list[int]
    warm: int
    opt: Any
    sched: Any


@dataclass
class Progress:
    """What a resumable run carries besides its weights and optimizer: the step it goes on from (``resumed_at``
    when it resumed a checkpoint), the per-step losses, the validation history, the best step so far and the
    validation loss before training."""

    start: int = 0
    resumed_at: int | None = None
    losses: list[float] = field(default_factory=list)
    history: list[Any] = field(default_factory=list)
    best: dict[str, Any] | None = None
    val_before: float | None = None


def _plan(model, n_train: int, epochs: float, grad_accum: int, warmup_ratio: float, lr: float, rng, max_steps):
    """Shuffled epochs (a fractional last one cut short), grouped ``grad_accum`` examples per optimizer step, at
    most ``max_steps`` steps; AdamW with linear warm-up, then cosine decay."""
    import torch

    order: list[int] = []
    for e in range(math.ceil(epochs)):
        ep = list(range(n_train))
        rng.shuffle(ep)
        order += ep if e + 1 <= epochs else ep[: round((epochs - e) * len(ep))]
    steps = math.ceil(len(order) / grad_accum)
    if max_steps is not None:
        steps = min(steps, max_steps)
        order = order[: steps * grad_accum]
    groups = [order[k : k + grad_accum] for k in range(0, len(order), grad_accum)]
    warm = max(1, round(warmup_ratio * steps))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm))),
    )
    return StepPlan(groups, order, warm, opt, sched)


def _start(ckpt: Path | None, fp: str, model, plan: StepPlan, val, compute_dtype, micro_batch: int) -> Progress:
    """A checkpoint's progress (weights, optimizer, scheduler and RNG restored), or a fresh one after the
    validation loss of the untrained adapter."""
    if ckpt is not None and ckpt.is_file():
        saved = resume_checkpoint(ckpt, fp, model, plan.opt, plan.sched, weights="lora")
        start = int(saved["step"])
        log.info("resumed %s at step %d/%d", ckpt, start, len(plan.groups))
        return Progress(start, start, saved["step_losses"], saved["val_history"], saved["best"], saved["val_before"])
    return Progress(val_before=eval_loss(model, val, compute_dtype, micro_batch))


def _accumulate(model, train, group: list[int], loss_norm: str, grad_accum: int, compute_dtype, micro_batch) -> float:
    """Forward and backward over one optimizer step's examples (``micro_batch`` per pass); returns its loss."""
    import torch

    acc = 0.0
    total = sum(len(train[g].target) for g in group)
    for chunk in _chunks(group, micro_batch):
        losses = _losses(model, [train[j] for j in chunk], compute_dtype)
        if loss_norm == "token":
            w = torch.tensor([len(train[j].target) / total for j in chunk], device=losses.device)
            (losses * w).sum().backward()
            acc += float((losses.detach() * w).sum())
        else:
            (losses.sum() / grad_accum).backward()
            acc += float(losses.detach().sum()) / len(group)
    return acc


def train_lora(
    base,
    train: Sequence[SFTExample],
    val: Sequence[SFTExample],
    *,
    r: int,
    alpha: int,
    dropout: float,
    target_modules: Any,
    lr: float,
    epochs: float,
    grad_accum: int,
    warmup_ratio: float,
    seed: int,
    max_steps: int | None = None,
    loss_norm: str = "example",
    checkpoint: str | Path | None = None,
    save_every: int = 0,
    eval_every: int = 0,
    select_best: bool = False,
    progress: bool = False,
    on_step: Callable[[int], None] | None = None,
    compute_dtype: str | None = None,
    snapshot_every: int = 0,
    on_snapshot: Callable[[int, Any], None] | None = None,
    micro_batch: int = 1,
) -> tuple[Any, dict[str, Any]]:
    """Train a LoRA adapter on ``base`` (left untouched); returns the peft model and a report of the run.

    ``loss_norm``: ``example`` averages each example's mean token loss over the optimizer step (every example
    weighs the same); ``token`` averages over every target token of the step (HF Trainer's normalisation under
    gradient accumulation, so LLaMA-Factory's). The difference matters for the truncator: an empty target is
    one token (stop), so per example it outweighs the first token of a kept prefix ~30 to 1. ``checkpoint``,
    ``save_every``, ``eval_every``, ``select_best``: see the module docstring; ``on_step(step)`` runs after each
    optimizer step and its checkpoint (tests kill the process there). ``compute_dtype="bfloat16"``: forward and
    backward under autocast (fp32 master weights; see ``_loss``), null: the weights' own dtype, ``auto``:
    ``resolve_compute_dtype`` (the report records what ran).
    ``on_snapshot(step, model)`` runs every ``snapshot_every`` optimizer steps and after the last one, before
    any best-step selection (to keep the adapters of several epochs and select among them on another measure).
    ``micro_batch``: examples per padded forward pass within an optimizer step (a GPU runs several at the cost of
    one; the same losses up to rounding; 1: one unpadded example at a time, the CPU's fastest).
    """
    o = _Options(
        r=r,
        alpha=alpha,
        dropout=dropout,
        target_modules=target_modules,
        lr=lr,
        epochs=epochs,
        grad_accum=grad_accum,
        warmup_ratio=warmup_ratio,
        seed=seed,
        max_steps=max_steps,
        loss_norm=loss_norm,
        save_every=save_every,
        eval_every=eval_every,
        select_best=select_best,
        progress=progress,
        on_step=on_step,
        compute_dtype=resolve_compute_dtype(compute_dtype),
        snapshot_every=snapshot_every,
        on_snapshot=on_snapshot,
        micro_batch=micro_batch,
    )
    if loss_norm not in ("example", "token"):
        raise ValueError(f"loss_norm={loss_norm!r}; valid: example, token")
    if select_best and not eval_every:
        raise ValueError("select_best needs eval_every > 0")
    if select_best and not val:
        log.warning("select_best: no validation examples, the last step is kept")
    return _train(base, train, val, checkpoint, o)


@dataclass
class _Options:
    """``train_lora``'s settings (see its docstring), ``compute_dtype`` resolved."""

    r: int
    alpha: int
    dropout: float
    target_modules: Any
    lr: float
    epochs: float
    grad_accum: int
    warmup_ratio: float
    seed: int
    max_steps: int | None
    loss_norm: str
    save_every: int
    eval_every: int
    select_best: bool
    progress: bool
    on_step: Callable[[int], None] | None
    compute_dtype: str | None
    snapshot_every: int
    on_snapshot: Callable[[int, Any], None] | None
    micro_batch: int

    def fingerprinted(self) -> dict[str, Any]:
        """The settings a checkpoint must match to be resumed (``_fingerprint``)."""
        keys = ("r", "alpha", "dropout", "target_modules", "lr", "epochs", "grad_accum", "warmup_ratio", "seed")
        settings = {k: getattr(self, k) for k in (*keys, "max_steps", "loss_norm", "eval_every")}
        settings["target_modules"] = str(self.target_modules)
        if self.compute_dtype:  # only when set, so that checkpoints written before the option still resume
            settings["compute_dtype"] = self.compute_dtype
        if self.micro_batch > 1:
            settings["micro_batch"] = self.micro_batch
        return settings


def _train(base, train: Sequence[SFTExample], val: Sequence[SFTExample], checkpoint, o: _Options):
    """``train_lora`` once its settings are checked: the plan, the start (fresh or resumed), the steps, the
    best step's weights, the report."""
    import torch
    from peft import get_peft_model

    torch.manual_seed(o.seed)
    rng = random.Random(o.seed)
    model = get_peft_model(weight_sharing_copy(base), lora_config(o.r, o.alpha, o.dropout, o.target_modules))
    plan = _plan(model, len(train), o.epochs, o.grad_accum, o.warmup_ratio, o.lr, rng, o.max_steps)
    fp = _fingerprint(base, train, val, o.fingerprinted())
    ckpt = Path(checkpoint) if checkpoint else None
    t0, c0 = time.perf_counter(), time.process_time()
    state = _start(ckpt, fp, model, plan, val, o.compute_dtype, o.micro_batch)
    _Loop(model, train, val, plan, state, fp, ckpt, o).steps()
    selected = len(state.losses)
    if o.select_best and state.best is not None and state.best["step"] != selected:
        load_trainable(model, state.best["lora"])
        selected = state.best["step"]
    model.eval()
    val_after = eval_loss(model, val, o.compute_dtype, o.micro_batch)
    if ckpt is not None and ckpt.is_file():
        ckpt.unlink()  # the run is complete: its adapter is the caller's to save
    targets = list(o.target_modules) if not isinstance(o.target_modules, str) else o.target_modules
    report = {
        "examples": len(train),
        "val_examples": len(val),
        "epochs": o.epochs,
        "optimizer_steps": len(state.losses),
        "grad_accum": o.grad_accum,
        "lr": o.lr,
        "warmup_steps": plan.warm,
        "lora": {"r": o.r, "alpha": o.alpha, "dropout": o.dropout, "target_modules": targets},
        "seed": o.seed,
        "loss_norm": o.loss_norm,
        "compute_dtype": o.compute_dtype,
        "micro_batch": o.micro_batch,
        "step_losses": state.losses,
        "val_loss_before": state.val_before,
        "val_loss_after": val_after,
        "val_history": state.history,
        "selected_step": selected,
        "resumed_at_step": state.resumed_at,
        "tokens": sum(len(train[j].prompt) + len(train[j].target) for j in plan.order),
        "wall_s": round(time.perf_counter() - t0, 1),
        "cpu_s": round(time.process_time() - c0, 1),
    }
    return model, report


@dataclass
class _Loop:
    """``train_lora``'s optimizer steps from ``state.start``, with validation, checkpoints and snapshots."""

    model: Any
    train: Sequence[SFTExample]
    val: Sequence[SFTExample]
    plan: StepPlan
    state: Progress
    fp: str
    ckpt: Path | None
    o: _Options

    def steps(self) -> None:
        import torch
        from tqdm.auto import tqdm

        model, plan, state, o = self.model, self.plan, self.state, self.o
        params = [p for p in model.parameters() if p.requires_grad]
        n = len(plan.groups)
        model.train()
        bar = tqdm(total=n, initial=state.start, desc="LoRA SFT", unit="step", disable=not o.progress)
        for s in range(state.start, n):
            acc = _accumulate(
                model, self.train, plan.groups[s], o.loss_norm, o.grad_accum, o.compute_dtype, o.micro_batch
            )
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            plan.opt.step()
            plan.sched.step()
            plan.opt.zero_grad(set_to_none=True)
            state.losses.append(round(acc, 4))
            done = s + 1
            if o.eval_every and (done % o.eval_every == 0 or done == n):
                self.validate(done)
            bar.update(1)
            bar.set_postfix(loss=f"{acc:.3f}")
            if self.ckpt is not None and o.save_every and done % o.save_every == 0 and done < n:
                self.save(done)
            if o.on_snapshot is not None and o.snapshot_every and (done % o.snapshot_every == 0 or done == n):
                o.on_snapshot(done, model)
            if o.on_step is not None:
                o.on_step(done)
        bar.close()

    def validate(self, done: int) -> None:
        """The validation loss at step ``done``; the best step's weights kept when ``select_best``."""
        v = eval_loss(self.model, self.val, self.o.compute_dtype, self.o.micro_batch)
        self.state.history.append([done, v])
        if self.o.select_best and v is not None and (self.state.best is None or v < self.state.best["loss"]):
            self.state.best = {"step": done, "loss": v, "lora": trainable_state(self.model)}

    def save(self, done: int) -> None:
        """A checkpoint after step ``done`` (atomic: a kill leaves this one or the previous one)."""
        import torch

        state, plan = self.state, self.plan
        save_checkpoint(
            self.ckpt,
            {
                "fingerprint": self.fp,
                "step": done,
                "lora": trainable_state(self.model),
                "opt": plan.opt.state_dict(),
                "sched": plan.sched.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "step_losses": state.losses,
                "val_history": state.history,
                "best": state.best,
                "val_before": state.val_before,
            },
        )


def from_checkpoint(
    base, checkpoint: str | Path, *, r: int, alpha: int, dropout: float, target_modules: Any, which: str = "best"
) -> tuple[Any, dict[str, Any]]:
    """The adapter of a stopped training run, read from its checkpoint: ``best`` (the step with the lowest
    validation loss so far) or ``last`` (the checkpoint's step); the LoRA settings must be the run's. Returns the
    peft model and a report (steps done, selected step, validation history) for the manifest, so that a run cut
    short for time is recorded as such."""
    import torch
    from peft import get_peft_model

    if which not in ("best", "last"):
        raise ValueError(f"which={which!r}; valid: best, last")
    saved = torch.load(Path(checkpoint), weights_only=True)
    state = saved["lora"] if which == "last" or not saved.get("best") else saved["best"]["lora"]
    model = get_peft_model(weight_sharing_copy(base), lora_config(r, alpha, dropout, target_modules))
    load_trainable(model, state)
    model.eval()
    selected = int(saved["step"]) if state is saved["lora"] else int(saved["best"]["step"])
    return model, {
        "from_checkpoint": str(checkpoint),
        "stopped_at_step": int(saved["step"]),
        "selected_step": selected,
        "step_losses": saved["step_losses"],
        "val_loss_before": saved["val_before"],
        "val_history": saved["val_history"],
    }


def save_adapter(
    model, out_dir: str | Path, base_ref: str, dtype: str = "float16", embedding_layers: bool | str = "auto"
) -> Path:
    """Write ``adapter_config.json`` and ``adapter_model.safetensors`` (weights cast to ``dtype`` to stay
    small; a classifier's new head, which peft keeps with the adapter, included).

    ``base_model_name_or_path`` records the model reference (``embedded:...`` or a hub id), not a local path.
    ``embedding_layers``: peft's ``save_embedding_layers`` (``auto`` asks the hub whether the base's vocabulary
    changed unless the LoRA targets embeddings; ``False`` saves none and asks nothing).
    """
    import torch
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = model.peft_config["default"]
    cfg.base_model_name_or_path = base_ref
    cfg.save_pretrained(str(out))
    state = get_peft_model_state_dict(model, save_embedding_layers=embedding_layers)
    save_file(
        {k: v.detach().to(getattr(torch, dtype)).contiguous() for k, v in state.items()},
        str(out / "adapter_model.safetensors"),
    )
    return out
