"""Every shipped method variant (and generator) composes under both profiles, and every ``_target_`` in it, nested
ones included, imports to a callable that accepts the keys its YAML gives it. Nothing is instantiated: no weights
load, so the paper profile's checkpoints are checked here too."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import get_object
from omegaconf import OmegaConf

from harness.config import register_resolvers
from harness.runner import CONFIG_ONLY
from tests.conftest import REPO

PROFILES = ("embedded", "paper")
METHODS = sorted(p.stem for p in (REPO / "conf" / "method").glob("*.yaml"))
GENERATORS = sorted(p.stem for p in (REPO / "conf" / "generator").glob("*.yaml"))


def targets(node: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(dotted path, node) of every mapping with a ``_target_`` under ``node``."""
    if isinstance(node, dict):
        if "_target_" in node:
            yield where, node
        for k, v in node.items():
            yield from targets(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from targets(v, f"{where}[{i}]")


def target_problems(node: dict[str, Any], where: str, set_by_runner: tuple[str, ...] = ()) -> list[str]:
    """What ``hydra.utils.instantiate`` would fail on, without calling anything: a ``_target_`` that does not
    import or is not callable, or keys its signature does not take (``set_by_runner``: top-level keys the run
    loop consumes itself, e.g. a method's ``name``)."""
    problems = []
    for path, spec in targets(node, where):
        try:
            obj = get_object(spec["_target_"])
        except Exception as e:
            problems.append(f"{path}._target_={spec['_target_']}: does not import ({type(e).__name__}: {e})")
            continue
        if not callable(obj):
            problems.append(f"{path}._target_={spec['_target_']}: not callable")
            continue
        skip = set_by_runner if spec is node else ()
        kwargs = {k: v for k, v in spec.items() if not k.startswith("_") and k not in skip}
        try:
            sig = inspect.signature(obj)
        except (TypeError, ValueError):
            continue  # a builtin without a signature: nothing to check
        try:
            sig.bind(*spec.get("_args_", []), **kwargs)
        except TypeError as e:
            problems.append(f"{path}._target_={spec['_target_']}: {e}")
    return problems


def composed(profile: str, *overrides: str) -> dict[str, Any]:
    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"profile={profile}", *overrides])
    return OmegaConf.to_container(cfg, resolve=True)


@pytest.mark.slow
@pytest.mark.parametrize("profile", PROFILES)
def test_every_method_variant_resolves_to_importable_targets(profile):
    assert len(METHODS) > 20
    problems = []
    for m in METHODS:
        method = composed(profile, f"method={m}")["method"]
        if method.get("name") != m:
            problems.append(f"{m}: name={method.get('name')!r} (must be the file's stem: it names the run folder)")
        if "_target_" not in method:
            problems.append(f"{m}: no _target_")
        problems += target_problems(method, f"{m}:method", set_by_runner=CONFIG_ONLY)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("profile", PROFILES)
def test_every_generator_resolves_to_an_importable_target(profile):
    problems = []
    for g in GENERATORS:
        problems += target_problems(composed(profile, f"generator={g}")["generator"], f"{g}:generator")
    assert not problems, "\n".join(problems)


def test_broken_targets_are_reported():
    node = {
        "_target_": "methods.rerank.RerankSelect",
        "name": "x",
        "top_k": 1,
        "granulrity": "passage",  # a misspelt knob
        "scorer": {"_target_": "methods.scorers.BM25Scorer", "k1": 1.5},
        "stages": [{"_target_": "methods.nowhere.Stage"}, {"_target_": "methods.rerank.GRANULARITIES"}],
    }
    problems = target_problems(node, "m", set_by_runner=CONFIG_ONLY)
    assert len(problems) == 3, problems
    assert "unexpected keyword argument 'granulrity'" in problems[0]
    assert problems[1].startswith("m.stages[0]._target_=methods.nowhere.Stage: does not import")
    assert problems[2] == "m.stages[1]._target_=methods.rerank.GRANULARITIES: not callable"
    unset = {"_target_": "methods.rerank.RerankSelect", "name": "x", "top_k": 1}
    assert target_problems(unset, "m") == [  # a missing argument, and `name` where the runner does not take it
        "m._target_=methods.rerank.RerankSelect: missing a required argument: 'scorer'"
    ]
    unset["scorer"] = None
    assert target_problems(unset, "m") == [
        "m._target_=methods.rerank.RerankSelect: got an unexpected keyword argument 'name'"
    ]


@pytest.mark.slow
def test_every_variant_targets_a_method_module():
    """A variant's ``_target_`` is a single-file method (``methods/<name>.py``) or a method package's runtime
    (``methods/<name>/method.py``), never a training or analysis module nor a package's ``__init__``."""
    problems = []
    for m in METHODS:
        target = composed("embedded", f"method={m}")["method"]["_target_"]
        parts = target.split(".")
        single = len(parts) == 3 and (REPO / "methods" / f"{parts[1]}.py").is_file()
        runtime = len(parts) == 4 and parts[2] == "method" and (REPO / "methods" / parts[1] / "method.py").is_file()
        if parts[0] != "methods" or not (single or runtime):
            problems.append(f"{m}: _target_={target}")
    assert not problems, "\n".join(problems)
