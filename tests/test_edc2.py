"""EDC²-RAG (paper 004): Algorithm 1 on hand-made embeddings, the summary filter, and the compressor end to
end: real MiniLM + SmolLM2, and an OpenAI-compatible endpoint played by a local HTTP server (the API cannot be
reached here) so that which summaries survive is known. ``ServerLLM`` against a real vLLM server:
tests/test_openai_server.py."""

from __future__ import annotations

import json
from typing import ClassVar

import numpy as np
import pytest

from harness.types import Example, Passage, Unit
from methods.edc2.cluster import dynamic_clusters
from methods.edc2.llm import LocalLLM, ServerLLM
from methods.edc2.method import EDC2
from methods.edc2.prompts import COMPRESS, ESCAPE, compress_prompt, keep_summary
from tests.http_stub import JSONHandler, serve

Q = np.array([1.0, 0.0, 0.0])
DOCS = np.array(
    [
        [0.2, 1.0, 0.0],  # 0: off-topic, close to 2
        [1.0, 0.1, 0.0],  # 1: most question-similar -> first root
        [0.1, 1.0, 0.05],  # 2
        [0.9, 0.0, 0.5],  # 3: second most question-similar, close to 1
        [0.0, 0.2, 1.0],  # 4: close to 5
        [0.3, 0.0, 1.0],  # 5: the most question-similar after 1 and 3
    ]
)


def test_paper_clustering_roots_at_query_similar_docs_and_doubles():
    # C1: root 1 + its nearest (3), tau = 2. C2: root 5 (best q-sim left), size min(2*2, cap=3) = 3:
    # 5, 4, 2.
    # C3: what is left.
    assert dynamic_clusters(Q, DOCS, tau=2, cap=3) == [[1, 3], [2, 4, 5], [0]]
    assert dynamic_clusters(Q, DOCS, tau=2, cap=20) == [[1, 3], [0, 2, 4, 5]]


def test_code_variant_roots_in_retrieval_order_with_root_plus_length():
    # root 0 + 1 nearest (2); length 2: root 1 + 3 and 5; length 4: root 4 alone.
    assert dynamic_clusters(Q, DOCS, tau=1, variant="code") == [[0, 2], [1, 3, 5], [4]]


@pytest.mark.parametrize(
    ("n", "tau", "paper", "code"),
    [
        (5, 3, [3, 2], [4, 1]),
        (20, 3, [3, 6, 11], [4, 7, 9]),
        (100, 3, [3, 6, 12, 20, 20, 20, 19], [4, 7, 13, 21, 21, 21, 13]),
        (10, 1, [1, 2, 4, 3], [2, 3, 5]),
    ],
)
def test_cluster_sizes_match_the_worked_table(n, tau, paper, code):
    rng = np.random.default_rng(n)
    q, d = rng.normal(size=8), rng.normal(size=(n, 8))
    for variant, want in (("paper", paper), ("code", code)):
        cl = dynamic_clusters(q, d, tau=tau, cap=20, variant=variant)
        assert [len(c) for c in cl] == want
        assert sorted(i for c in cl for i in c) == list(range(n))


def test_summary_saying_nothing_to_extract_is_dropped():
    assert not keep_summary("No content to extract.")
    assert not keep_summary("  no content to extract")
    assert not keep_summary("I'm sorry, the documents do not say.")
    assert not keep_summary("Which Paris do you mean?")
    assert keep_summary("Which Paris do you mean?", drop_question_marks=False)
    assert not keep_summary("   ")
    assert keep_summary("The Eiffel Tower was completed in 1889.")


def test_prompt_is_the_papers_verbatim_with_numbered_documents():
    p = compress_prompt("who built it", ["A: x", "B: y"])
    assert p == COMPRESS.format(query="who built it", docs="1.A: x\n2.B: y", escape=ESCAPE)
    assert 'please output "No content to extract"' in p and p.endswith("##Summarized Docs##:\n")
    assert compress_prompt("q", ["d"], ["ex one"]).startswith("##Example 1##:\nex one\n##Instruction##:")


