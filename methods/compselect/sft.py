"""CompSelect's LoRA SFT (000 section 4.1 Eq. 4, section 4.3 Eq. 11) on the model layer's trainer
(``harness.lm.lora``): a target is followed by the end-of-turn token, so an empty target teaches the model to stop
at once (the truncator's empty set)."""

from __future__ import annotations

from harness.lm.lora import (  # noqa: F401  (re-exported for the training script and tests)
    SFTExample,
    _loss,
    eval_loss,
    lora_config,
    save_adapter,
    train_lora,
)


def make_example(lm, messages: list[dict[str, str]], target: str) -> SFTExample:
    """Token ids of a chat prompt and its target (+ the model's end-of-turn token)."""
    ids = lm.tokenizer(target, add_special_tokens=False)["input_ids"] if target else []
    return SFTExample(lm.encode(messages), [*ids, lm.eos_ids()[0]])
