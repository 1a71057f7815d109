"""EXIT's classifier training (methods/exit_train.py) on real train questions: the labels follow the rule, the
training prompts are the ones EXIT scores at inference, and a tiny run writes an adapter that the method loads."""

from __future__ import annotations

import json
import random

import pytest

from tests.conftest import DATA, LM, REPO, load_slice


def test_labels_are_answer_sentences_and_other_sentences_of_the_same_passages():
    from harness.metrics import subem
    from methods.exit_train import labelled_sentences

    rows_seen = 0
    for ex in load_slice("nq", 12, split="train"):
        rows = labelled_sentences(ex, 2, 1, random.Random(0))
        pos = [r for r in rows if r["label"]]
        neg = [r for r in rows if not r["label"]]
        assert len(pos) <= 2 and len(neg) <= len(pos)
        assert all(subem(r["text"], ex.answers) for r in pos)
        assert not any(subem(r["text"], ex.answers) for r in neg)
        for r in rows:
            p = ex.passages[r["passage"]]
            assert r["text"] in p.text and r["context"].endswith(p.text.strip())
        rows_seen += len(rows)
    assert rows_seen > 12  # the slice has answer sentences


@pytest.mark.slow
def test_a_tiny_training_run_writes_an_adapter_exit_loads(tmp_path, generator):
    from hydra import compose, initialize_config_dir

    from harness.protocols import MethodEnv
    from methods.exit import Exit
    from methods.exit_train import run

    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose("train/exit", overrides=[
            f"out_dir={tmp_path / 'classifier'}", f"data.root={DATA}", "progress=false",
            "data.questions={nq: 6, triviaqa: 0, hotpotqa: 0}", "data.val_fraction=0.5", "data.val_questions=0",
            "grad_accum=2", "eval_every=1", "save_every=1",
        ])
    m = run(cfg)
    assert m["questions"] == {"train": 3, "val": 3} and 0 < m["labels"]["train"]["questions"] <= 3
    assert m["train"]["optimizer_steps"] >= 2 and m["train"]["val_history"]
    labels = [json.loads(x) for x in (tmp_path / "labels.jsonl").read_text().splitlines()]
    assert len(labels) == m["train"]["examples"] + m["train"]["val_examples"]
    assert sum(r["label"] for r in labels) == m["labels"]["train"]["positive"] + m["labels"]["val"]["positive"]
    # the training prompt is the one EXIT scores, and the adapter loads through the model layer
    trained = Exit(LM, adapter=str(tmp_path / "classifier"), engine="transformers", dtype="float32")
    trained.bind(MethodEnv(count_tokens=generator.count_tokens))
    ex = load_slice("nq", 1, split="train")[0]
    p = ex.passages[0]
    ctx = f"{p.title.strip()}\n{p.text.strip()}"
    scores = trained.score(ex.question, ctx, [p.text.strip()])
    assert 0.0 <= scores[0] <= 1.0
