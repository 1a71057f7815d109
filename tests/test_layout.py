"""The shape of the code, read with ``ast`` (nothing is imported): no import cycle and no function over 100 lines
in harness/, methods/, leaderboard/ and tools/; one layout for every method; models load only in the model
layer; nothing in the core or a method imports another method or research/."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO

ROOTS = ("harness", "methods", "leaderboard", "tools")
MAX_FUNCTION_LINES = 100
ANALYSIS_SUFFIXES = ("_probe.py", "_cv.py", "_curve.py")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(roots: tuple[str, ...] = ROOTS) -> dict[str, Path]:
    """Every module under ``roots`` by dotted name (a package by its own name)."""
    return {module_name(p): p for root in roots for p in sorted((REPO / root).rglob("*.py"))}


def imported(name: str, path: Path, known: dict[str, Path] | None = None) -> Iterator[str]:
    """The dotted names a module imports, function-local imports included, relative ones made absolute:
    ``import a.b`` gives ``a.b``; ``from a import b`` gives ``a.b`` when that is a module of ``known``, else
    ``a`` (``b`` is a name in it)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for a in node.names:
                sub = f"{base}.{a.name}"
                yield sub if known is not None and sub in known else base


def import_graph(roots: tuple[str, ...] = ROOTS) -> dict[str, set[str]]:
    """Module -> the modules under ``roots`` it imports (see ``imported``). A parent package's ``__init__``,
    which Python runs before a submodule, is no edge of its own: only what a module names is."""
    mods = modules(roots)
    return {name: {t for t in imported(name, path, mods) if t in mods} - {name} for name, path in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert len(graph) > 100 and "harness.lm.loading" in graph["harness.lm.instances"]
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle_through_a_function_local_import():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def long_functions(roots: tuple[str, ...] = ROOTS, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``path:line name (n lines)`` of every function or method longer than ``limit`` lines (``def`` line to
    last line; decorators not counted)."""
    out = []
    for path in modules(roots).values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    out.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_no_function_is_over_100_lines():
    assert long_functions() == []
    assert long_functions(("tools",), limit=20)  # the check sees functions at all


def test_methods_hold_no_one_off_analysis():
    found = [str(p.relative_to(REPO)) for p in (REPO / "methods").rglob("*.py") if p.name.endswith(ANALYSIS_SUFFIXES)]
    assert found == []


def test_every_method_package_has_the_same_layout():
    """A package per method of more than one file: ``method.py`` is its runtime, training modules are named
    ``train*.py``, trained weights live in its own ``artifacts/``; nothing else under methods/ holds artifacts."""
    packages = sorted(p.parent for p in (REPO / "methods").glob("*/__init__.py"))
    assert {p.name for p in packages} >= {"compselect", "csm", "edc2", "exit"}
    for pkg in packages:
        assert (pkg / "method.py").is_file(), pkg
        trainers = {p.stem for p in pkg.glob("*.py") if "train" in p.stem}
        assert all(t == "train" or t.startswith("train_") for t in trainers), (pkg, trainers)
    holders = {p.parent.name for p in (REPO / "methods").rglob("artifacts") if p.is_dir()}
    assert holders <= {p.name for p in packages} and "exit" in holders
    assert not list((REPO / "methods").glob("*_artifacts"))


def first_party(name: str) -> str | None:
    top = name.split(".")[0]
    return top if top in (*ROOTS, "research", "benchmarks", "tests") else None


def test_methods_import_only_the_core_and_their_own_package_and_nothing_imports_research():
    problems = []
    mods = modules()
    for name, path in mods.items():
        for target in imported(name, path, mods):
            top = first_party(target)
            if top in ("research", "benchmarks", "tests"):
                problems.append(f"{name} imports {target}")
            elif name.startswith("harness") and top == "methods":
                problems.append(f"{name} (the core) imports {target}")
            elif name.startswith("methods.") and top == "methods":
                own = ".".join(name.split(".")[:2])
                if target != "methods" and not (target == own or target.startswith(own + ".")):
                    problems.append(f"{name} imports another method: {target}")
    assert problems == []


LOADERS = ("SentenceTransformer", "CrossEncoder")


def model_loads(path: Path) -> Iterator[int]:
    """Lines that load weights, a tokenizer or a config: ``X.from_pretrained(...)`` (but for a PEFT adapter put
    onto a model already loaded), ``SentenceTransformer(...)``, ``CrossEncoder(...)``."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "from_pretrained":
            owner = f.value.id if isinstance(f.value, ast.Name) else None
            if owner != "PeftModel":
                yield node.lineno
        elif isinstance(f, ast.Name) and f.id in LOADERS:
            yield node.lineno


def test_models_load_only_through_the_model_layer():
    outside = [
        f"{path.relative_to(REPO)}:{line}"
        for name, path in modules().items()
        if not name.startswith("harness.lm")
        for line in model_loads(path)
    ]
    assert outside == []
    assert list(model_loads(REPO / "harness" / "lm" / "encoders.py"))  # the check sees loads at all


def test_the_model_layer_package_only_re_exports():
    path = REPO / "harness" / "lm" / "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert len(path.read_text(encoding="utf-8").splitlines()) < 60
    kinds = {type(node).__name__ for node in tree.body}
    assert kinds <= {"Expr", "ImportFrom", "Import", "Assign"}, kinds  # docstring, imports, __all__


def test_no_tracked_file_is_over_5_mb():
    """Weights, caches and data stay out of git, and the published page stays small enough to open and diff: the
    snapshot's `index.html` embeds every headline row's answers for the compare view, so it grows with the block."""
    import subprocess

    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    paths = [REPO / p for p in tracked.decode().split("\0") if p]
    big = [
        f"{p.relative_to(REPO)} ({p.stat().st_size / 1e6:.1f} MB)"
        for p in paths
        if p.is_file() and p.stat().st_size > 5e6
    ]
    assert not big, big


def test_every_view_module_declares_its_view_and_publish_imports_none_of_them():
    """A new view is one module of leaderboard/views/ with its ``View`` listed in ``views.VIEWS``; ``publish``
    reaches the views only through that list (so it does not grow with them)."""
    folder = REPO / "leaderboard" / "views"
    init = ast.parse((folder / "__init__.py").read_text())
    [views] = [n.value for n in init.body if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "VIEWS"]
    listed = {(e.value.id, e.attr) for e in views.elts if isinstance(e, ast.Attribute)}
    assert len(listed) == len(views.elts)
    for path in sorted(folder.glob("*.py")):
        if path.name == "__init__.py":
            continue
        body = ast.parse(path.read_text()).body
        names = {t.id for n in body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        declared = {(path.stem, n) for n in names if n.endswith("VIEW")}
        assert declared and declared <= listed, f"{path.name}: {sorted(declared - listed) or 'no VIEW'}"
    publish = set(imported("leaderboard.publish", REPO / "leaderboard" / "publish.py", modules()))
    assert not {m for m in publish if m.startswith("leaderboard.views.")}, publish
