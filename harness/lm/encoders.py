"""Encoders and classifiers: the model layer's loaders for the models that are not causal LMs.

Each shared loader keeps one instance per process and key (``harness.resources``), so two methods asking for the
same encoder get the same object; the ``load_*`` / ``sentence_model`` functions build a private copy for a caller
that trains it or merges an adapter into it. Every loader resolves its reference with ``harness.lm.models``.

- ``sentence_encoder``: a sentence-transformers model as saved (pooling and normalisation included);
- ``sentence_model`` / ``tuned_sentence_encoder``: a private sentence model (a plain encoder gets mean pooling),
  and one fine-tuned as a LoRA adapter or a whole folder;
- ``hf_encoder``: a plain ``AutoModel`` and its tokenizer (pooling is the caller's);
- ``cross_encoder``: a sentence-transformers ``CrossEncoder`` returning raw logits;
- ``sequence_classifier`` / ``load_sequence_classifier``: a one-logit sequence classifier, a LoRA merged;
- ``seq2seq_lm``: an encoder-decoder LM and its tokenizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import resources
from harness.lm.loading import is_adapter_dir, load_tokenizer
from harness.lm.meter import watch
from harness.lm.models import resolve


def watched(model: Any, ref: str, adapter: str | None = None) -> Any:
    """``model`` with its (first) transformers network's token embedding counted by the token meter
    (``harness.lm.meter.watch``): every forward pass embeds its ``(B, T)`` ids through it, however the network is
    called (sentence-transformers calls ``forward`` directly, past the network's own hooks)."""
    from transformers import PreTrainedModel

    inner = model if isinstance(model, PreTrainedModel) else None
    if inner is None and hasattr(model, "modules"):
        inner = next((m for m in model.modules() if isinstance(m, PreTrainedModel)), None)
    if inner is not None:
        watch(inner.get_input_embeddings(), ref, Path(adapter).name if adapter else None)
    return model


def sentence_encoder(ref: str, device: str = "cpu", trust_remote_code: bool = False) -> Any:
    """A sentence-transformers encoder, shared per (ref, device)."""

    def build():
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(resolve(ref).path, device=device, trust_remote_code=trust_remote_code)
        return watched(st, ref)

    return resources.shared(("sentence_encoder", ref, device), build)


def sentence_model(ref: str, device: str = "cpu", max_seq_length: int | None = None) -> Any:
    """A private (unshared) sentence-transformers model: the folder as is, or a plain encoder + mean pooling."""
    from sentence_transformers import SentenceTransformer, models

    path = resolve(ref).path
    if (Path(path) / "modules.json").is_file() or not Path(path).exists():
        st = SentenceTransformer(path, device=device)
    else:
        enc = models.Transformer(path)
        width = (
            enc.get_embedding_dimension()
            if hasattr(enc, "get_embedding_dimension")
            else enc.get_word_embedding_dimension()
        )
        st = SentenceTransformer(modules=[enc, models.Pooling(width, "mean")], device=device)
    if max_seq_length:
        st.max_seq_length = max_seq_length
    return st


def tuned_sentence_encoder(base: str, trained: str, device: str = "cpu", max_seq_length: int | None = None) -> Any:
    """A fine-tuned sentence encoder, shared per (base, trained, device, max_seq_length): ``trained`` is a LoRA
    adapter folder (merged into a private copy of ``base``) or a whole sentence-transformers folder."""

    def build():
        if not is_adapter_dir(trained):
            return watched(sentence_model(trained, device, max_seq_length), base, trained)
        from peft import PeftModel

        st = sentence_model(base, device, max_seq_length)  # a private copy: merged below
        st[0].auto_model = PeftModel.from_pretrained(st[0].auto_model, trained).merge_and_unload()
        return watched(st.eval(), base, trained)

    return resources.shared(("tuned_sentence_encoder", base, trained, device, max_seq_length), build)


def hf_encoder(ref: str, device: str = "cpu") -> tuple[Any, Any]:
    """(model, tokenizer) of a plain encoder (``AutoModel``) in eval mode, shared per (ref, device)."""

    def build():
        from transformers import AutoModel

        model = AutoModel.from_pretrained(resolve(ref).path).to(device).eval()
        return watched(model, ref), load_tokenizer(ref)

    return resources.shared(("hf_encoder", ref, device), build)


def cross_encoder(ref: str, device: str = "cpu", max_length: int = 512) -> Any:
    """A sentence-transformers ``CrossEncoder`` whose ``predict`` returns raw logits (no activation), shared per
    (ref, device, max_length)."""

    def build():
        import torch
        from sentence_transformers import CrossEncoder

        ce = CrossEncoder(resolve(ref).path, device=device, max_length=max_length, activation_fn=torch.nn.Identity())
        watched(ce.model, ref)
        return ce

    return resources.shared(("cross_encoder", ref, device, max_length), build)


def load_sequence_classifier(ref: str, adapter: str | None = None, device: str = "cpu") -> tuple[Any, Any]:
    """A private (model, tokenizer): ``ref`` as a one-logit sequence classifier (a new head where it has none),
    with the LoRA ``adapter`` (and its head) merged when given."""
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    path = resolve(ref).path
    tok = load_tokenizer(ref)
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the new head's "newly initialized" warning: expected here
    try:
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
    finally:
        hf_logging.set_verbosity(level)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    return model.to(device).eval(), tok


def sequence_classifier(ref: str, adapter: str | None = None, device: str = "cpu") -> tuple[Any, Any]:
    """``load_sequence_classifier``'s (model, tokenizer), shared per (ref, adapter, device)."""
    key = ("sequence_classifier", ref, adapter, device)

    def build() -> tuple[Any, Any]:
        model, tok = load_sequence_classifier(ref, adapter, device)
        return watched(model, ref, adapter), tok

    return resources.shared(key, build)


def seq2seq_lm(ref: str, dtype: str = "float32") -> tuple[Any, Any]:
    """(model, tokenizer) of an encoder-decoder LM in eval mode, on the GPU when there is one; shared per
    (ref, dtype)."""

    def build():
        import torch
        from transformers import AutoModelForSeq2SeqLM

        from harness.lm.hardware import has_cuda

        model = AutoModelForSeq2SeqLM.from_pretrained(resolve(ref).path, dtype=getattr(torch, dtype))
        model = model.to("cuda" if has_cuda() else "cpu").eval()
        watch(model.get_encoder(), ref, op="encode")  # the encoder pass; each decoder step is a forward below
        return watch(model, ref, op="decode"), load_tokenizer(ref)

    return resources.shared(("seq2seq_lm", ref, dtype), build)
