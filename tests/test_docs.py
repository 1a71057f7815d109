"""docs/adding-a-method.md works as written: its worked example (module, YAML and test, each a code block headed
by its path) is written into a temporary tree and keeps the first sentences of real NQ passages, through the
compressor interface and through the run loop with the YAML on Hydra's search path."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.errors import InstantiationException

import methods
from harness.config import register_resolvers
from harness.prompt import render_documents
from harness.runner import build_method
from harness.text import split_sentences
from harness.types import Unit
from tests.conftest import REPO, load_slice

DOC = REPO / "docs" / "adding-a-method.md"
BLOCK = re.compile(r"^```(python|yaml)\n# (\S+)\n(.*?)^```", re.S | re.M)  # a block whose first line is its path
MODULE, CONFIG, TEST = "methods/lead_sentences.py", "conf/method/lead_sentences.yaml", "tests/test_lead_sentences.py"


def doc_files() -> dict[str, str]:
    """The code blocks of the page headed by a file path, by path."""
    return {path: f"# {path}\n{body}" for _, path, body in BLOCK.findall(DOC.read_text("utf-8"))}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Iterator[Path]:
    """The page's files under a temporary root; its ``methods/`` is searched for ``methods.*`` modules."""
    root = tmp_path_factory.mktemp("doc")
    for rel, text in doc_files().items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, "utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(methods, "__path__", [*methods.__path__, str(root / "methods")])
        yield root
        sys.modules.pop("methods.lead_sentences", None)


@pytest.fixture(scope="module")
def nq3():
    return load_slice("nq", 3)


def searchpath(root: Path) -> str:
    return f"hydra.searchpath=[file://{root / 'conf'}]"


def compose_method(root: Path, *overrides: str):
    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=[searchpath(root), "method=lead_sentences", *overrides]).method


def test_the_page_holds_the_worked_examples_files():
    files = doc_files()
    assert {MODULE, CONFIG, TEST} <= set(files)
    cfg = yaml.safe_load(files[CONFIG])
    assert cfg["_target_"] == "methods.lead_sentences.LeadSentences" and cfg["name"] == Path(CONFIG).stem
    assert "from harness.text import" in files[MODULE]  # the shared splitter, not a private one


def _check_leads(example, documents: list[str], units: list[Unit], k: int) -> None:
    """Each passage gives one document: a prefix of its text that ends where a sentence ends."""
    assert len(documents) == len(example.passages)
    for pi, (p, doc) in enumerate(zip(example.passages, documents, strict=True)):
        text = " ".join(p.text.split())
        rest = text[len(doc) :]
        assert text.startswith(doc) and doc and (rest == "" or (rest[0] == " " and doc[-1] in ".!?\"')")), doc
        n = min(k, len(split_sentences(p.text)))
        assert doc == " ".join(split_sentences(p.text)[:k])
        assert [u for u in units if u.passage == pi] == [Unit(pi, si) for si in range(n)]


def test_lead_sentences_keeps_the_first_sentences(tree, nq3):
    one = build_method(compose_method(tree))
    two = build_method(compose_method(tree, "method.k=2"))
    assert type(one).__module__ == "methods.lead_sentences" and one.name == "lead_sentences"
    assert one.describe() == {"name": "lead_sentences", "k": 1, "with_titles": False}
    for ex, c1, c2 in zip(nq3, one.compress_batch(nq3), two.compress_batch(nq3), strict=True):
        _check_leads(ex, c1.documents, c1.units, 1)
        _check_leads(ex, c2.documents, c2.units, 2)
        assert all(b.startswith(a) for a, b in zip(c1.documents, c2.documents, strict=True))
        assert sum(map(len, c1.documents)) < sum(map(len, c2.documents)) < sum(len(p.text) for p in ex.passages)
    with pytest.raises(InstantiationException, match="k must be an integer >= 1"):
        build_method(compose_method(tree, "method.k=0"))


def test_the_pages_own_test_passes(tree, nq3):
    spec = importlib.util.spec_from_file_location("doc_test_lead_sentences", tree / TEST)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.test_keeps_the_first_k_sentences_of_each_passage(nq3)


def test_lead_sentences_runs_through_the_harness(tree, nq3, tmp_path):
    import harness

    ev = harness.evaluate(
        "lead_sentences",
        "nq",
        limit=3,
        overrides=[searchpath(tree)],
        latency={"samples": 0},
        results_dir=str(tmp_path),
        progress=False,
    )
    assert (
        ev.folder
        == tmp_path / "embedded" / "smollm2-135m-instruct-vllm-documents_first-unlabelled" / "nq" / "lead_sentences"
    )
    assert ev.summary["n"] == 3 and ev.summary["method_info"]["k"] == 1
    leads = build_method(compose_method(tree)).compress_batch(nq3)
    assert list(ev.records["context"]) == [render_documents(c.documents) for c in leads]
    assert list(ev.records["units"]) == [[[u.passage, u.sentence] for u in c.units] for c in leads]
    assert (ev.records["compressed_tokens"] < ev.records["original_tokens"]).all()
