"""Training loops of CSM-st and CSM-e2e over cached pair features, and the Spearman check of section 6.3."""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from methods.csm.head import CSMHead, pad_lists
from methods.csm.train_e2e import Encoded, SoftMaskLM, binary_concrete
from methods.csm.train_losses import st_loss
from methods.csm.train_rebalance import Sample

log = logging.getLogger(__name__)
FeatureFn = Callable[[Sample], torch.Tensor]


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rho with average ranks for ties (None when either side is constant)."""

    def ranks(x):
        x = np.asarray(x, dtype=np.float64)
        order = np.argsort(x, kind="mergesort")
        r = np.empty(len(x))
        i = 0
        while i < len(x):
            j = i
            while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
                j += 1
            r[order[i : j + 1]] = (i + j) / 2
            i = j + 1
        return r

    if len(a) < 2:
        return None
    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])


def schedule(opt: torch.optim.Optimizer, total: int, warmup: float) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up then cosine decay (the released code's HF Trainer settings)."""
    w = max(1, round(warmup * total))
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / w if s < w else 0.5 * (1 + math.cos(math.pi * (s - w) / max(1, total - w)))
    )


def batches(samples: Sequence[Sample], feats: FeatureFn):
    x, pad = pad_lists([feats(s) for s in samples])
    y, _ = pad_lists([torch.tensor(s.targets, dtype=torch.float32)[:, None] for s in samples])
    w = torch.tensor([s.weight for s in samples])
    return x, pad, y[..., 0], w, torch.tensor([s.hard for s in samples])


