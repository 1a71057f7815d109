"""CSM-st losses (paper 002, Eq. 6-8): re-weighted regression plus a contrastive term on hard samples.

``L_st = L_mse + beta * L_cts`` (beta = 0.1). ``L_mse = E[w_i (S - y)^2]`` with ``w_i = 1 / p(r_i)`` per
sample. ``L_cts`` is InfoNCE over the global embeddings g at temperature tau (1): for each unit c with a
non-zero label, every other unit of the same sign is a positive c+, every unit of the opposite sign a negative
(the released code's sign rule for the unspecified epsilon_1, epsilon_2), averaged over (c, c+) pairs of the
hard samples. Departure: g is L2-normalised before the dot product (the code normalises its projection); raw
post-LayerNorm vectors have norms near sqrt(dim) and would saturate the softmax at tau = 1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def weighted_mse(scores: torch.Tensor, targets: torch.Tensor, pad: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Mean over real units of ``w (S - y)^2``; ``weights`` is per list (B,)."""
    live = (~pad).float()
    err = (scores - targets) ** 2 * weights[:, None] * live
    return err.sum() / live.sum().clamp(min=1.0)


def contrastive(
    g: torch.Tensor, targets: torch.Tensor, pad: torch.Tensor, hard: torch.Tensor, tau: float = 1.0, eps: float = 1e-4
) -> torch.Tensor:
    """InfoNCE by label sign over the hard lists of a batch (0 when no list has both signs)."""
    z = F.normalize(g, dim=-1)
    losses = []
    for b in torch.nonzero(hard).flatten().tolist():
        live = ~pad[b]
        sign = torch.sign(targets[b]) * (targets[b].abs() > eps) * live
        if not ((sign > 0).any() and (sign < 0).any()):
            continue
        sims = z[b] @ z[b].T / tau
        for a in torch.nonzero(sign != 0).flatten().tolist():
            same = (sign == sign[a]).clone()
            same[a] = False
            neg = sign == -sign[a]
            if not same.any():
                continue
            neg_lse = torch.logsumexp(sims[a][neg], dim=0)
            pos = sims[a][same]
            # -log(exp(s+) / (exp(s+) + sum exp(s-))) for each positive
            losses.append((torch.logaddexp(pos, neg_lse) - pos).mean())
    if not losses:
        return g.sum() * 0.0
    return torch.stack(losses).mean()


def st_loss(scores, g, targets, pad, weights, hard, beta: float = 0.1, tau: float = 1.0):
    mse = weighted_mse(scores, targets, pad, weights)
    cts = contrastive(g, targets, pad, hard, tau)
    return mse + beta * cts, {"mse": float(mse.detach()), "cts": float(cts.detach())}
