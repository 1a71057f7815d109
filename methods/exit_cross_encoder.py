"""EXIT's sentence classifier as a small cross-encoder (the embedded profile's stand-in for EXIT's Gemma-2B LoRA).

EXIT (arXiv 2412.12559) scores every sentence with its query and its whole passage. The embedded profile has no
EXIT checkpoint, and zero-shot SmolLM2-135M answers EXIT's Yes/No prompt near chance (a LoRA on it, trained by
``methods.exit_train`` with ``kind=lm``, stayed at chance validation loss). This classifier keeps EXIT's inputs
-- query, sentence, passage -- as a BERT sentence pair: ``[CLS] query [SEP] sentence [SEP] title + passage
[SEP]`` (the passage is cut at ``max_length``, the sentence never), one logit, P(useful) = sigmoid(logit). Its
weights are all-MiniLM-L6-v2 with a LoRA and a new classification head, trained by ``methods.exit_train`` on
sentence labels from the shipped train splits; the adapter (about 1 MB) is what the training writes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

Triple = tuple[str, str, str]  # (query, sentence, passage with its title)


def pair(query: str, sentence: str, context: str, sep: str) -> tuple[str, str]:
    """The (first, second) texts of the sentence pair: the query; the sentence, then its passage."""
    return query, f"{sentence} {sep} {context}"


def build_model(base: str, adapter: str | None = None, device: str = "cpu"):
    """(model, tokenizer): ``base`` as a one-logit sequence classifier, with ``adapter`` merged when given."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from harness.models import resolve

    path = resolve(base).path
    tok = AutoTokenizer.from_pretrained(path)
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the new head's "newly initialized" warning: expected here
    try:
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
    finally:
        hf_logging.set_verbosity(level)
    if adapter:
        if not (Path(adapter) / "adapter_config.json").is_file():
            raise FileNotFoundError(f"EXIT classifier not found at {adapter}: run `python -m methods.exit_train`")
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    return model.to(device).eval(), tok


def features(tok, triples: Sequence[Triple], max_length: int) -> dict[str, Any]:
    firsts, seconds = zip(*(pair(q, s, c, tok.sep_token) for q, s, c in triples), strict=True)
    return tok(list(firsts), list(seconds), truncation="only_second", max_length=max_length, padding=True,
               return_tensors="pt")


class CrossEncoderClassifier:
    """P(useful) of (query, sentence, passage) triples; see the module docstring."""

    def __init__(self, base: str, adapter: str | None, max_length: int = 256, batch_size: int = 64,
                 device: str = "cpu") -> None:
        self.base, self.adapter, self.max_length = base, adapter, max_length
        self.batch_size, self.device = batch_size, device
        self.model: Any = None
        self.tok: Any = None

    def load(self) -> None:
        if self.model is None:
            from harness import resources

            key = ("exit_cross_encoder", self.base, self.adapter, self.device)
            self.model, self.tok = resources.shared(key, lambda: build_model(self.base, self.adapter, self.device))

    def score(self, triples: Sequence[Triple]) -> list[float]:
        import torch

        self.load()
        order = sorted(range(len(triples)), key=lambda i: len(triples[i][1]) + len(triples[i][2]))  # less padding
        out = [0.0] * len(triples)
        with torch.inference_mode():
            for at in range(0, len(order), self.batch_size):
                idx = order[at : at + self.batch_size]
                feats = features(self.tok, [triples[i] for i in idx], self.max_length).to(self.device)
                logits = self.model(**feats).logits[:, 0].float().tolist()
                for i, x in zip(idx, logits, strict=True):
                    out[i] = 1.0 / (1.0 + math.exp(-x))
        return out

    def describe(self) -> dict[str, Any]:
        from harness.models import file_sha256, resolve

        weights = Path(self.adapter) / "adapter_model.safetensors" if self.adapter else None
        return {"kind": "cross_encoder", "base": resolve(self.base).describe(), "adapter": self.adapter,
                "adapter_sha256": file_sha256(weights) if weights else None,
                "max_length": self.max_length}