def train_st(
    head: CSMHead,
    samples: list[Sample],
    feats: FeatureFn,
    epochs: int = 10,
    batch_size: int = 16,
    lr: float = 1e-4,
    weight_decay: float = 0.005,
    warmup: float = 0.01,
    beta: float = 0.1,
    tau: float = 1.0,
    seed: int = 2024,
    validate: Callable[[CSMHead], float | None] | None = None,
) -> list[dict]:
    """Re-weighted regression + contrastive loss; returns per-epoch mean losses.

    ``validate`` (higher is better, e.g. held-back Spearman) is called after every epoch; the head ends with the
    weights of the best epoch (the earliest on ties; the last when it always returns None), marked ``selected``
    in the history."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=weight_decay)
    steps = epochs * math.ceil(len(samples) / batch_size)
    sched = schedule(opt, steps, warmup)
    history = []
    best: tuple[float, int, dict] | None = None
    for ep in range(epochs):
        head.train()
        order = list(range(len(samples)))
        rng.shuffle(order)
        tot = {"loss": 0.0, "mse": 0.0, "cts": 0.0}
        nb = 0
        for s in range(0, len(order), batch_size):
            x, pad, y, w, hard = batches([samples[i] for i in order[s : s + batch_size]], feats)
            scores, g = head(x, pad)
            loss, parts = st_loss(scores, g, y, pad, w, hard, beta, tau)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 1.5)
            opt.step()
            sched.step()
            tot["loss"] += float(loss)
            tot["mse"] += parts["mse"]
            tot["cts"] += parts["cts"]
            nb += 1
        history.append({"epoch": ep + 1, **{k: v / max(nb, 1) for k, v in tot.items()}})
        if validate is not None:
            history[-1]["validation"] = score = validate(head)
            if score is not None and (best is None or score > best[0]):
                best = (score, ep, {k: v.detach().clone() for k, v in head.state_dict().items()})
        log.info("epoch %d: %s", ep + 1, history[-1])
    if best is not None:
        head.load_state_dict(best[2])
        history[best[1]]["selected"] = True
    head.eval()
    return history


@torch.no_grad()
def predict(head: CSMHead, samples: Sequence[Sample], feats: FeatureFn, batch_size: int = 64) -> list[list[float]]:
    head.eval()
    dev = next(head.parameters()).device
    out = []
    for s in range(0, len(samples), batch_size):
        part = samples[s : s + batch_size]
        x, pad = pad_lists([feats(o) for o in part])
        scores, _ = head(x.to(dev), pad.to(dev))
        out += [scores[i, : len(o.texts)].tolist() for i, o in enumerate(part)]
    return out


def train_e2e(
    head: CSMHead,
    samples: list[Sample],
    feats: FeatureFn,
    lm: SoftMaskLM,
    epochs: int = 10,
    batch_size: int = 4,
    lr: float = 1e-4,
    weight_decay: float = 0.005,
    warmup: float = 0.01,
    lambda_nec: float = 1.0,
    temperature: float = 1.0,
    max_steps: int | None = None,
    seed: int = 2024,
    encoded: Sequence[Encoded] | None = None,
    validate: Callable[[CSMHead], float | None] | None = None,
    deadline: float | None = None,
) -> list[dict]:
    """L_suf + lambda L_nec through the frozen LM; returns per-step losses and seconds.

    The head runs on the LM's device. ``encoded``: the samples' token ids (``lm.encode``, e.g. from an export
    made on another machine); else they are encoded here. ``validate`` (higher is better) is called after every
    epoch (and after the last step when ``max_steps`` cuts an epoch short); the head ends with the best epoch's
    weights, marked ``selected`` in that epoch's last step record, as ``train_st`` does. ``deadline`` (a
    ``time.perf_counter()`` value): training stops after the step that passes it (validated there, marked
    ``deadline``)."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    noise = torch.Generator().manual_seed(seed)
    dev = lm.device
    head.to(dev)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=weight_decay)
    steps = epochs * math.ceil(len(samples) / batch_size)
    if max_steps is not None:
        steps = min(steps, max_steps)
    sched = schedule(opt, steps, warmup)
    enc = list(encoded) if encoded is not None else [None] * len(samples)
    history: list[dict] = []
    best: tuple[float, int, dict] | None = None
    step = 0

    def check(epoch: int) -> None:
        nonlocal best
        if validate is None or not history:
            return
        score = validate(head)
        history[-1].update(epoch=epoch, validation=score)
        if score is not None and (best is None or score > best[0]):
            best = (score, len(history) - 1, {k: v.detach().clone() for k, v in head.state_dict().items()})

    for ep in range(epochs):
        order = list(range(len(samples)))
        rng.shuffle(order)
        for s in range(0, len(order), batch_size):
            if step >= steps:
                break
            t0 = time.perf_counter()
            idx = order[s : s + batch_size]
            part = [samples[i] for i in idx]
            head.train()
            x, pad = pad_lists([feats(o) for o in part])
            scores, _ = head(x.to(dev), pad.to(dev))
            opt.zero_grad()
            suf_t = nec_t = 0.0
            for b, (i, o) in enumerate(zip(idx, part, strict=True)):
                if enc[i] is None:
                    enc[i] = lm.encode(o.question, o.texts, o.answers[0])
                m = binary_concrete(scores[b, : len(o.texts)], temperature, generator=noise)
                suf = lm.sufficiency(enc[i], m)
                nec = lm.necessity(enc[i], 1 - m)
                ((suf + lambda_nec * nec) / len(part)).backward(retain_graph=b < len(part) - 1)
                suf_t += float(suf.detach()) / len(part)
                nec_t += float(nec.detach()) / len(part)
            torch.nn.utils.clip_grad_norm_(head.parameters(), 1.5)
            opt.step()
            sched.step()
            step += 1
            history.append(
                {
                    "step": step,
                    "suf": suf_t,
                    "nec": nec_t,
                    "loss": suf_t + lambda_nec * nec_t,
                    "seconds": time.perf_counter() - t0,
                }
            )
            log.info("e2e step %d/%d: %s", step, steps, history[-1])
            if deadline is not None and time.perf_counter() >= deadline:
                history[-1]["deadline"] = True
                break
        check(ep + 1)
        if step >= steps or (history and history[-1].get("deadline")):
            break
    if best is not None:
        head.load_state_dict(best[2])
        history[best[1]]["selected"] = True
    head.eval()
    return history


def heldout_figures(head: CSMHead, held: Sequence[Sample], feats: FeatureFn) -> dict[str, Any]:
    """Spearman of predictions vs oracle CI on held-back questions (pooled over units, and the mean per
    question), with retrieval order as a label-free reference, and the sign agreement behind selection."""
    preds = predict(head, held, feats)
    flat_p = [v for p in preds for v in p]
    flat_y = [v for s in held for v in s.values]
    per_q = [spearman(p, s.values) for p, s in zip(preds, held, strict=True)]
    per_q = [r for r in per_q if r is not None]
    rank = [-i for s in held for i in range(len(s.texts))]  # earlier retrieved = higher
    kept = sum(v > 0 for v in flat_p)
    hits = sum((p > 0) == (y > 0) for p, y in zip(flat_p, flat_y, strict=True))
    return {
        "questions": len(held),
        "units": len(flat_y),
        "spearman_pooled": spearman(flat_p, flat_y),
        "spearman_per_question_mean": sum(per_q) / len(per_q) if per_q else None,
        "spearman_retrieval_rank_pooled": spearman(rank, flat_y),
        "positive_share_oracle": sum(y > 0 for y in flat_y) / max(len(flat_y), 1),
        "positive_share_predicted": kept / max(len(flat_p), 1),
        "sign_accuracy": hits / max(len(flat_y), 1),
    }
