"""CSM (paper 002): forward shapes and padding on real MiniLM pair features, CSM-st rebalancing and losses,
a few training steps lowering the loss, the committed embedded weights selecting exactly the positive
predictions, and the CSM-e2e soft gate on the real generator."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from harness.types import Unit
from methods.csm.features import PairEncoder
from methods.csm.head import CSMHead, pad_lists
from methods.csm.train_losses import contrastive, st_loss
from methods.csm.train_rebalance import (
    Sample,
    build_intervened,
    downsample,
    interventions,
    mark_hard,
    rarity,
    weights_from_rarity,
)

ENCODER = "embedded:all-minilm-l6-v2"
WEIGHTS = Path(__file__).resolve().parent.parent / "methods/csm/artifacts/embedded/csm_st_passage_nq"


@pytest.fixture(scope="module")
def pairs():
    return PairEncoder(ENCODER)


def test_pair_features_and_head_shapes_with_padding(pairs, nq5):
    lists = [pairs.encode([e.question] * len(e.passages), [p.render() for p in e.passages]) for e in nq5[:2]]
    lists[1] = lists[1][:3]
    assert lists[0].shape == (5, 384)
    torch.manual_seed(0)
    head = CSMHead(384).eval()
    x, pad = pad_lists(lists)
    assert x.shape == (2, 5, 384) and pad.tolist()[1] == [False, False, False, True, True]
    scores, g = head(x, pad)
    assert scores.shape == (2, 5) and g.shape == (2, 5, 384)
    assert scores.abs().max() <= 1
    alone, _ = head(lists[1][None], None)  # padding must not change the real units' scores
    assert torch.allclose(alone[0], scores[1, :3], atol=1e-5)
    assert sum(p.numel() for p in head.parameters()) < 2_500_000  # commits as a few MB in fp16


def test_pair_features_come_back_in_input_order_whatever_the_batching(pairs, nq5):
    """Pairs are batched longest first; each row is still its own pair's features, as encoded alone."""
    qs = [e.question for e in nq5 for _ in e.passages]
    ts = [p.text[: 40 + 37 * i] for e in nq5 for i, p in enumerate(e.passages)]  # lengths that sorting reorders
    small = PairEncoder(ENCODER, batch_size=4)
    feats = small.encode(qs, ts)
    perm = list(reversed(range(len(ts))))
    assert torch.allclose(small.encode([qs[i] for i in perm], [ts[i] for i in perm]), feats[perm], atol=1e-5)
    for i in (0, 7, len(ts) - 1):
        assert torch.allclose(small.encode([qs[i]], [ts[i]])[0], feats[i], atol=1e-4)


def _sample(vals, q="q", origin="label"):
    return Sample(q, ["a"], [f"{q}-{i}" for i in range(len(vals))], list(vals), list(vals), origin=origin)


def test_rarity_hard_split_downsampling_and_weights():
    flat, spiky = _sample([0.01, 0.0, -0.01, 0.0]), _sample([0.9, -0.8, 0.0, 0.1])
    assert rarity(flat.targets, 10) < 5 < rarity(spiky.targets, 10)
    samples = [flat, spiky] + [_sample([0.0, 0.02, 0.0, 0.01], f"t{i}") for i in range(40)]
    mark_hard(samples, 10, 5, 5)
    assert [s.hard for s in samples[:2]] == [False, True]
    kept = downsample(samples, 5, 0.3, random.Random(0))
    assert spiky in kept and 4 <= len(kept) <= 25
    d1, _ = mark_hard(samples, 10, 5, 5, hard_fraction=0.5)
    assert sum(s.hard for s in samples) >= 21 and d1 < 5
    weights_from_rarity(samples)
    assert abs(sum(s.weight for s in samples) / len(samples) - 1) < 1e-9


def test_intervention_transplants_positive_units_among_another_instances_units():
    hard = _sample([0.9, -0.8, 0.0, 0.3], "hq")
    other = _sample([0.0, 0.0, 0.0, 0.0], "oq")
    hard.hard = True
    plans = interventions([hard, other], lambda i, j: 0.1, gamma=0.1, max_question_sim=0.5, rng=random.Random(1))
    assert [p[4] for p in plans] == ["high", "low"]
    high, pos = build_intervened(plans[0], random.Random(2))
    assert high.question == "hq" and len(high.texts) == 4
    assert sorted(high.texts[k] for k in pos) == ["hq-0", "hq-3"]
    assert sorted(high.targets[k] for k in pos) == [0.3, 0.9]
    assert all(t == 0.0 for k, t in enumerate(high.targets) if k not in pos)
    low, pos = build_intervened(plans[1], random.Random(2))
    assert low.question == "oq" and all(low.targets[k] == 0.0 for k in pos)
    # no semantically distinct partner question: no intervention
    assert interventions([hard, other], lambda i, j: 0.9, 0.1, 0.5, random.Random(1)) == []


