"""Training an exported SFT stage elsewhere (``harness.lm.sft_file``): the same adapter as training in process,
snapshots per epoch, a time budget that lowers the epochs, and an import refused for other examples."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from harness.lm.lora import SFTExample, train_lora
from harness.lm.sft_file import export_examples, main, read_report

SETTINGS = {
    "r": 4,
    "alpha": 8,
    "dropout": 0.0,
    "target_modules": ["q_proj", "v_proj"],
    "lr": 1e-2,
    "epochs": 2.0,
    "grad_accum": 4,
    "warmup_ratio": 0.1,
    "loss_norm": "example",
    "eval_every": 2,
    "select_best": True,
    "compute_dtype": None,
    "seed": 3,
}


@pytest.fixture()
def tiny(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    )
    model.save_pretrained(tmp_path / "base")
    g = torch.Generator().manual_seed(1)

    def ex():
        return SFTExample(
            torch.randint(0, 64, (12,), generator=g).tolist(), torch.randint(0, 64, (4,), generator=g).tolist()
        )

    train, val = [ex() for _ in range(8)], [ex() for _ in range(3)]
    path = export_examples(tmp_path / "x.sft.json.gz", "extractor", "tiny", train, val, SETTINGS)
    return tmp_path, model, train, val, path


def test_trains_as_in_process_with_snapshots_and_checked_import(tiny):
    tmp, model, train, val, path = tiny
    report = main(
        [str(path), str(tmp / "out"), "--base", str(tmp / "base"), "--device", "cpu", "--snapshot-epochs", "1"]
    )
    assert report["snapshots"] == [2, 4] and report["optimizer_steps"] == 4
    assert json.loads((tmp / "out" / "report.json").read_text())["export_digest"] == report["export_digest"]
    got = load_file(tmp / "out" / "adapter" / "adapter_model.safetensors")
    snap = load_file(tmp / "out" / "snapshots" / f"step{report['selected_step']}" / "adapter_model.safetensors")
    assert got.keys() == snap.keys() and all(torch.equal(got[k], snap[k]) for k in got)

    kw = {k: v for k, v in SETTINGS.items() if k != "select_best"}
    same, direct = train_lora(model.eval(), train, val, select_best=True, **kw)
    assert direct["step_losses"] == report["step_losses"] and direct["selected_step"] == report["selected_step"]
    from peft import get_peft_model_state_dict

    ref = {k: v.to(torch.float16) for k, v in get_peft_model_state_dict(same).items()}
    assert all(torch.equal(got[k], ref[k]) for k in got)

    rep, adapter = read_report(tmp / "out", train, val)
    assert rep["stage"] == "extractor" and adapter == tmp / "out" / "adapter"
    rep, adapter = read_report(tmp / "out" / "snapshots" / "step2", train, val)
    assert rep["selected_step"] == 2 and adapter == tmp / "out" / "snapshots" / "step2"
    with pytest.raises(ValueError, match="other examples"):
        read_report(tmp / "out", train[1:], val)
    with pytest.raises(ValueError, match="other examples"):
        read_report(tmp / "out", train, [*val, train[0]])


def test_time_budget_lowers_epochs_and_says_so(tiny):
    tmp, _, _, _, path = tiny
    report = main(
        [
            str(path),
            str(tmp / "out"),
            "--base",
            str(tmp / "base"),
            "--device",
            "cpu",
            "--epochs",
            "3",
            "--time-budget-s",
            "1e-6",
        ]
    )
    assert report["timing"]["epochs_fit"] == 0.1 and report["epochs"] == 0.1
    assert report["overrides"] == {"epochs": 0.1} and report["optimizer_steps"] == 1


def test_micro_batches_give_the_one_at_a_time_losses(tiny):
    """Padded forward passes of several examples (the GPU path) train as one example at a time does."""
    _, model, train, val, _ = tiny
    kw = {k: v for k, v in SETTINGS.items() if k != "select_best"}
    for norm in ("example", "token"):
        one, r1 = train_lora(model.eval(), train, val, **{**kw, "loss_norm": norm})
        four, r4 = train_lora(model.eval(), train, val, micro_batch=4, **{**kw, "loss_norm": norm})
        assert r4["micro_batch"] == 4 and r4["step_losses"] == pytest.approx(r1["step_losses"], abs=2e-4)
        assert r4["val_loss_after"] == pytest.approx(r1["val_loss_after"], rel=1e-4)
        a, b = dict(one.named_parameters()), dict(four.named_parameters())
        assert all(torch.allclose(a[k], b[k], atol=1e-4) for k in a if a[k].requires_grad)
