"""The CSM network above the local layer (paper 002, section 4.1 and App. C.3): a global layer of 3 stacked
8-head self-attention blocks across the unit list, then a 2-layer MLP to one score per unit.

Each block is ``LayerNorm(x + MHA(x))`` (post-norm, as ``nn.TransformerEncoderLayer`` with the released code's
defaults), with an optional position-wise feed-forward (``ffn_dim > 0``; 0 by default: the paper names only
self-attention). Scores pass through ``tanh`` (the released code's head; labels are scaled to [-1, 1] by
``tanh`` as well). There are no position embeddings: the list is treated as a set, as in the paper. Padding
is masked out of attention.
"""

from __future__ import annotations

import torch
from torch import nn


class SelfAttentionBlock(nn.Module):
    def __init__(self, dim: int, heads: int, ffn_dim: int = 0, dropout: float = 0.1) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.norm1 = nn.LayerNorm(dim)
        self.drop = nn.Dropout(dropout)
        self.ffn = None
        if ffn_dim > 0:
            self.ffn = nn.Sequential(nn.Linear(dim, ffn_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(ffn_dim, dim))
        self.norm2 = nn.LayerNorm(dim) if ffn_dim > 0 else None

    def forward(self, x: torch.Tensor, pad: torch.Tensor | None) -> torch.Tensor:
        a, _ = self.attn(x, x, x, key_padding_mask=pad, need_weights=False)
        x = self.norm1(x + self.drop(a))
        if self.ffn is not None:
            x = self.norm2(x + self.drop(self.ffn(x)))
        return x


class CSMHead(nn.Module):
    """Global + output layers: (B, N, D) pair features -> (B, N) scores and (B, N, D) global embeddings."""

    def __init__(
        self, dim: int, layers: int = 3, heads: int = 8, ffn_dim: int = 0, dropout: float = 0.1, tanh: bool = True
    ) -> None:
        super().__init__()
        self.config = {
            "dim": dim,
            "layers": layers,
            "heads": heads,
            "ffn_dim": ffn_dim,
            "dropout": dropout,
            "tanh": tanh,
        }
        self.blocks = nn.ModuleList(SelfAttentionBlock(dim, heads, ffn_dim, dropout) for _ in range(layers))
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Dropout(dropout), nn.Linear(dim, 1))
        self.tanh = tanh

    def forward(self, feats: torch.Tensor, pad: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        g = feats
        for block in self.blocks:
            g = block(g, pad)
        s = self.mlp(g).squeeze(-1)
        return (torch.tanh(s) if self.tanh else s), g


def pad_lists(feats: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack variable-length (n_i, D) lists into (B, N, D) and a (B, N) mask that is True on padding."""
    n = max((f.shape[0] for f in feats), default=0)
    dim = feats[0].shape[1] if feats else 0
    x = torch.zeros(len(feats), n, dim)
    pad = torch.ones(len(feats), n, dtype=torch.bool)
    for i, f in enumerate(feats):
        x[i, : f.shape[0]] = f
        pad[i, : f.shape[0]] = False
    return x, pad


def save_head(head: CSMHead, folder, extra: dict) -> None:
    """``head.safetensors`` (fp16, a few MB) and ``config.json`` (architecture, encoder, training info)."""
    import json
    from pathlib import Path

    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.detach().half().contiguous() for k, v in head.state_dict().items()}, str(folder / "head.safetensors")
    )
    (folder / "config.json").write_text(json.dumps({**head.config, **extra}, indent=1) + "\n")


def load_head(folder) -> tuple[CSMHead, dict]:
    import json
    from pathlib import Path

    from safetensors.torch import load_file

    folder = Path(folder)
    if not (folder / "head.safetensors").is_file():
        raise FileNotFoundError(
            f"no trained CSM under {folder}: train one with `python -m methods.csm.train` (see methods/csm/README.md)"
        )
    cfg = json.loads((folder / "config.json").read_text())
    head = CSMHead(cfg["dim"], cfg["layers"], cfg["heads"], cfg["ffn_dim"], cfg["dropout"], cfg["tanh"])
    head.load_state_dict({k: v.float() for k, v in load_file(str(folder / "head.safetensors")).items()})
    return head.eval(), cfg
