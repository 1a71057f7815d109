"""The pages work as written.

- docs/adding-a-method.md: its worked example (module, YAML and test, each a code block headed by its path) is
  written into a temporary tree and keeps the first sentences of real NQ passages, through the compressor interface
  and through the run loop with the YAML on Hydra's search path.
- Every code block of every page (README.md, docs/*.md, leaderboard/README.md, methods/*/README.md): a Python block
  compiles, a YAML block parses, and a shell block names modules, scripts, files and config choices that exist.
- Every internal link of those pages (a relative path, with or without an ``#anchor``) resolves.
- The README is a short page whose test command is the one ``.ci/run`` runs.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.errors import InstantiationException
from markdown_it import MarkdownIt

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


# -- every page: code blocks and links ----------------------------------------------------------------------------

METHOD_PAGES = (REPO / "methods").glob("*/README.md")
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"), REPO / "leaderboard" / "README.md", *METHOD_PAGES])
MD = MarkdownIt("commonmark").enable("table")
CONFIG_GROUPS = ("method", "dataset", "generator", "profile")  # key=a,b on a command line: conf/<key>/a.yaml, ...
NAME = re.compile(r"[\w.\-]+(,[\w.\-]+)*")  # a plain choice or list of choices (no placeholder, no interpolation)


def page_files() -> set[str]:
    """The files the pages write out (code blocks headed by their path, as the worked example's)."""
    return {path for page in PAGES for _, path, _ in BLOCK.findall(page.read_text("utf-8"))}


def exists(path: str) -> bool:
    return (REPO / path).exists() or path in page_files()


def rel(page: Path) -> str:
    return str(page.relative_to(REPO))


def fences(page: Path) -> list[tuple[str, str]]:
    """The page's fenced code blocks: (language, text)."""
    return [(t.info.strip(), t.content) for t in MD.parse(page.read_text("utf-8")) if t.type == "fence"]


def shell_commands(text: str) -> Iterator[list[str]]:
    """The commands of a shell block, as argument lists (continuation lines joined, comments dropped, split at
    ``&&``, ``;`` and ``|``)."""
    for line in text.replace("\\\n", " ").splitlines():
        words: list[str] = []
        for word in [*shlex.split(line, comments=True), "&&"]:
            if word in ("&&", ";", "|", "||"):
                if words:
                    yield words
                words = []
            else:
                words.append(word)


def module_exists(name: str) -> bool:
    """A module of this repository (by its file: importing a package to find a submodule can be heavy), or one
    installed."""
    path = REPO.joinpath(*name.split("."))
    if path.with_suffix(".py").is_file() or (path / "__main__.py").is_file() or (path / "__init__.py").is_file():
        return True
    return name.split(".")[0] not in {"harness", "methods", "leaderboard", "tools", "research", "benchmarks"} and (
        importlib.util.find_spec(name) is not None
    )


def missing_in_command(words: list[str]) -> list[str]:
    """What a command names that does not exist, in the repository or among the files a page writes out: a
    ``python -m`` module, a repository script or file, a config choice (``method=a,b``, ``--config-name x``)."""
    missing = []
    for i, word in enumerate(words):
        prev = words[i - 1] if i else ""
        if prev == "-m" and i >= 2 and words[i - 2].endswith(("python", "python3")) and not module_exists(word):
            missing.append(f"module {word}")
        elif prev == "--config-name" and not exists(f"conf/{word}.yaml"):
            missing.append(f"config {word}")
        elif re.fullmatch(r"(scripts|tests|benchmarks|tools|harness|methods|leaderboard|conf)/[\w/.\-]+", word):
            if not exists(word):
                missing.append(f"file {word}")
        elif "=" in word and word.split("=", 1)[0] in CONFIG_GROUPS:
            key, value = word.split("=", 1)
            if NAME.fullmatch(value):
                missing += [f"{key}={v}" for v in value.split(",") if not exists(f"conf/{key}/{v}.yaml")]
    return missing


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_code_block_of_every_page_holds(page):
    """Python compiles, YAML parses, and every shell command names things that exist."""
    checked = 0
    for lang, text in fences(page):
        if lang == "python":
            compile(text, f"{rel(page)} (code block)", "exec")
        elif lang == "yaml":
            yaml.safe_load(text)
        elif lang in ("bash", "sh", "shell"):
            for words in shell_commands(text):
                assert not missing_in_command(words), f"{rel(page)}: {shlex.join(words)}: {missing_in_command(words)}"
        else:
            continue
        checked += 1
    assert checked or not fences(page) or page.name == "architecture.md", f"{rel(page)}: no checkable code block"


def test_a_shell_block_that_names_a_missing_thing_is_caught():
    (words,) = shell_commands(".venv/bin/python -m harness.no_such -m method=bm25,bm26 dataset=nq  # a comment")
    assert missing_in_command(words) == ["module harness.no_such", "method=bm26"]
    assert missing_in_command(["bash", "scripts/no_such.sh"]) == ["file scripts/no_such.sh"]
    assert missing_in_command(["python", "-m", "methods.csm.train", "--config-name", "train/csm_e2e"]) == []


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (but ``-`` and ``_``), spaces as ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings (a repeated heading's second anchor ends in ``-1``, and so on)."""
    tokens = MD.parse(page.read_text("utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for opening, inline in itertools.pairwise(tokens):
        if opening.type == "heading_open":
            text = "".join(c.content for c in inline.children or [] if c.type in ("text", "code_inline"))
            base = slug(text)
            out.add(base if base not in seen else f"{base}-{seen[base]}")
            seen[base] = seen.get(base, 0) + 1
    return out


def links(page: Path) -> list[str]:
    """Every link target of a page (inline links and images; not code)."""
    out = []
    for token in MD.parse(page.read_text("utf-8")):
        for child in token.children or []:
            if child.type == "link_open":
                out.append(child.attrs["href"])
            elif child.type == "image":
                out.append(child.attrs["src"])
    return out


def broken_links(page: Path) -> list[str]:
    """The page's internal links (not ``scheme:``) whose file, folder or heading anchor is not there."""
    broken = []
    for href in links(page):
        if re.match(r"[a-z][a-z0-9+.\-]*:", href):
            continue
        path, _, anchor = href.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists() or (anchor and target.suffix == ".md" and anchor not in anchors(target)):
            broken.append(href)
    return broken


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_internal_link_resolves(page):
    assert not broken_links(page), f"{rel(page)}: broken links {broken_links(page)}"


def test_the_link_check_catches_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "b.md").write_text("# The `b` page: one\n\n## Again\n\n## Again\n")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md) [ok](b.md#the-b-page-one) [ok](b.md#again-1) [ok](#top) [web](https://example.org/x)\n"
        "[gone](c.md) [no anchor](b.md#again-2) `[in code](d.md)`\n\n# Top\n"
    )
    assert broken_links(page) == ["c.md", "b.md#again-2"]


def test_the_readme_is_short_and_its_test_command_is_what_ci_runs():
    readme = (REPO / "README.md").read_text("utf-8")
    assert len(readme.splitlines()) <= 150
    install_and_run, install_and_test = fences(REPO / "README.md")[0][1].splitlines()
    assert install_and_run.startswith("bash scripts/install.sh && .venv/bin/python -m harness ")
    test_command = install_and_test.split("#")[0].strip()
    assert test_command == "bash scripts/install.sh && .venv/bin/python -m pytest -q"
    assert test_command in (REPO / ".ci" / "run").read_text("utf-8").splitlines()


def test_the_readme_maps_every_docs_page():
    mapped = {(REPO / href.partition("#")[0]).resolve() for href in links(REPO / "README.md")}
    assert not [rel(p) for p in (REPO / "docs").glob("*.md") if p.resolve() not in mapped]