def train_cross_encoder(
    base: str,
    train: Sequence[tuple[Triple, bool]],
    val: Sequence[tuple[Triple, bool]],
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
    and its checkpoint (tests kill the run there). ``init_from``: an earlier classifier's folder (``save_classifier``)
    whose LoRA and head this run starts from instead of a fresh LoRA and a new head (further training; ``lora``
    must then name the same LoRA)."""
    import hashlib
    import json
    import random
    import time

    import torch
    from peft import LoraConfig, PeftModel, TaskType, get_peft_model
    from tqdm import tqdm

    from harness.lm.lora import load_trainable, resume_checkpoint, save_checkpoint, trainable_state
    from harness.models import file_sha256

    torch.manual_seed(seed)
    model, tok = build_model(base)
    init = None
    if init_from is not None:
        init = {"path": str(init_from), "adapter_sha256": file_sha256(Path(init_from) / "adapter_model.safetensors")}
        model = PeftModel.from_pretrained(model, str(init_from), is_trainable=True)
        cfg = model.peft_config["default"]
        if (cfg.r, cfg.lora_alpha) != (int(lora["r"]), int(lora["alpha"])):
            raise ValueError(f"init_from={init_from} holds a LoRA of r={cfg.r}, alpha={cfg.lora_alpha}; "
                             f"the settings ask for r={lora['r']}, alpha={lora['alpha']}")
    else:
        spec = LoraConfig(task_type=TaskType.SEQ_CLS, r=int(lora["r"]), lora_alpha=int(lora["alpha"]),
                          lora_dropout=float(lora.get("dropout", 0.0)),
                          target_modules=lora.get("target_modules", "all-linear"))
        model = get_peft_model(model, spec)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    autocast = torch.autocast("cpu", dtype=getattr(torch, compute_dtype or "bfloat16"), enabled=bool(compute_dtype))

    def batch_loss(rows) -> torch.Tensor:
        feats = features(tok, [t for t, _ in rows], max_length)
        target = torch.tensor([float(y) for _, y in rows])
        with autocast:
            logits = model(**feats).logits[:, 0]
        return loss_fn(logits.float(), target)

    def val_loss() -> float:
        model.eval()
        with torch.inference_mode():
            total = sum(float(batch_loss(val[i : i + 64])) * len(val[i : i + 64]) for i in range(0, len(val), 64))
        model.train()
        return round(total / max(1, len(val)), 5)

    rng = random.Random(seed)
    order = [i for _ in range(epochs) for i in rng.sample(range(len(train)), len(train))]
    steps = math.ceil(len(order) / batch_size)
    warm = max(1, int(warmup_ratio * steps))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (steps - s) / max(1, steps - warm))))
    settings = {"base": base, "lora": lora, "lr": lr, "epochs": epochs, "batch_size": batch_size,
                "warmup_ratio": warmup_ratio, "max_length": max_length, "seed": seed, "eval_every": eval_every,
                "compute_dtype": compute_dtype, "init_from": init}
    fp = hashlib.sha256(json.dumps([settings, list(train), list(val)], sort_keys=True, default=str).encode())
    fingerprint = fp.hexdigest()
    ckpt = Path(checkpoint) if checkpoint else None
    t0 = time.perf_counter()
    start, resumed_at = 0, None
    if ckpt is not None and ckpt.is_file():
        saved = resume_checkpoint(ckpt, fingerprint, model, opt, sched)  # incl. the RNG: the encoder's dropout
        start = resumed_at = int(saved["step"])
        losses, history, best = saved["losses"], saved["history"], saved["best"]
    else:
        history = [{"step": 0, "val_loss": val_loss()}]
        best = {"loss": history[0]["val_loss"], "step": 0, "weights": None}
        losses: list[float] = []
    model.train()
    for step in tqdm(range(start + 1, steps + 1), initial=start, total=steps, disable=not progress,
                     desc="exit classifier"):
        loss = batch_loss([train[i] for i in order[(step - 1) * batch_size : step * batch_size]])
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(round(float(loss.detach()), 4))
        if step % eval_every == 0 or step == steps:
            history.append({"step": step, "val_loss": val_loss()})
            if history[-1]["val_loss"] < best["loss"]:
                best = {"loss": history[-1]["val_loss"], "step": step, "weights": trainable_state(model)}
            if ckpt is not None and step < steps:
                save_checkpoint(ckpt, {"fingerprint": fingerprint, "step": step, "weights": trainable_state(model),
                                       "opt": opt.state_dict(), "sched": sched.state_dict(), "losses": losses,
                                       "torch_rng": torch.get_rng_state(),
                                       "history": history, "best": best})
        if on_step is not None:
            on_step(step)
    if best["weights"] is not None:
        load_trainable(model, best["weights"])
    model.eval()
    if ckpt is not None and ckpt.is_file():
        ckpt.unlink()  # complete: the adapter is the caller's to save
    report = {"train_pairs": len(train), "val_pairs": len(val), "positive_share": round(
        sum(y for _, y in train) / max(1, len(train)), 4), "epochs": epochs, "steps": steps, "batch_size": batch_size,
        "lr": lr, "lora": lora, "max_length": max_length, "compute_dtype": compute_dtype, "init_from": init,
        "step_losses": losses,
        "val_history": history, "selected_step": best["step"], "resumed_at_step": resumed_at,
        "wall_s": round(time.perf_counter() - t0, 1)}
    return model, tok, report


def save_classifier(model, out: str | Path, base_ref: str) -> Path:
    """The LoRA and the head, fp16, as a PEFT adapter folder (``build_model(base, out)`` loads it)."""
    import torch
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = model.peft_config["default"]
    cfg.base_model_name_or_path = base_ref
    cfg.save_pretrained(str(out))
    state = get_peft_model_state_dict(model, save_embedding_layers=False)
    save_file({k: v.detach().to(torch.float16).contiguous() for k, v in state.items()},
              str(out / "adapter_model.safetensors"))
    return out
