"""Training the clue reranker (000 section 4.2.1, Eq. 6) on (question, positive clue, negative clue) triplets.

Loss: sentence-transformers ``MultipleNegativesRankingLoss`` (cosine x 20, the authors' code): for each
question the positive competes with its own negative and every other clue of the batch. A batch holds each
question at most once, so another positive of the same question is never used as its negative. Adam(W), linear
warm-up then constant (the paper: lr 2e-5, 1000 warm-up steps, batch 64, 4 epochs). ``lora`` trains a LoRA
adapter on the encoder (the embedded profile, to keep the committed artifact small); ``lora=None`` fine-tunes
every weight. Written with a plain loop because ``SentenceTransformerTrainer`` needs the ``datasets`` package.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Triplet = tuple[str, str, str]  # (question, positive clue, negative clue)


def batches_one_per_question(triplets: Sequence[Triplet], batch_size: int, rng: random.Random) -> list[list[Triplet]]:
    """Shuffled batches in which no question appears twice."""
    by_q: dict[str, list[Triplet]] = {}
    for t in triplets:
        by_q.setdefault(t[0], []).append(t)
    for ts in by_q.values():
        rng.shuffle(ts)
    queues = list(by_q.values())
    batches: list[list[Triplet]] = []
    while any(queues):
        live = [q for q in queues if q]
        rng.shuffle(live)
        round_ = [q.pop() for q in live]
        batches += [round_[i : i + batch_size] for i in range(0, len(round_), batch_size)]
    rng.shuffle(batches)
    return batches


def _features(st, texts: list[str]) -> dict[str, Any]:
    """Model inputs for ``texts`` on the model's device (sentence-transformers 6 adds a non-tensor ``modality``)."""
    feats = (st.preprocess if hasattr(st, "preprocess") else st.tokenize)(texts)
    return {k: v.to(st.device) if hasattr(v, "to") else v for k, v in feats.items()}


def pairwise_accuracy(model, triplets: Sequence[Triplet]) -> float | None:
    """Share of triplets where cos(q, positive) > cos(q, negative)."""
    if not triplets:
        return None
    texts = sorted({x for t in triplets for x in t})
    emb = model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    idx = {t: i for i, t in enumerate(texts)}
    ok = sum(float(emb[idx[q]] @ emb[idx[p]]) > float(emb[idx[q]] @ emb[idx[n]]) for q, p, n in triplets)
    return ok / len(triplets)


def train_reranker(
    base: str,
    train: Sequence[Triplet],
    val: Sequence[Triplet],
    *,
    lora: dict[str, Any] | None,
    lr: float,
    epochs: int,
    batch_size: int,
    warmup_steps: int,
    scale: float,
    seed: int,
    max_seq_length: int,
    device: str = "cpu",
) -> tuple[Any, dict[str, Any]]:
    import torch
    from sentence_transformers.losses import MultipleNegativesRankingLoss

    from harness.lm.encoders import sentence_model

    torch.manual_seed(seed)
    rng = random.Random(seed)
    st = sentence_model(base, device, max_seq_length)
    acc_before = pairwise_accuracy(st, val)
    if lora:
        from peft import LoraConfig, get_peft_model

        st[0].auto_model = get_peft_model(
            st[0].auto_model,
            LoraConfig(
                r=lora["r"],
                lora_alpha=lora["alpha"],
                lora_dropout=lora.get("dropout", 0.0),
                target_modules=lora.get("target_modules", "all-linear"),
            ),
        )
    loss_fn = MultipleNegativesRankingLoss(st, scale=scale)
    params = [p for p in st.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, warmup_steps)))
    t0, c0 = time.perf_counter(), time.process_time()
    st.train()
    losses = []
    for _ in range(epochs):
        for batch in batches_one_per_question(train, batch_size, rng):
            feats = [_features(st, [t[i] for t in batch]) for i in range(3)]
            loss = loss_fn(feats, None)
            loss.backward()
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            losses.append(round(float(loss.detach()), 4))
    st.eval()
    report = {
        "train_triplets": len(train),
        "val_triplets": len(val),
        "questions": len({t[0] for t in train}),
        "epochs": epochs,
        "steps": len(losses),
        "batch_size": batch_size,
        "lr": lr,
        "warmup_steps": warmup_steps,
        "scale": scale,
        "lora": lora,
        "step_losses": losses,
        "val_pairwise_acc_before": acc_before,
        "val_pairwise_acc_after": pairwise_accuracy(st, val),
        "wall_s": round(time.perf_counter() - t0, 1),
        "cpu_s": round(time.process_time() - c0, 1),
    }
    return st, report


def train_reranker_from_config(cfg, train: Sequence[Triplet], val: Sequence[Triplet]) -> tuple[Any, dict[str, Any]]:
    """``train_reranker`` with a training config's ``reranker`` settings, ``seed`` and ``device``."""
    from omegaconf import OmegaConf

    rc = cfg.reranker
    return train_reranker(
        rc.base,
        train,
        val,
        lora=OmegaConf.to_container(rc.lora) if rc.lora else None,
        lr=float(rc.lr),
        epochs=int(rc.epochs),
        batch_size=int(rc.batch_size),
        warmup_steps=int(rc.warmup_steps),
        scale=float(rc.scale),
        seed=int(cfg.seed),
        max_seq_length=int(rc.max_seq_length),
        device=cfg.device,
    )


def save_reranker(st, out_dir: str | Path, base_ref: str, lora: bool) -> Path:
    """A LoRA adapter folder (fp16 weights) or, without LoRA, the whole sentence-transformers model."""
    import torch
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not lora:
        st.save(str(out))
        return out
    peft_model = st[0].auto_model
    cfg = peft_model.peft_config["default"]  # the injected encoder carries the config too
    cfg.base_model_name_or_path = base_ref
    cfg.save_pretrained(str(out))
    # sentence-transformers 6 hands back the LoRA-injected encoder, not its PeftModel wrapper: the keys then lack
    # the wrapper's prefix, which PeftModel.from_pretrained expects
    state = get_peft_model_state_dict(peft_model)
    prefix = "base_model.model."
    save_file(
        {
            (k if k.startswith(prefix) else prefix + k): v.detach().to(torch.float16).contiguous()
            for k, v in state.items()
        },
        str(out / "adapter_model.safetensors"),
    )
    return out
