"""Training loops of CSM-st and CSM-e2e over cached pair features, and the Spearman check of section 6.3."""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from .e2e import SoftMaskLM, binary_concrete
from .losses import st_loss
from .model import CSMHead, pad_lists
from .rebalance import Sample

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
        opt, lambda s: (s + 1) / w if s < w else 0.5 * (1 + math.cos(math.pi * (s - w) / max(1, total - w))))


def batches(samples: Sequence[Sample], feats: FeatureFn):
    x, pad = pad_lists([feats(s) for s in samples])
    y, _ = pad_lists([torch.tensor(s.targets, dtype=torch.float32)[:, None] for s in samples])
    w = torch.tensor([s.weight for s in samples])
    return x, pad, y[..., 0], w, torch.tensor([s.hard for s in samples])


def train_st(head: CSMHead, samples: list[Sample], feats: FeatureFn, epochs: int = 10, batch_size: int = 16,
             lr: float = 1e-4, weight_decay: float = 0.005, warmup: float = 0.01, beta: float = 0.1,
             tau: float = 1.0, seed: int = 2024,
             validate: Callable[[CSMHead], float | None] | None = None) -> list[dict]:
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
def predict(head: CSMHead, samples: Sequence[Sample], feats: FeatureFn,
            batch_size: int = 64) -> list[list[float]]:
    head.eval()
    out = []
    for s in range(0, len(samples), batch_size):
        part = samples[s : s + batch_size]
        x, pad = pad_lists([feats(o) for o in part])
        scores, _ = head(x, pad)
        out += [scores[i, : len(o.texts)].tolist() for i, o in enumerate(part)]
    return out


def train_e2e(head: CSMHead, samples: list[Sample], feats: FeatureFn, lm: SoftMaskLM, epochs: int = 10,
              batch_size: int = 4, lr: float = 1e-4, weight_decay: float = 0.005, warmup: float = 0.01,
              lambda_nec: float = 1.0, temperature: float = 1.0, max_steps: int | None = None,
              seed: int = 2024) -> list[dict]:
    """L_suf + lambda L_nec through the frozen LM; returns per-step losses and seconds."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    noise = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=weight_decay)
    steps = epochs * math.ceil(len(samples) / batch_size)
    if max_steps is not None:
        steps = min(steps, max_steps)
    sched = schedule(opt, steps, warmup)
    encoded = {}
    history: list[dict] = []
    step = 0
    for _ in range(epochs):
        order = list(range(len(samples)))
        rng.shuffle(order)
        for s in range(0, len(order), batch_size):
            if step >= steps:
                return history
            t0 = time.perf_counter()
            part = [samples[i] for i in order[s : s + batch_size]]
            head.train()
            x, pad = pad_lists([feats(o) for o in part])
            scores, _ = head(x, pad)
            opt.zero_grad()
            suf_t = nec_t = 0.0
            for b, o in enumerate(part):
                key = id(o)
                if key not in encoded:
                    encoded[key] = lm.encode(o.question, o.texts, o.answers[0])
                e = encoded[key]
                m = binary_concrete(scores[b, : len(o.texts)], temperature, generator=noise)
                suf = lm.sufficiency(e, m)
                nec = lm.necessity(e, 1 - m)
                ((suf + lambda_nec * nec) / len(part)).backward(retain_graph=b < len(part) - 1)
                suf_t += float(suf) / len(part)
                nec_t += float(nec) / len(part)
            torch.nn.utils.clip_grad_norm_(head.parameters(), 1.5)
            opt.step()
            sched.step()
            step += 1
            history.append({"step": step, "suf": suf_t, "nec": nec_t, "loss": suf_t + lambda_nec * nec_t,
                            "seconds": time.perf_counter() - t0})
            log.info("e2e step %d/%d: %s", step, steps, history[-1])
    head.eval()
    return history
