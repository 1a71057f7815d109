"""CSM selection (paper 002, sections 4 and 5.3): the Contextual influence Surrogate Model predicts each
unit's CI value from (question, unit list); the units with positive prediction are kept in retrieval order.

Local layer: a frozen BERT-family pair encoder (``features.PairEncoder``; paper: bert-base-uncased; embedded
profile: all-MiniLM-L6-v2). Global and output layers: ``head.CSMHead`` (3 x 8-head self-attention, 2-layer
MLP, tanh), loaded from ``weights`` (``head.safetensors`` + ``config.json``, written by
``python -m methods.csm.train``). The same class serves CSM-st and CSM-e2e weights; only training
differs. Units are passages or sentences (``granularity``); duplicates are removed first with the oracle's
rule, so the model sees the lists it was trained on. Nothing positive -> closed book (released code).
A head learns one generator's influence, prompt included: the run record names the generator it was trained
through (``trained_through``, from its manifest), and binding it to another generator logs a warning.
Departure: the encoder is frozen (released ``csm.py``); the paper does not say whether BERT is fine-tuned.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.artifacts import trained_through, warn_if_trained_elsewhere
from harness.influence import GRANULARITIES, UnitList, documents, example_units, mark_duplicates_batch, positive
from harness.lm.models import file_sha256
from harness.protocols import Compressor, MethodEnv
from harness.types import Compressed, Example


def remake_command(weights: str | Path) -> str:
    """The command that trains the head in ``weights`` again (``csm_<mode>_<granularity>_<dataset>``; README)."""
    name = Path(weights).name
    dataset = {"tqa": "triviaqa"}.get(name.rsplit("_", 1)[-1], name.rsplit("_", 1)[-1])
    e2e = " --config-name train/csm_e2e" if name.startswith("csm_e2e") else ""
    return f"python -m methods.csm.train{e2e} dataset={dataset}"


class CSMSelect(Compressor):
    name = "csm"

    def __init__(
        self,
        weights: str,
        encoder: str | None = None,
        granularity: str = "passage",
        threshold: float = 0.0,
        dedup_encoder: str | None = None,
        dedup_threshold: float = 0.95,
        min_words: int = 5,
        with_titles: bool = False,
        max_length: int = 512,
    ) -> None:
        super().__init__()
        if granularity not in GRANULARITIES:
            raise ValueError(f"granularity={granularity!r}; valid: {', '.join(GRANULARITIES)}")
        self.weights, self.encoder_ref, self.granularity = weights, encoder, granularity
        self.threshold, self.dedup_encoder, self.dedup_threshold = threshold, dedup_encoder, dedup_threshold
        self.min_words, self.with_titles, self.max_length = min_words, with_titles, max_length
        self.head = None
        self.head_config: dict[str, Any] = {}
        self._pairs = None
        self._dedup = None

    def bind(self, env: MethodEnv) -> None:
        super().bind(env)
        from harness.artifacts import check_artifact
        from harness.lm.encoders import sentence_encoder
        from methods.csm.features import PairEncoder
        from methods.csm.head import load_head

        check_artifact(self.weights, remake_command(self.weights))  # before it loads (harness.artifacts)
        self.head, self.head_config = load_head(self.weights)
        trained_on = self.head_config.get("encoder")
        if self.encoder_ref is not None and trained_on is not None and self.encoder_ref != trained_on:
            raise ValueError(
                f"CSM weights {self.weights} were trained on encoder {trained_on!r}, not {self.encoder_ref!r}"
            )
        warn_if_trained_elsewhere(self.name, self.weights, env.generator, remake_command(self.weights))
        self._pairs = PairEncoder(self.encoder_ref or trained_on, self.max_length)
        if self._pairs.dim != self.head_config["dim"]:
            raise ValueError(f"encoder width {self._pairs.dim} != CSM width {self.head_config['dim']}")
        if self.dedup_encoder:
            self._dedup = sentence_encoder(self.dedup_encoder)

    def units(self, examples: Sequence[Example]) -> list[UnitList]:
        lists = [example_units(ex, self.granularity, self.min_words) for ex in examples]
        return mark_duplicates_batch(lists, self._dedup, self.dedup_threshold)

    def predict(self, examples: Sequence[Example], lists: Sequence[UnitList]) -> list[list[float]]:
        """Predicted CI (tanh scale) of every unit; dropped units get 0."""
        import torch

        from methods.csm.head import pad_lists

        if self.head is None or self._pairs is None:
            raise RuntimeError("CSMSelect was not bound to a run (call bind(MethodEnv(...)))")
        qs, ts, spans = [], [], []
        for ex, ul in zip(examples, lists, strict=True):
            act = ul.active()
            spans.append(act)
            qs += [ex.question] * len(act)
            ts += [ul.texts[i] for i in act]
        feats = self._pairs.encode(qs, ts)
        per, start = [], 0
        for act in spans:
            per.append(feats[start : start + len(act)])
            start += len(act)
        out = [[0.0] * len(ul.units) for ul in lists]
        nonempty = [i for i, f in enumerate(per) if len(f)]
        if nonempty:
            x, pad = pad_lists([per[i] for i in nonempty])
            with torch.inference_mode():
                scores, _ = self.head(x, pad)
            for row, i in enumerate(nonempty):
                for j, unit_i in enumerate(spans[i]):
                    out[i][unit_i] = float(scores[row, j])
        return out

    def compress(self, example: Example) -> Compressed:
        return self.compress_batch([example])[0]

    def compress_batch(self, examples: Sequence[Example]) -> list[Compressed]:
        lists = self.units(examples)
        preds = self.predict(examples, lists)
        out = []
        for ex, ul, scores in zip(examples, lists, preds, strict=True):
            kept = [i for i in positive(scores, self.threshold) if i not in ul.dropped]
            out.append(
                Compressed(
                    documents=documents(ex, ul, kept, self.with_titles),
                    units=[ul.units[i] for i in kept],
                    meta={
                        "scores": [round(s, 5) for s in scores],
                        "dropped": {str(i): why for i, why in ul.dropped.items()},
                    },
                )
            )
        return out

    def describe(self) -> dict[str, Any]:
        cfg = {k: v for k, v in self.head_config.items() if k not in ("figures",)}
        return {
            "name": self.name,
            "granularity": self.granularity,
            "threshold": self.threshold,
            "weights": {"path": self.weights, "sha256": file_sha256(Path(self.weights) / "head.safetensors")},
            "trained_through": trained_through(self.weights),
            "head": cfg,
            "dedup": {"encoder": self.dedup_encoder, "threshold": self.dedup_threshold},
        }
