"""CompSelect's clue reranker (000 section 4.2; 003 section 3.3): a Sentence-BERT bi-encoder, cosine(q, clue).

A scorer in the sense of ``methods.scorers`` (``load`` / ``score`` / ``describe``), built from config.
``base`` is the encoder it starts from (a sentence-transformers folder, or a plain encoder such as
distilbert-base-uncased, which gets mean pooling as in the authors' code); ``trained`` is what ``python -m
methods.compselect.train`` wrote: a LoRA adapter folder (embedded profile, a few MB) or a full
sentence-transformers folder (paper profile, full fine-tuning as in the paper). Without ``trained`` the shared
base encoder scores (untrained SBERT).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.lm.loading import adapter_digest, is_adapter_dir
from harness.lm.models import resolve


class ClueReranker:
    """Scores clues by cosine similarity to the question under a (fine-tuned) bi-encoder."""

    def __init__(
        self,
        base: str,
        trained: str | None = None,
        device: str = "cpu",
        batch_size: int = 64,
        max_seq_length: int | None = 256,
    ) -> None:
        self.base, self.trained, self.device = base, trained, device
        self.batch_size, self.max_seq_length = batch_size, max_seq_length
        self.model = None

    def load(self, check: bool = True) -> None:
        """The shared base encoder (``trained`` None) or the trained one, from the model layer; ``check``: against
        its manifest's SHA-256 first (off for the reranker a training run has just written, whose manifest comes
        at the end of that run)."""
        if self.model is not None:
            return
        from harness.artifacts import check_artifact
        from harness.lm.encoders import sentence_encoder, tuned_sentence_encoder

        if self.trained is None:
            self.model = sentence_encoder(self.base, self.device)
            return
        if check:
            check_artifact(self.trained, "python -m methods.compselect.train")  # missing or changed: one line
        self.model = tuned_sentence_encoder(self.base, self.trained, self.device, self.max_seq_length)

    def score(self, question: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        self.load()
        emb = self.model.encode(
            [question, *texts],
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return [float(x) for x in emb[1:] @ emb[0]]

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"scorer": "sbert_cosine", "base": resolve(self.base).describe()}
        if self.trained:
            info["trained"] = {
                "path": self.trained,
                "lora": is_adapter_dir(self.trained),
                "sha256": adapter_digest(self.trained),
            }
        return info
