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
from pathlib import Path
from typing import Any

from harness import resources
from harness.models import resolve


def load_sentence_model(ref: str, device: str = "cpu", max_seq_length: int | None = None):
    """A private (unshared) sentence-transformers model: the folder as is, or a plain encoder + mean
    pooling."""
    from sentence_transformers import SentenceTransformer, models

    path = resolve(ref).path
    if (Path(path) / "modules.json").is_file() or not Path(path).exists():
        st = SentenceTransformer(path, device=device)
    else:
        enc = models.Transformer(path)
        st = SentenceTransformer(
            modules=[
                enc,
                models.Pooling(
                    (
                        enc.get_embedding_dimension()
                        if hasattr(enc, "get_embedding_dimension")
                        else enc.get_word_embedding_dimension()
                    ),
                    "mean",
                ),
            ],
            device=device,
        )
    if max_seq_length:
        st.max_seq_length = max_seq_length
    return st


def is_lora_dir(path: str | Path) -> bool:
    return (Path(path) / "adapter_config.json").is_file()


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

    def load(self) -> None:
        if self.model is not None:
            return
        key = ("compselect_reranker", self.base, self.trained, self.device, self.max_seq_length)
        self.model = resources.shared(key, self._build)

    def _build(self):
        if self.trained is None:
            return resources.sentence_encoder(self.base, self.device)
        if not Path(self.trained).exists():
            raise FileNotFoundError(
                f"trained reranker not found at {self.trained}: run `python -m methods.compselect.train`"
            )
        if not is_lora_dir(self.trained):
            return load_sentence_model(self.trained, self.device, self.max_seq_length)
        from peft import PeftModel

        st = load_sentence_model(self.base, self.device, self.max_seq_length)  # a private copy: merged below
        st[0].auto_model = PeftModel.from_pretrained(st[0].auto_model, self.trained).merge_and_unload()
        return st.eval()

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
        from methods.compselect.lora_lm import adapter_digest

        info: dict[str, Any] = {"scorer": "sbert_cosine", "base": resolve(self.base).describe()}
        if self.trained:
            info["trained"] = {
                "path": self.trained,
                "lora": is_lora_dir(self.trained),
                "sha256": adapter_digest(self.trained),
            }
        return info
