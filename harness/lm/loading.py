"""Loading causal LMs: one function, one process-wide instance per (weights, dtype, device, merged adapter);
their tokenizers and configs read the same way (``load_tokenizer``, ``model_config``).

A LoRA adapter is merged into a copy of the base weights saved once as a derived folder under the user cache,
keyed by the base weights' and the adapter's SHA-256 (``merged_folder``): every engine (vLLM included, which
serves merged weights at full speed) then loads it as a plain model, and no shared instance is ever wrapped
in place. Its ``merged.json`` lists every file's SHA-256; a damaged folder is built again, with one warning.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness import resources
from harness.lm.models import cache_dir, file_sha256, intact, resolve, seal_folder


def is_adapter_dir(path: str | Path) -> bool:
    """Whether ``path`` is a PEFT adapter folder (it holds ``adapter_config.json``)."""
    return (Path(path) / "adapter_config.json").is_file()


def adapter_digest(path: str | Path) -> str | None:
    """SHA-256 of a PEFT adapter's weights file, or None when it has none."""
    f = Path(path) / "adapter_model.safetensors"
    return file_sha256(f) if f.is_file() else None


def weights_digest(ref: str) -> str | None:
    """SHA-256 of a model's weights: the embedded file's, or of a local folder's safetensors (hub ids: None)."""
    r = resolve(ref)
    if r.sha256:
        return r.sha256
    files = sorted(Path(r.path).glob("*.safetensors")) if Path(r.path).is_dir() else []
    if not files:
        return None
    import hashlib

    return hashlib.sha256("".join(file_sha256(f) for f in files).encode()).hexdigest()


def load_tokenizer(ref: str, trust_remote_code: bool = False) -> Any:
    """The tokenizer of a model reference (tokenizer files only; no weights load)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve(ref).path, trust_remote_code=trust_remote_code)


def model_config(ref: str, trust_remote_code: bool = False) -> Any:
    """The ``transformers`` config of a model reference (its context length, say); no weights load."""
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(resolve(ref).path, trust_remote_code=trust_remote_code)


def load_causal_lm(ref: str, dtype: str = "float32", device: str = "cpu", trust_remote_code: bool = False):
    """A private (unshared) causal LM in eval mode, for a caller that changes its module tree (training on a GPU)."""
    import torch
    from transformers import AutoModelForCausalLM

    path = resolve(ref).path
    return (
        AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), trust_remote_code=trust_remote_code)
        .to(device)
        .eval()
    )


def load_hf(ref: str, dtype: str = "float32", device: str = "cpu", trust_remote_code: bool = False) -> tuple[Any, Any]:
    """(model, tokenizer) of a causal LM in eval mode, shared per (weights, dtype, device); pad = eos if unset."""

    def build():
        tok = load_tokenizer(ref, trust_remote_code)
        model = load_causal_lm(ref, dtype, device, trust_remote_code)
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        return model, tok

    return resources.shared(("causal_lm", resolve(ref).path, dtype, device), build)


def merged_folder(ref: str, adapter: str, trust_remote_code: bool = False) -> str:
    """A folder holding ``ref`` with the LoRA ``adapter`` merged into its weights (built once, then reused)."""
    base = resolve(ref)
    apath = resolve(adapter).path
    digest = adapter_digest(apath) or "nohash"
    out = cache_dir() / "merged" / f"{Path(base.path).name}-{(weights_digest(ref) or 'hub')[:12]}-{digest[:16]}"
    if intact(out, "merged.json"):
        return str(out)
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base.path, trust_remote_code=trust_remote_code)
    model = AutoModelForCausalLM.from_pretrained(base.path, dtype=torch.float32, trust_remote_code=trust_remote_code)
    merged = PeftModel.from_pretrained(model, apath).merge_and_unload()
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    merged.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    seal_folder(tmp, out, "merged.json", {"base": base.describe(), "adapter": apath, "adapter_sha256": digest})
    return str(out)
