"""The CompSelect training pipeline end to end on a small real slice: extractor SFT, labelling with the merged
extractor and the generator through the model layer (vLLM), reranker and truncator training, the manifest; a
re-run replays every LM call from the model layer's cache."""

from __future__ import annotations

import json

import pytest

from tests.conftest import DATA, REPO

pytestmark = pytest.mark.slow


def compose(out, overrides=()):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return compose(
            "train/compselect",
            overrides=[
                f"out_dir={out}",
                f"data.root={DATA}",
                "threads=2",
                "progress=false",
                "data.val_fraction=0.34",
                "extractor.max_input_tokens=256",
                "extractor.max_new_tokens=48",
                "extractor.epochs=1",
                "extractor.lr=2e-3",
                "extractor.grad_accum=2",
                "extractor.eval_every=2",
                "extractor.save_every=2",  # one epoch: ~3 steps (3 epochs cost ~40 s more)
                "reranker.epochs=1",
                "reranker.batch_size=4",
                "reranker.warmup_steps=1",
                "truncator.max_new_tokens=48",
                "truncator.epochs=1",
                "truncator.grad_accum=2",
                "truncator.eval_every=2",
                *overrides,
            ],
        )


def test_training_pipeline_on_a_small_slice_and_its_rerun_replays_every_call(tmp_path, monkeypatch):
    pytest.importorskip("vllm")
    from omegaconf import OmegaConf

    from harness.lm import cache
    from methods.compselect import train

    cache.configure(enabled=True, path=str(tmp_path / "calls.sqlite"))
    try:
        cfg = compose(tmp_path / "out")
        OmegaConf.update(cfg, "data.extractor", {"nq": 10}, merge=False)
        OmegaConf.update(cfg, "data.labels", {"nq": 6}, merge=False)
        m = train.run(cfg)
        out = tmp_path / "out"
        for stage in ("extractor", "reranker", "truncator"):
            assert (out / stage / "adapter_config.json").is_file() or (out / stage).is_dir()
            assert "train" in m[stage]
        ext = m["extractor"]["train"]
        assert ext["val_history"] and ext["selected_step"] in [s for s, _ in ext["val_history"]]
        assert not list(out.glob(".*.checkpoint.pt"))  # completed stages leave no checkpoint
        calls = m["lm_calls"]
        assert calls["extractor"] == 6 and calls["generator"] > 0 and calls["extractor_engine_started"]
        # only repeats are replayed in a first run (a truncation prefix D_1 is the clue the reranker labels asked)
        assert calls["replayed"] < calls["generator"]
        rer = [json.loads(x) for x in (out / "labels" / "reranker_labels.jsonl").read_text().splitlines()]
        assert len(rer) == 6 and sum(len(r["clues"]) for r in rer) == m["labels_only"]["reranker_labels"]["clues"]
        assert m["models"]["generator"]["lm"]["engine"] == "vllm"
        # the same command again, re-training only the truncator: every labelling call is replayed
        again = compose(out, ["stages=[truncator]"])
        OmegaConf.update(again, "data.extractor", {"nq": 10}, merge=False)
        OmegaConf.update(again, "data.labels", {"nq": 6}, merge=False)
        m2 = train.run(again)
        assert m2["lm_calls"]["replayed"] == m2["lm_calls"]["generator"] + m2["lm_calls"]["extractor"]
        assert not m2["lm_calls"]["extractor_engine_started"]  # every extractor call replayed: no engine started
        assert m2["extractor"] == m["extractor"] and m2["reranker"] == m["reranker"]  # kept, not re-run
        # the reranker re-trained on these labels (no extractor call), plus triplets from the extractor's own targets
        rer_file = out / "labels" / "reranker_labels.jsonl"
        before = rer_file.read_text()
        redo = compose(out, ["stages=[reranker]", f"reranker.labels_from={rer_file}", "reranker.extractor_triplets=1"])
        OmegaConf.update(redo, "data.extractor", {"nq": 10}, merge=False)
        OmegaConf.update(redo, "data.labels", {"nq": 6}, merge=False)
        m4 = train.run(redo)
        assert m4["lm_calls"]["extractor"] == 0 and rer_file.read_text() == before
        labels4 = m4["reranker"]["labels"]
        same = ("questions", "clues", "positive_clues", "generator_correct_clues", "answer_clues", "questions_kept")
        assert {k: labels4[k] for k in same} == {k: m["reranker"]["labels"][k] for k in same}
        assert 0 < labels4["extractor_triplet_count"] == labels4["extractor_triplet_questions"] <= 10
        assert m4["reranker"]["train"]["train_triplets"] == (
            m["reranker"]["train"]["train_triplets"] + labels4["extractor_triplet_count"]
        )
        # the extractor trained elsewhere: export its examples, train them with sft_file, import the adapter
        from harness.lm import sft_file

        exp = compose(out, ["stages=[extractor]", f"export_sft={tmp_path / 'exp'}"])
        OmegaConf.update(exp, "data.extractor", {"nq": 10}, merge=False)
        OmegaConf.update(exp, "data.labels", {"nq": 6}, merge=False)
        with pytest.raises(train.ExportDone):
            train.run(exp)
        path = tmp_path / "exp" / "extractor.sft.json.gz"
        rep = sft_file.main(
            [
                str(path),
                str(tmp_path / "sft"),
                "--base",
                cfg.lm,
                "--device",
                "cpu",
                "--epochs",
                "1",
                "--micro-batch",
                "2",
                "--snapshot-epochs",
                "1",
            ]
        )
        imp = compose(out, ["stages=[extractor]", f"extractor.import_from={tmp_path / 'sft'}"])
        OmegaConf.update(imp, "data.extractor", {"nq": 10}, merge=False)
        OmegaConf.update(imp, "data.labels", {"nq": 6}, merge=False)
        m3 = train.run(imp)
        assert m3["extractor"]["train"]["imported_from"] == str(tmp_path / "sft" / "adapter")
        assert m3["extractor"]["train"]["step_losses"] == rep["step_losses"]
        assert (out / "extractor" / "adapter_model.safetensors").read_bytes() == (
            tmp_path / "sft" / "adapter" / "adapter_model.safetensors"
        ).read_bytes()
        # an imported extractor and an export in one run: it labels with the import and exports the truncator
        both = compose(
            out,
            [
                "stages=[extractor,truncator]",
                f"extractor.import_from={tmp_path / 'sft'}",
                f"export_sft={tmp_path / 'exp2'}",
            ],
        )
        OmegaConf.update(both, "data.extractor", {"nq": 10}, merge=False)
        OmegaConf.update(both, "data.labels", {"nq": 6}, merge=False)
        with pytest.raises(train.ExportDone) as done:
            train.run(both)
        assert done.value.args[0] == tmp_path / "exp2" / "truncator.sft.json.gz"
        OmegaConf.update(imp, "data.extractor", {"nq": 9}, merge=False)  # other examples: refused
        with pytest.raises(ValueError, match="other examples"):
            train.run(imp)
    finally:
        cache.configure()
