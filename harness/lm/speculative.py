"""Prompt-lookup (n-gram) speculative decoding: a setting of every greedy generation of the model layer.

The proposer looks up the last ``lookup_min``..``lookup_max`` tokens of the text so far in the prompt (and the text
generated) and proposes the ``num_tokens`` that followed them there; the model checks them all in one forward pass
and keeps the longest run that plain greedy decoding would have produced, plus its own next token. The output is
the greedy sequence: in fp32 the same tokens (``tests/test_speculative.py``, every generating stage); in bf16 the
batched check may round differently, so speculation is on by default for fp32 only (``dtypes``). It pays where
decoding is bound by memory bandwidth and the output copies its prompt: at batch 1 on a CPU every new token reads
all the weights, and the extractive stages (CompSelect's extractor and truncator, EDC2, Refiner) copy sentences.
In a batch a forward pass is already busy with the other sequences, so ``max_batch`` bounds where it is used:

- vLLM: ``speculative_config`` with a per-step schedule (``num_speculative_tokens_per_batch_size``): ``num_tokens``
  proposed while at most ``max_batch`` sequences decode together, none beyond. The vLLM engine cannot return
  log-probabilities with speculation on, so an ``LM`` keeps its scoring calls on a second engine without it
  (``harness.lm.model.LM``), each started only when first needed.
- transformers: ``prompt_lookup_num_tokens`` in ``generate`` for a call of at most ``max_batch`` prompts run one at
  a time (its assisted generation takes one sequence); larger calls decode in padded batches as before.

The run's setting is ``models.speculative`` (``configure``: every LM a method starts), the generator's
``generator.speculative``; both land in ``run.json`` and in each LM's ``engine_settings``. Since the tokens are the
same, the setting is not part of the call cache's key, except for a dtype it is not on by default for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

METHODS = ("ngram",)
_DEFAULT: dict[str, Any] = {"setting": None}


@dataclass(frozen=True)
class Speculation:
    """One speculative-decoding setting (module docstring)."""

    method: str = "ngram"
    num_tokens: int = 6
    lookup_max: int = 4
    lookup_min: int = 2
    max_batch: int = 1
    dtypes: tuple[str, ...] = ("float32",)

    def __post_init__(self) -> None:
        from harness.validate import ConfigError

        if self.method not in METHODS:
            raise ConfigError(f"speculative.method={self.method!r}; valid: {', '.join(METHODS)} (or null: off)")
        if not 1 <= self.lookup_min <= self.lookup_max or self.num_tokens < 1 or self.max_batch < 1:
            raise ConfigError(
                f"speculative: need 1 <= lookup_min <= lookup_max, num_tokens >= 1 and max_batch >= 1 ({self})"
            )

    @staticmethod
    def parse(setting: Speculation | Mapping[str, Any] | None) -> Speculation | None:
        """A setting from config (``None``, ``{}`` or ``method: null``: off)."""
        if setting is None or isinstance(setting, Speculation):
            return setting
        values = dict(setting)
        if not values or values.get("method") in (None, "off", False):
            return None
        known = {f.name for f in fields(Speculation)}
        if unknown := sorted(set(values) - known):
            from harness.validate import ConfigError

            raise ConfigError(f"speculative: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}")
        if "dtypes" in values:
            values["dtypes"] = tuple(values["dtypes"])
        return Speculation(**values)

    def applies(self, dtype: str) -> bool:
        """Whether it is on for an engine computing in ``dtype``."""
        return dtype in self.dtypes

    def vllm_config(self) -> dict[str, Any]:
        """vLLM's ``speculative_config``: ``num_tokens`` up to ``max_batch`` decoding sequences, none beyond."""
        return {
            "method": self.method,
            "num_speculative_tokens": self.num_tokens,
            "prompt_lookup_max": self.lookup_max,
            "prompt_lookup_min": self.lookup_min,
            "num_speculative_tokens_per_batch_size": [
                (1, self.max_batch, self.num_tokens),
                (self.max_batch + 1, self.max_batch + 1, 0),
            ],
        }

    def describe(self) -> dict[str, Any]:
        return {**asdict(self), "dtypes": list(self.dtypes)}


def configure(setting: Speculation | Mapping[str, Any] | None) -> None:
    """The run's setting for every LM started without one of its own (``models.speculative``)."""
    _DEFAULT["setting"] = Speculation.parse(setting)


def default() -> Speculation | None:
    return _DEFAULT["setting"]


def active(setting: Speculation | Mapping[str, Any] | str | None, dtype: str) -> Speculation | None:
    """The speculation an engine in ``dtype`` runs with: ``setting`` (``"default"``: the configured one) where it
    applies to that dtype, else none."""
    spec = default() if setting == "default" else Speculation.parse(setting)  # type: ignore[arg-type]
    return spec if spec is not None and spec.applies(dtype) else None