def test_contrastive_term_pulls_same_sign_units_together():
    t = torch.tensor([[0.5, 0.4, -0.6]])
    pad = torch.zeros(1, 3, dtype=torch.bool)
    hard = torch.tensor([True])
    good = torch.tensor([[[1.0, 0.0], [0.9, 0.1], [-1.0, 0.0]]])
    bad = torch.tensor([[[1.0, 0.0], [-1.0, 0.0], [0.9, 0.1]]])
    assert contrastive(good, t, pad, hard) < contrastive(bad, t, pad, hard)
    assert contrastive(good, t, pad, torch.tensor([False])) == 0


def test_a_few_st_training_steps_lower_the_loss(pairs, nq5):
    torch.manual_seed(0)
    feats = [pairs.encode([e.question] * 5, [p.render() for p in e.passages]) for e in nq5]
    # a real-feature batch with fixed targets: does the optimiser move the loss down?
    base = torch.tensor([[0.6, -0.2, 0.0, 0.1, -0.4]] * len(nq5))
    targets = base * torch.linspace(1, 0.2, len(nq5))[:, None]
    x, pad = pad_lists(feats)
    w, hard = torch.ones(len(nq5)), torch.tensor([True] * len(nq5))
    head = CSMHead(384, dropout=0.0)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-3)
    losses, mses = [], []
    for _ in range(20):
        s, g = head(x, pad)
        loss, parts = st_loss(s, g, targets, pad, w, hard)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        mses.append(parts["mse"])
    assert losses[-1] < 0.6 * losses[0]
    assert mses[-1] < 0.3 * mses[0]


def test_st_training_ends_with_the_epoch_best_on_validation(pairs, nq5):
    """``train_st(validate=...)`` keeps the weights of the epoch the validation figure prefers, not the last."""
    from methods.csm.train_fit import predict, train_st

    texts = {e.question: [p.render() for p in e.passages] for e in nq5}
    feats_of = {q: pairs.encode([q] * len(t), t) for q, t in texts.items()}
    samples = [Sample(q, ["a"], t, [0.5, -0.5, 0.0, 0.2, -0.1], [0.5, -0.5, 0.0, 0.2, -0.1]) for q, t in texts.items()]

    def feats(s):
        return feats_of[s.question]

    seen, figures = [], iter([0.1, 0.7, 0.3, None])

    def validate(head):
        seen.append(predict(head, samples, feats))
        return next(figures)

    head = CSMHead(384, dropout=0.0)
    history = train_st(head, samples, feats, epochs=4, batch_size=2, lr=1e-3, validate=validate)
    assert [h.get("selected", False) for h in history] == [False, True, False, False]
    assert [h["validation"] for h in history] == [0.1, 0.7, 0.3, None]
    assert seen[1] != seen[3]  # training moved the weights after epoch 2 ...
    got = [v for row in predict(head, samples, feats) for v in row]
    assert got == pytest.approx([v for row in seen[1] for v in row], abs=1e-6)  # ... and they were rolled back


@pytest.mark.skipif(not (WEIGHTS / "head.safetensors").is_file(), reason="embedded CSM weights not trained yet")
def test_committed_csm_keeps_exactly_the_positive_predictions(env, nq5, caplog):
    import json

    from methods.csm.head import load_head
    from methods.csm.method import CSMSelect

    m = CSMSelect(str(WEIGHTS), encoder=ENCODER, dedup_encoder=ENCODER)
    with caplog.at_level("WARNING", logger="harness.artifacts"):
        m.bind(env)
    through = json.loads((WEIGHTS / "manifest.json").read_text())["generator"]["name"]
    assert m.describe()["trained_through"] == through
    # the test generator is not the one the head was trained through: the run says so
    assert through != env.generator.name and f"trained through generator {through!r}" in caplog.text
    comps = m.compress_batch(nq5)
    head, _ = load_head(WEIGHTS)
    enc = PairEncoder(ENCODER)
    kept = dropped = 0
    for ex, c, ul in zip(nq5, comps, m.units(nq5), strict=True):
        # the scores are the committed head's, recomputed here one list at a time (no padding)
        act = ul.active()
        feats = enc.encode([ex.question] * len(act), [ul.texts[i] for i in act])
        with torch.inference_mode():
            scores, _ = head(feats.unsqueeze(0), None)
        assert [c.meta["scores"][i] for i in act] == pytest.approx(scores[0].tolist(), abs=1e-4)
        want = [i for i, s in enumerate(c.meta["scores"]) if s > 0]
        assert c.units == [Unit(i) for i in want]
        assert c.documents == [ex.passages[i].render() for i in want]
        kept, dropped = kept + len(want), dropped + len(ex.passages) - len(want)
    assert kept > 0 and dropped > 0
    assert m.describe()["head"]["encoder"] == ENCODER


