"""The generator's prompt: the paper's template byte for byte, the candidate templates, the config that picks one,
and the echo flag on real SmolLM2 predictions."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness import metrics as M
from harness.config import register_resolvers
from harness.prompt import PROMPTS, build_messages, get_prompt
from harness.provenance import REPO_ROOT
from harness.runner import key_config
from harness.validate import ConfigError

# CompSelect (000, section 4.3.2), as the paper prints it.
PAPER_SYSTEM = (
    "You are a helpful, respectful, and honest assistant. Answer the question with couple of words using the "
    "provided documents. For example: Question: What is the capital of France? Output: Paris."
)


def compose_cfg(*overrides: str):
    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_the_paper_prompt_is_the_papers_byte_for_byte():
    msgs = build_messages("who wrote hamlet", ["Hamlet\nA play by Shakespeare.", "Globe\nA theatre."])
    assert msgs == [
        {"role": "system", "content": PAPER_SYSTEM},
        {
            "role": "user",
            "content": "Question: who wrote hamlet\nDocuments:\nDoc1: Hamlet\nA play by Shakespeare.\nDoc2: Globe\n"
            "A theatre.",
        },
    ]
    closed_book = build_messages("who wrote hamlet", [])
    assert closed_book[1]["content"] == "Question: who wrote hamlet\nDocuments:"


@pytest.mark.parametrize(
    ("generator", "name"),
    [
        ("llama3_8b_vllm", "llama3-8b-instruct"),
        ("llama33_70b_vllm", "llama3.3-70b-instruct"),
        ("qwen3_14b_vllm", "qwen3-14b"),
    ],
)
def test_the_paper_profile_asks_with_the_papers_prompt_and_answer_rule(generator, name):
    cfg = compose_cfg("profile=paper", f"generator={generator}")
    assert cfg.generator.prompt == "paper" and cfg.generator.answer == "paper"
    assert cfg.generator.name == name  # no prompt suffix: the paper's setup
    assert get_prompt(cfg.generator.prompt).messages("q", ["d"])[0]["content"] == PAPER_SYSTEM


def test_the_embedded_profile_asks_with_the_selected_prompt_and_names_it():
    for generator, base in (
        ("smollm2_vllm", "smollm2-135m-instruct-vllm"),
        ("smollm2_transformers", "smollm2-135m-instruct"),
    ):
        cfg = compose_cfg(f"generator={generator}")
        assert (cfg.generator.prompt, cfg.generator.answer) == ("documents_first", "unlabelled")
        assert cfg.generator.name == f"{base}-documents_first-unlabelled"


def test_the_paper_prompt_stays_selectable_on_the_embedded_profile_under_its_old_name_and_key():
    cfg = compose_cfg("generator.prompt=paper", "generator.answer=paper")
    assert cfg.generator.name == "smollm2-135m-instruct-vllm"  # the archived runs' block and folders
    key = key_config(cfg)
    assert "prompt" not in key["generator"] and "answer" not in key["generator"]  # the archived runs' key


def test_another_prompt_names_the_generator_and_enters_the_key():
    cfg = compose_cfg("generator.prompt=documents_first", "generator.answer=first_line")
    assert cfg.generator.name == "smollm2-135m-instruct-vllm-documents_first-first_line"
    key = key_config(cfg)
    assert key["generator"]["prompt"] == "documents_first" and key["generator"]["answer"] == "first_line"


def test_candidate_templates_render_their_layout():
    docs = ["T\nbody"]
    first = PROMPTS["documents_first"].messages("q?", docs)
    assert first[-1]["content"] == "Documents:\nDoc1: T\nbody\nQuestion: q?"
    assert "For example" not in first[0]["content"]
    turn = PROMPTS["example_turn"].messages("q?", docs)
    assert [m["role"] for m in turn] == ["system", "user", "assistant", "user"]
    assert turn[1]["content"].startswith("Question: What is the capital of France?\nDocuments:\nDoc1: France")
    assert turn[2]["content"] == "Paris"
    assert PROMPTS["answer_cue"].messages("q?", docs)[-1]["content"].endswith("\nAnswer:")


def test_an_unknown_prompt_or_answer_rule_is_a_config_error_naming_the_valid_ones():
    with pytest.raises(ConfigError, match=r"generator\.prompt='nope'; valid: paper, "):
        get_prompt("nope")
    with pytest.raises(ConfigError, match=r"generator\.answer='x'; valid: paper, first_line, unlabelled"):
        M.answer_rule("x")


def test_first_line_keeps_the_first_non_empty_line():
    assert M.first_line("\n\n Paris.\nThe capital of France is Paris.") == "Paris"
    assert M.first_line("") == ""


# Real replies of the embedded generator under documents_first_cue (HotpotQA / TriviaQA train questions), which
# open with the label of the document they answer from.
def test_unlabelled_drops_a_leading_document_label_and_keeps_the_first_line():
    assert M.unlabelled("Doc5: Return of the Vampire") == "Return of the Vampire"
    assert M.unlabelled('Doc5: Danny DeVito\n\nThe movie "The French Connection" (1971)') == "Danny DeVito"
    assert M.unlabelled("Doc3: Junior Tucker\nDoc4: Junior Byles") == "Junior Tucker"
    assert M.unlabelled("Paris. Doc1 says so") == "Paris. Doc1 says so"
    assert M.echo(M.unlabelled("Paris. Doc1 says so"))  # a label elsewhere is still scaffolding


def test_a_singular_document_label_is_an_echo():
    assert M.echo(M.first_line("Document:\nDoc2: The work of the 12th-century scholar"))


# Real SmolLM2-135M-Instruct outputs (vLLM fp32, the paper prompt, full top-5 context) from the published NQ run
# leaderboard/runs/embedded/smollm2-135m-instruct-vllm/nq/full (and, where named, naive / bm25).
ECHOES = [
    (
        "who plays spock in the new star trek movies",
        "Question: who plays spock in the new star trek movies\nDocuments:\nDoc1: Zachary Quinto\nZachary John "
        "Quinto (/",
    ),
    ("what was the capital of ancient egypt", "Question: What was the capital of ancient egypt?\nOutput:"),
    ("who made the movie fifty shades of grey", "Doc5: Jamie Dornan (film)"),
    ("who was the first to sign the declaration", "The capital of France is Paris"),
    ("what type of car is a g wagon", "What type of car is a g wagon?"),  # the question, word for word
    (
        "when does wonder woman come out on blue ray",  # naive
        "The answer to this question is: When does Wonder Woman come out on Blue Ray?",
    ),
]
ANSWERS = [
    (
        "the most common form of megalithic architecture in europe is",  # bm25: the cloze restated, then answered
        "The most common form of megalithic architecture in Europe is portal tomb architecture",
    ),
    (
        "where is the region that stretches between the black and caspian seas",  # copied from a document
        "The region that stretches between the Black Sea and the Caspian Sea is known as the Caucasus Mountains.",
    ),
    (
        "who was the first signatory of the israeli declaration of independence",
        "The first signatory of the Israeli Declaration of Independence was David Ben-Gurion, who signed the",
    ),
    ("what is the capital of france", "The capital of France is Paris"),  # the example, asked for
]


@pytest.mark.parametrize(("question", "prediction"), ECHOES)
def test_echo_flags_a_real_prediction_that_repeats_the_prompt(question, prediction):
    assert M.echo(prediction, question)


@pytest.mark.parametrize(("question", "prediction"), ANSWERS)
def test_echo_spares_a_real_answer_and_a_span_copied_from_the_documents(question, prediction):
    assert not M.echo(prediction, question)


def test_the_example_phrase_is_no_echo_where_the_context_holds_it():
    assert not M.echo("Paris is the capital of France", "which city", "Doc1: Paris is the capital of France.")


def test_summary_counts_echo_and_the_subem_it_earned():
    from harness.records import summarize

    rows = [
        {
            "prediction": p,
            "question": q,
            "subem": s,
            "em": 0.0,
            "f1": 0.0,
            "original_tokens": 10,
            "compressed_tokens": 10,
            "compress_s": 0.0,
            "generate_s": 0.0,
        }
        for (q, p), s in [(ECHOES[0], 1.0), (ECHOES[1], 0.0), (ANSWERS[0], 1.0), (ANSWERS[1], 0.0)]
    ]
    s = summarize(rows)
    assert s["echo"] == 50.0 and s["subem_from_echo"] == 25.0 and s["subem"] == 50.0
    rows[0]["echo"] = False  # a record's own flag wins over the recount
    assert summarize(rows)["echo"] == 25.0


def test_config_generator_prompt_is_part_of_every_generator_config():
    for path in (REPO_ROOT / "conf" / "generator").glob("*.yaml"):
        raw = OmegaConf.load(path)
        assert raw.prompt in PROMPTS and raw.answer in M.ANSWER_RULES, path.name
