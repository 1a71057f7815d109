"""The extractor's and truncator's LM *for training*: one base causal LM with named LoRA adapters (LoRA SFT in
``harness.lm.lora.train_lora``, validation losses). Inference and labelling go through the model layer instead
(``harness.lm.get_lm(..., adapter=...)``: the adapter merged into derived weights, served by the shared engine).

The base model is the process-wide instance from ``harness.lm.loading.load_hf``, which the generator may
share (embedded profile: SmolLM2 is both). ``peft`` injects LoRA layers into the module tree it is given, so
the adapters go onto a *structural copy* of the base whose parameters are the very same tensors
(``copy.deepcopy`` with every parameter and buffer pre-seeded in the memo): no extra memory, and the
generator's module tree is untouched. Adapters are never merged (merging would write into the shared weights).
On another device than the shared instance's, a separate model is loaded instead (the paper profile's 3B
extractor is not the generator anyway).
"""

from __future__ import annotations

import json
import logging
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from harness.lm.loading import adapter_digest, is_adapter_dir, load_causal_lm, load_hf
from harness.lm.lora import weight_sharing_copy
from harness.protocols import Messages

log = logging.getLogger(__name__)


class LoraLM:
    """A causal LM with named LoRA adapters (``{"extractor": dir, "truncator": dir}``); ``adapter=None`` is
    the plain base model. ``context_length`` is the base model's (``harness.lm.fit`` fits prompts to it)."""

    def __init__(
        self,
        ref: str,
        adapters: dict[str, str] | None = None,
        dtype: str = "float32",
        device: str = "cpu",
        trust_remote_code: bool = False,
    ) -> None:
        self.ref, self.dtype, self.device = ref, dtype, device
        self.adapters = {k: str(v) for k, v in (adapters or {}).items() if v}
        for name, path in self.adapters.items():
            if not is_adapter_dir(path):
                raise FileNotFoundError(
                    f"LoRA adapter {name!r} not found at {path}: train it with `python -m methods.compselect.train`"
                )
        base, self.tokenizer = load_hf(ref, dtype, "cpu", trust_remote_code)
        if device != "cpu":  # a private model: its module tree takes the adapters in place
            base = load_causal_lm(ref, dtype, device, trust_remote_code)
        self.base = base
        self.model = self._with_adapters(base) if self.adapters else base
        self.context_length = int(getattr(base.config, "max_position_embeddings", None) or 2048)

    def _with_adapters(self, base):
        from peft import PeftModel

        tree = weight_sharing_copy(base) if base.device.type == "cpu" and self.device == "cpu" else base
        names = list(self.adapters)
        model = PeftModel.from_pretrained(tree, self.adapters[names[0]], adapter_name=names[0], is_trainable=False)
        for name in names[1:]:
            model.load_adapter(self.adapters[name], adapter_name=name, is_trainable=False)
        return model.eval()

    def _context(self, adapter: str | None):
        if adapter is None:
            return self.model.disable_adapter() if self.adapters else nullcontext()
        if adapter not in self.adapters:
            raise KeyError(f"no adapter {adapter!r}; loaded: {sorted(self.adapters)}")
        self.model.set_adapter(adapter)
        return nullcontext()

    def encode(self, messages: Messages) -> list[int]:
        return list(
            self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)[
                "input_ids"
            ]
        )

    encode_chat = encode  # the model layer's name (``harness.lm.LM.encode_chat``)

    def count(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0

    def eos_ids(self) -> list[int]:
        eos = self.base.generation_config.eos_token_id
        ids = list(eos) if isinstance(eos, list | tuple) else [eos]
        if self.tokenizer.eos_token_id not in ids:
            ids.append(self.tokenizer.eos_token_id)
        return [i for i in ids if i is not None]

    def describe(self) -> dict[str, Any]:
        from harness.lm.models import resolve

        return {
            "lm": resolve(self.ref).describe(),
            "dtype": self.dtype,
            "adapters": {
                k: {"path": v, "sha256": adapter_digest(v), **_adapter_info(v)} for k, v in self.adapters.items()
            },
        }


def _adapter_info(path: str) -> dict[str, Any]:
    cfg = json.loads((Path(path) / "adapter_config.json").read_text())
    return {k: cfg.get(k) for k in ("r", "lora_alpha", "target_modules")}
