"""Relevance scorers that selection methods compose with (``scorer:`` in a method config).

Every scorer maps (question, unit texts) to one score per unit, higher is more relevant.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from harness.text import bm25_scores


class Scorer(Protocol):
    def score(self, question: str, texts: Sequence[str]) -> list[float]: ...

    def describe(self) -> dict[str, Any]: ...


class BM25Scorer:
    """Okapi BM25 (bm25s, Lucene variant) with IDF over the example's own units."""

    def __init__(self, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b

    def load(self) -> None:
        """Nothing to load (scorers with models load here, before timing starts)."""

    def score(self, question: str, texts: Sequence[str]) -> list[float]:
        return [float(s) for s in bm25_scores(question, texts, self.k1, self.b)]

    def describe(self) -> dict[str, Any]:
        return {"scorer": "bm25", "library": "bm25s", "k1": self.k1, "b": self.b}


def _device(device: str | None) -> str:
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _model_info(ref: str) -> dict[str, Any]:
    from harness.lm.models import resolve

    return resolve(ref).describe()


class BiEncoderScorer:
    """Similarity of independently encoded question and unit embeddings (a dual encoder).

    ``pooling="model"`` encodes with the sentence-transformers pipeline saved with the model
    (all-MiniLM-L6-v2: mean pooling, then L2 normalisation), shared through the model layer (``harness.lm.encoders``).
    ``pooling="mean"`` is RECOMP's extractive scorer (``run_extractive_compressor.py``): the transformer's
    last hidden states averaged over the attention mask (question and units tokenised in padded batches,
    truncated at the tokenizer's maximum length), with no normalisation. ``similarity`` is ``cosine`` or
    ``dot`` (RECOMP: dot product).
    """

    POOLINGS = ("model", "mean")
    SIMILARITIES = ("cosine", "dot")

    def __init__(
        self,
        model: str,
        pooling: str = "model",
        similarity: str = "cosine",
        batch_size: int = 64,
        device: str | None = None,
    ) -> None:
        if pooling not in self.POOLINGS:
            raise ValueError(f"pooling={pooling!r}; valid: {', '.join(self.POOLINGS)}")
        if similarity not in self.SIMILARITIES:
            raise ValueError(f"similarity={similarity!r}; valid: {', '.join(self.SIMILARITIES)}")
        self.model, self.pooling, self.similarity = model, pooling, similarity
        self.batch_size, self.device = batch_size, device
        self._encoder: Any = None

    def load(self) -> None:
        from harness.lm.encoders import hf_encoder, sentence_encoder

        device = _device(self.device)
        if self.pooling == "model":
            self._encoder = sentence_encoder(self.model, device)
            return
        self._encoder = hf_encoder(self.model, device)

    def _mean_pooled(self, texts: list[str]):
        import torch

        model, tok = self._encoder
        chunks = []
        for i in range(0, len(texts), self.batch_size):
            enc = tok(texts[i : i + self.batch_size], padding=True, truncation=True, return_tensors="pt")
            enc = enc.to(model.device)
            with torch.inference_mode():
                hidden = model(**enc)[0]
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            chunks.append(((hidden * mask).sum(1) / mask.sum(1)).float().cpu())
        return torch.cat(chunks)

    def score(self, question: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        if self._encoder is None:
            self.load()
        import torch

        if self.pooling == "model":
            emb = (
                self._encoder.encode(
                    [question, *texts], batch_size=self.batch_size, convert_to_tensor=True, show_progress_bar=False
                )
                .float()
                .cpu()
            )
        else:
            emb = self._mean_pooled([question, *texts])
        if self.similarity == "cosine":
            emb = torch.nn.functional.normalize(emb, dim=-1)
        return (emb[1:] @ emb[0]).tolist()

    def describe(self) -> dict[str, Any]:
        return {
            "scorer": "bi-encoder",
            "model": _model_info(self.model),
            "pooling": self.pooling,
            "similarity": self.similarity,
        }


class CrossEncoderScorer:
    """A point-wise cross-encoder reranker (sentence-transformers ``CrossEncoder``): one logit per
    (question, unit) pair, read raw (no sigmoid), as FlagEmbedding's ``FlagReranker.compute_score`` does for
    ``BAAI/bge-reranker-*``; pairs are truncated at ``max_length`` tokens (512, FlagReranker's default)."""

    def __init__(self, model: str, max_length: int = 512, batch_size: int = 32, device: str | None = None) -> None:
        self.model, self.max_length, self.batch_size, self.device = model, max_length, batch_size, device
        self._ce: Any = None

    def load(self) -> None:
        from harness.lm.encoders import cross_encoder

        self._ce = cross_encoder(self.model, _device(self.device), self.max_length)

    def score(self, question: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        if self._ce is None:
            self.load()
        scores = self._ce.predict(
            [(question, t) for t in texts], batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True
        )
        return [float(s) for s in scores]

    def describe(self) -> dict[str, Any]:
        return {"scorer": "cross-encoder", "model": _model_info(self.model), "max_length": self.max_length}


SCORER_KINDS = {"bm25": BM25Scorer, "bi-encoder": BiEncoderScorer, "cross-encoder": CrossEncoderScorer}


def relevance_scorer(kind: str, **kwargs: Any) -> Scorer:
    """The scorer of ``kind`` (a profile's ``models.reranker.kind``), built with ``kwargs``."""
    if kind not in SCORER_KINDS:
        raise ValueError(f"scorer kind={kind!r}; valid: {', '.join(SCORER_KINDS)}")
    return SCORER_KINDS[kind](**kwargs)