def test_the_no_escape_variant_leaves_out_only_the_escape_line():
    from harness.config import compose_config
    from harness.runner import build_method

    paper, plain = compress_prompt("q", ["A: x"]), compress_prompt("q", ["A: x"], escape_line=False)
    assert ESCAPE in paper and "No content" not in plain and paper.replace(ESCAPE, "") == plain
    method = build_method(compose_config(overrides=["method=edc2_no_escape"]).method)
    assert method.name == "edc2_no_escape" and method.escape_line is False
    assert method.describe()["escape_line"] is False
    default = build_method(compose_config(overrides=["method=edc2"]).method)
    assert default.escape_line and "escape_line" not in default.describe()  # the default's records unchanged


@pytest.mark.slow
def test_edc2_end_to_end_on_embedded_models(env, nq5):
    llm = LocalLLM("embedded:smollm2-135m-instruct", engine="vllm", dtype="float32", max_new_tokens=24)
    m = EDC2(llm, "embedded:all-minilm-l6-v2")
    m.bind(env)
    comps = m.compress_batch(nq5[:2])
    for ex, c in zip(nq5[:2], comps, strict=True):
        assert [len(cl) for cl in c.meta["clusters"]] == [3, 2]  # top-5, tau = 3
        assert c.meta["llm_calls"] == 2 == len(c.meta["summaries"])
        assert c.meta["kept"] == [keep_summary(s) for s in c.meta["summaries"]]
        if c.meta["fallback"]:
            assert c.documents == [p.render() for p in ex.passages] and c.units == [Unit(i) for i in range(5)]
        else:
            assert c.documents == [s for s, k in zip(c.meta["summaries"], c.meta["kept"], strict=True) if k]
            assert c.units is None


class _Endpoint(JSONHandler):
    replies: ClassVar[list[tuple[str, str]]] = []
    seen: ClassVar[list[dict]] = []

    def do_POST(self):
        body = self.read_json()
        type(self).seen.append({"auth": self.headers.get("Authorization"), "body": body})
        prompt = body["messages"][0]["content"]
        reply = next(r for key, r in type(self).replies if key in prompt)
        self.send_json({"choices": [{"message": {"content": reply}}]})


@pytest.fixture()
def endpoint():
    with serve(_Endpoint) as url:
        yield url


def test_dropped_summaries_never_reach_the_generator_and_all_dropped_falls_back(env, endpoint, monkeypatch):
    monkeypatch.setenv("EDC2_TEST_KEY", "sk-test-123")
    ps = tuple(Passage(f"Text {i} about topic {i}.", f"T{i}") for i in range(5))
    ex_a = Example("a", "question alpha", ("x",), ps)
    ex_b = Example("b", "question beta", ("y",), ps)
    # alpha: the first cluster extracts, the second says nothing; beta: nothing anywhere -> raw passages
    _Endpoint.replies = [
        ("question alpha\n##Documents##:\n 1.T0", "Topic 0 is described in text 0."),
        ("question alpha", "No content to extract."),
        ("question beta", "No content to extract"),
    ]
    _Endpoint.seen = []
    llm = ServerLLM("gpt-3.5-turbo-1106", base_url=endpoint, api_key_env="EDC2_TEST_KEY")
    m = EDC2(llm, "embedded:all-minilm-l6-v2", variant="code")  # code variant: roots in retrieval order
    m.bind(env)
    a, b = m.compress_batch([ex_a, ex_b])
    assert a.meta["clusters"][0][0] == 0 and a.meta["llm_calls"] == 2
    assert a.documents == ["Topic 0 is described in text 0."] and a.meta["kept"] == [True, False]
    assert not a.meta["fallback"]
    assert b.meta["fallback"] and b.documents == [p.render() for p in ps]
    # the summary averages the per-question diagnostics: 2 calls each, one fallback in two, 1 summary kept in 4
    from harness.records import aggregate_diagnostics

    diag = aggregate_diagnostics([{"meta": a.meta}, {"meta": b.meta}])
    assert {k: v["mean"] for k, v in diag.items()} == {"fallback": 0.5, "llm_calls": 2.0, "summaries_kept": 0.5}
    assert len(_Endpoint.seen) == 4 and all(s["auth"] == "Bearer sk-test-123" for s in _Endpoint.seen)
    assert all(s["body"]["temperature"] == 0 for s in _Endpoint.seen)
    assert "sk-test-123" not in json.dumps(m.describe())
