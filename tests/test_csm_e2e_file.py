"""CSM-e2e trained from an exported file (``methods.csm.train_e2e_file``): the file round-trips, a run trains
through the real generator and keeps the epoch best on the held-back figure, a deadline stops it, and the import
refuses a head trained on other lists; the CLI export -> train -> import path end to end on a slice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from methods.csm import train_e2e_file as e2e_file
from methods.csm.features import PairEncoder
from methods.csm.train_e2e import SoftMaskLM
from methods.csm.train_rebalance import Sample

ENCODER = "embedded:all-minilm-l6-v2"
SETTINGS = {
    "seed": 7,
    "select_epoch": "spearman_pooled",
    "head": {"layers": 1, "heads": 4, "ffn_dim": 0, "dropout": 0.0},
    "e2e": {
        "gate": "attention",
        "lambda_nec": 1.0,
        "temperature": 1.0,
        "epochs": 2,
        "batch_size": 2,
        "lr": 1e-2,
        "max_steps": None,
    },
    "optim": {"weight_decay": 0.0, "warmup": 0.01},
    "encoder": ENCODER,
    "granularity": "passage",
    "label_temperature": 1.0,
}


@pytest.fixture(scope="module")
def doc(generator, nq5):
    """Four training lists and one held-back list of short passages (real features, real token ids)."""
    enc = PairEncoder(ENCODER)
    lists = [(e.question, list(e.answers), [" ".join(p.render().split()[:25]) for p in e.passages[:3]]) for e in nq5]
    train = [Sample(q, a, t, []) for q, a, t in lists[:4]]
    held = [Sample(lists[4][0], [], lists[4][2], [0.4, -0.2, 0.1])]
    feats = {id(s): enc.encode([s.question] * len(s.texts), s.texts) for s in train + held}
    lm = SoftMaskLM(generator.model, generator.tokenizer)
    return e2e_file.build_export("embedded:smollm2-135m-instruct", SETTINGS, train, held, lambda s: feats[id(s)], lm)


def test_export_round_trips_and_its_digest_covers_the_lists(doc, tmp_path):
    path = e2e_file.write_export(tmp_path / "x.pt", doc)
    back = torch.load(path, weights_only=True)  # only tensors and plain types: loadable without trusting pickles
    assert (
        back["digest"] == doc["digest"] == e2e_file.digest(back["base"], back["settings"], back["train"], back["held"])
    )
    changed = [dict(r) for r in back["train"]]
    changed[0]["answers"] = ["something else"]
    assert e2e_file.digest(back["base"], back["settings"], changed, back["held"]) != doc["digest"]
    assert back["train"][0]["ids"].dtype == torch.int32  # half the bytes of int64: the file travels


@pytest.mark.slow
def test_training_through_the_generator_keeps_the_best_epoch(doc, generator):
    head0, _ = e2e_file.train_from_doc(doc, generator.model, max_steps=0)
    head, report = e2e_file.train_from_doc(doc, generator.model)
    assert report["steps"] == report["steps_for_schedule"] == 4  # 2 epochs x 2 batches of 2
    epochs = [h for h in report["history"] if "validation" in h]
    assert [h["epoch"] for h in epochs] == [1, 2]
    assert sum(h.get("selected", False) for h in report["history"]) == 1
    assert all(h["loss"] == pytest.approx(h["suf"] + h["nec"]) for h in report["history"])
    moved = any(
        not torch.equal(a, b) for a, b in zip(head.state_dict().values(), head0.state_dict().values(), strict=True)
    )
    assert moved
    assert report["heldout"]["units"] == 3 and report["device"] == "cpu"
    _, rep = e2e_file.train_from_doc(doc, generator.model, time_budget_s=1e-9)
    assert rep["steps"] == 1 and rep["history"][0]["deadline"] and rep["history"][0]["epoch"] == 1


def test_read_report_refuses_a_head_trained_on_other_lists(doc, tmp_path):
    (tmp_path / "report.json").write_text(json.dumps({"export_digest": "0" * 64}))
    with pytest.raises(ValueError, match="other lists"):
        e2e_file.read_report(tmp_path, doc)
    (tmp_path / "report.json").write_text(json.dumps({"export_digest": doc["digest"]}))
    assert e2e_file.read_report(tmp_path, doc)["export_digest"] == doc["digest"]


@pytest.mark.slow
def test_cli_export_train_import_on_a_slice(tmp_path, generator):
    """``e2e.export`` -> ``e2e_file`` (one step, CPU) -> ``e2e.import_from``: the installed head is the trained
    one and its manifest says where it was trained (two passages a list, no held-back labels: cheap here)."""
    from hydra import compose, initialize_config_dir

    from harness.config import apply_profile_env
    from methods.csm.head import load_head
    from methods.csm.train import run

    conf = Path(__file__).resolve().parent.parent / "conf"
    common = [
        "dataset=nq",
        "dataset.top_k=2",
        "limit=5",
        "holdout=0.2",
        "progress=false",
        "e2e.batch_size=2",
        "e2e.eval_labels=false",
        f"out_dir={tmp_path / 'csm_e2e_passage_nq'}",
    ]
    with initialize_config_dir(str(conf), version_base="1.3"):
        cfg_x = compose("train/csm_e2e", overrides=[*common, f"e2e.export={tmp_path / 'x'}"])
        cfg_i = compose("train/csm_e2e", overrides=[*common, f"e2e.import_from={tmp_path / 'o'}"])
    apply_profile_env(cfg_x)
    path = Path(run(cfg_x)["export"])
    assert path.name == "csm_e2e_passage_nq.pt" and not (tmp_path / "csm_e2e_passage_nq").exists()
    report = e2e_file.main(
        [
            str(path),
            str(tmp_path / "o"),
            "--base",
            "embedded:smollm2-135m-instruct",
            "--device",
            "cpu",
            "--max-steps",
            "1",
        ]
    )
    assert report["steps"] == 1 and report["train_lists"] == 4 and report["held_lists"] == 0
    m = run(cfg_i)
    assert m["data"]["device"] == "cpu" and m["data"]["imported_from"].endswith("o")
    assert m["history"] == report["history"]
    got, _ = load_head(tmp_path / "csm_e2e_passage_nq")
    want, _ = load_head(tmp_path / "o")
    assert all(torch.equal(a, b) for a, b in zip(got.state_dict().values(), want.state_dict().values(), strict=True))
    assert m["heldout"] == report["heldout"] == {}
    (tmp_path / "o" / "report.json").write_text(json.dumps({**report, "export_digest": "f" * 64}))
    with pytest.raises(ValueError, match="other lists"):
        run(cfg_i)
