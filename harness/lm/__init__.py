"""The model layer: the one place that loads, batches and caches models.

- ``get_lm(ref, engine=..., dtype=..., adapter=...)`` (``instances``): the process-wide ``LM`` (``model``) for those
  weights, engine and dtype, which tokenises and runs ``generate``, ``token_logprobs``, ``prompt_logprobs`` and
  ``answer_nll`` through the call cache (``cache``); ``live``, ``release``, ``forget_prefixes`` act on those alive.
- ``models.resolve(ref)``: where a model reference's files are (embedded packages, local folders, hub ids).
- ``loading``: causal LMs as torch models (``load_hf``), tokenizers, configs, LoRA adapters merged into derived
  weights; ``encoders``: sentence encoders, cross-encoders, plain encoders, sequence classifiers, seq2seq LMs.
- ``lora``: LoRA fine-tuning and adapter files (``save_adapter``); ``sft_file``: the same on another machine.

Only re-exports live here; importing ``harness.lm`` loads no backend.
"""

from __future__ import annotations

from harness.lm.instances import ENGINES, forget_prefixes, get_lm, live, release
from harness.lm.model import LM, Completion

__all__ = ["ENGINES", "LM", "Completion", "forget_prefixes", "get_lm", "live", "release"]