@pytest.mark.slow
def test_e2e_gate_is_exact_at_one_and_differentiable(generator, nq5):
    from harness.prompt import build_messages
    from methods.csm.train_e2e import SoftMaskLM, binary_concrete

    ex = nq5[0]
    docs = [" ".join(p.render().split()[:30]) for p in ex.passages[:3]]
    lm = SoftMaskLM(generator.model, generator.tokenizer, "attention")
    e = lm.encode(ex.question, docs, ex.answers[0])
    assert e.ids[: e.prompt_len].tolist() == generator._encode(build_messages(ex.question, docs))
    assert set(e.unit_of.tolist()) == {-1, 0, 1, 2}
    ones = torch.ones(3)
    ref = generator.answer_nll([build_messages(ex.question, docs)], [ex.answers[0]])[0]
    assert float(lm.sufficiency(e, ones)) == pytest.approx(ref, abs=1e-3)
    scores = torch.zeros(3, requires_grad=True)
    m = binary_concrete(scores, generator=torch.Generator().manual_seed(0))
    loss = lm.sufficiency(e, m) + lm.necessity(e, 1 - m)
    loss.backward()
    # under another template (the embedded profile's), each unit's span is still its own document line
    first = SoftMaskLM(generator.model, generator.tokenizer, "attention", "documents_first")
    e = first.encode(ex.question, docs, None)
    assert e.ids.tolist() == generator._encode(build_messages(ex.question, docs, "documents_first"))
    for j, d in enumerate(docs):
        assert f"Doc{j + 1}: {d}".startswith(generator.tokenizer.decode(e.ids[e.unit_of == j]).strip())
    assert torch.isfinite(scores.grad).all() and scores.grad.abs().sum() > 0
    near_zero = torch.tensor([1.0, 1e-9, 1.0])  # unit 1 gated away: attend to units 0 and 2 only
    assert float(lm.sufficiency(e, near_zero)) != pytest.approx(ref, abs=1e-3)


@pytest.mark.slow
def test_eval_mode_reproduces_the_committed_heads_heldout_figures(tmp_path):
    """``mode=eval`` labels (here: reads a copy of the committed label cache, no generator pass) the held-back
    questions and scores an existing head on them: on its own training task it gives the manifest's figures. The
    copy lives in ``tmp_path``: a cache miss appends to it, never to the committed file. On the HotpotQA head,
    the smallest held-back set (99 units; NQ's 708 pair features took ~10 min on two cores)."""
    import json
    import shutil

    from hydra import compose, initialize_config_dir

    from harness.config import apply_profile_env
    from methods.csm.train import run

    conf = Path(__file__).resolve().parent.parent / "conf"
    with initialize_config_dir(str(conf), version_base="1.3"):
        # the committed labels were made by the default (vLLM) generator and prompt: read from the cache, no model loads
        head = WEIGHTS.with_name("csm_st_passage_hotpotqa")
        manifest = json.loads((head / "manifest.json").read_text())
        limit = manifest["config"]["limit"]  # the same train questions, hence the same held-back share
        labels = tmp_path / "labels.jsonl"
        shutil.copy(WEIGHTS.parents[4] / manifest["label_cache"], labels)  # a path from the repository root
        cfg = compose(
            "train/csm",
            overrides=[
                "mode=eval",
                "dataset=hotpotqa",
                f"limit={limit}",
                "progress=false",
                f"eval_out={tmp_path / 'e.json'}",
                f"label_cache={labels}",
            ],
        )
    apply_profile_env(cfg)
    got = run(cfg)["heldout"]
    want = manifest["heldout"]
    assert json.loads((tmp_path / "e.json").read_text())["heldout"] == got
    assert got["questions"] == want["questions"] == round(0.2 * limit) and got["units"] == want["units"]
    for k in ("spearman_pooled", "spearman_per_question_mean", "sign_accuracy", "positive_share_predicted"):
        assert got[k] == pytest.approx(want[k], abs=2e-3), k  # the head is stored in fp16
