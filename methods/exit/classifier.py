"""EXIT's sentence classifier as a small cross-encoder (the embedded profile's stand-in for EXIT's Gemma-2B LoRA).

EXIT (arXiv 2412.12559) scores every sentence with its query and its whole passage. The embedded profile has no
EXIT checkpoint, and zero-shot SmolLM2-135M answers EXIT's Yes/No prompt near chance (a LoRA on it, trained by
``methods.exit.train`` with ``kind=lm``, stayed at chance validation loss). This classifier keeps EXIT's inputs
-- query, sentence, passage -- as a BERT sentence pair: ``[CLS] query [SEP] sentence [SEP] title + passage
[SEP]`` (the passage is cut at ``max_length``, the sentence never), one logit, P(useful) = sigmoid(logit). Its
weights are all-MiniLM-L6-v2 with a LoRA and a new classification head, trained by ``methods.exit.train``
(``train_classifier.py``) on sentence labels from the shipped train splits; the adapter (about 1 MB) is what the
training writes. This module is the runtime half: the model layer loads it (``harness.lm.encoders``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Triple = tuple[str, str, str]  # (query, sentence, passage with its title)

REMAKE = "python -m methods.exit.train"  # what re-makes the classifier (README)


def pair(query: str, sentence: str, context: str, sep: str) -> tuple[str, str]:
    """The (first, second) texts of the sentence pair: the query; the sentence, then its passage."""
    return query, f"{sentence} {sep} {context}"


def features(tok, triples: Sequence[Triple], max_length: int) -> dict[str, Any]:
    firsts, seconds = zip(*(pair(q, s, c, tok.sep_token) for q, s, c in triples), strict=True)
    return tok(
        list(firsts), list(seconds), truncation="only_second", max_length=max_length, padding=True, return_tensors="pt"
    )


class CrossEncoderClassifier:
    """P(useful) of (query, sentence, passage) triples; see the module docstring."""

    def __init__(
        self, base: str, adapter: str | None, max_length: int = 256, batch_size: int = 64, device: str = "cpu"
    ) -> None:
        self.base, self.adapter, self.max_length = base, adapter, max_length
        self.batch_size, self.device = batch_size, device
        self.model: Any = None
        self.tok: Any = None

    def load(self) -> None:
        if self.model is not None:
            return
        from harness.artifacts import ArtifactError, check_artifact
        from harness.lm.encoders import sequence_classifier
        from harness.lm.loading import is_adapter_dir

        if self.adapter:  # checked against its manifest before it loads (harness.artifacts)
            check_artifact(self.adapter, REMAKE)
        if self.adapter and not is_adapter_dir(self.adapter):
            raise ArtifactError(f"EXIT classifier not found at {self.adapter}: re-make it with `{REMAKE}`")
        self.model, self.tok = sequence_classifier(self.base, self.adapter, self.device)

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
        from harness.lm.models import file_sha256, resolve

        weights = Path(self.adapter) / "adapter_model.safetensors" if self.adapter else None
        return {
            "kind": "cross_encoder",
            "base": resolve(self.base).describe(),
            "adapter": self.adapter,
            "adapter_sha256": file_sha256(weights) if weights else None,
            "max_length": self.max_length,
        }
