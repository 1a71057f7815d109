"""LoRA supervised fine-tuning of the extractor and the truncator (000 section 4.1 Eq. 4, section 4.3 Eq. 11).

Loss: cross-entropy on the target tokens only (the chat-formatted prompt is masked with -100), target followed
by the end-of-turn token, so an empty target teaches the model to stop at once (the truncator's empty set).
One example per forward pass (no padding), ``grad_accum`` examples per optimizer step, AdamW, linear warm-up
then cosine decay (the authors' LLaMA-Factory recipe: cosine, warm-up ratio 0.1). LoRA goes onto a
weight-sharing copy of the base (``lora_lm.weight_sharing_copy``): the base weights are frozen and never
written.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SFTExample:
    prompt: list[int]
    target: list[int]


def make_example(lm, messages: list[dict[str, str]], target: str) -> SFTExample:
    """Token ids of a chat prompt and its target (+ the model's end-of-turn token)."""
    ids = lm.tokenizer(target, add_special_tokens=False)["input_ids"] if target else []
    return SFTExample(lm.encode(messages), [*ids, lm.eos_ids()[0]])


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


def _loss(model, ex: SFTExample):
    import torch

    ids = torch.tensor([ex.prompt + ex.target], device=model.device)
    labels = torch.tensor([[-100] * len(ex.prompt) + ex.target], device=model.device)
    return model(input_ids=ids, labels=labels).loss


def eval_loss(model, examples: Sequence[SFTExample]) -> float | None:
    """Mean per-example target-token loss (no gradient)."""
    import torch

    if not examples:
        return None
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        losses = [float(_loss(model, e)) for e in examples]
    model.train(was_training)
    return sum(losses) / len(losses)


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
) -> tuple[Any, dict[str, Any]]:
    """Train a LoRA adapter on ``base`` (left untouched); returns the peft model and a report of the run.

    ``loss_norm``: ``example`` averages each example's mean token loss over the optimizer step (every example
    weighs the same); ``token`` averages over every target token of the step (HF Trainer's normalisation under
    gradient accumulation, so LLaMA-Factory's). The difference matters for the truncator: an empty target is
    one token (stop), so per example it outweighs the first token of a kept prefix ~30 to 1.
    """
    if loss_norm not in ("example", "token"):
        raise ValueError(f"loss_norm={loss_norm!r}; valid: example, token")
    import torch
    from peft import get_peft_model

    from methods.compselect.lora_lm import weight_sharing_copy

    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = get_peft_model(weight_sharing_copy(base), lora_config(r, alpha, dropout, target_modules))
    params = [p for p in model.parameters() if p.requires_grad]
    order: list[int] = []
    for e in range(math.ceil(epochs)):
        ep = list(range(len(train)))
        rng.shuffle(ep)
        order += ep if e + 1 <= epochs else ep[: round((epochs - e) * len(ep))]
    steps = math.ceil(len(order) / grad_accum)
    if max_steps is not None:
        steps = min(steps, max_steps)
        order = order[: steps * grad_accum]
    warm = max(1, round(warmup_ratio * steps))
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm))),
    )
    t0, c0 = time.perf_counter(), time.process_time()
    val_before = eval_loss(model, val)
    model.train()
    step_losses, acc, n_acc = [], 0.0, 0
    for i, j in enumerate(order):
        loss = _loss(model, train[j])
        if loss_norm == "token":
            group = order[i - i % grad_accum : i - i % grad_accum + grad_accum]
            w = len(train[j].target) / sum(len(train[g].target) for g in group)
            (loss * w).backward()
            acc, n_acc = acc + float(loss.detach()) * w * len(group), n_acc + 1
        else:
            (loss / grad_accum).backward()
            acc, n_acc = acc + float(loss.detach()), n_acc + 1
        if n_acc == grad_accum or i == len(order) - 1:
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step_losses.append(round(acc / n_acc, 4))
            log.info("step %d/%d loss %.4f", len(step_losses), steps, acc / n_acc)
            acc, n_acc = 0.0, 0
    model.eval()
    val_after = eval_loss(model, val)
    report = {
        "examples": len(train),
        "val_examples": len(val),
        "epochs": epochs,
        "optimizer_steps": len(step_losses),
        "grad_accum": grad_accum,
        "lr": lr,
        "warmup_steps": warm,
        "lora": {
            "r": r,
            "alpha": alpha,
            "dropout": dropout,
            "target_modules": list(target_modules) if not isinstance(target_modules, str) else target_modules,
        },
        "seed": seed,
        "loss_norm": loss_norm,
        "step_losses": step_losses,
        "val_loss_before": val_before,
        "val_loss_after": val_after,
        "tokens": sum(len(train[j].prompt) + len(train[j].target) for j in order),
        "wall_s": round(time.perf_counter() - t0, 1),
        "cpu_s": round(time.process_time() - c0, 1),
    }
    return model, report


def save_adapter(model, out_dir: str | Path, base_ref: str, dtype: str = "float16") -> Path:
    """Write ``adapter_config.json`` and ``adapter_model.safetensors`` (weights cast to ``dtype`` to stay
    small).

    ``base_model_name_or_path`` records the model reference (``embedded:...`` or a hub id), not a local path.
    """
    import torch
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = model.peft_config["default"]
    cfg.base_model_name_or_path = base_ref
    cfg.save_pretrained(str(out))
    state = get_peft_model_state_dict(model)
    save_file(
        {k: v.detach().to(getattr(torch, dtype)).contiguous() for k, v in state.items()},
        str(out / "adapter_model.safetensors"),
    )
    return out
