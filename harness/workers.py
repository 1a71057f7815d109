"""What a job needs when a Hydra launcher runs it in a worker process (``hydra/launcher=joblib|ray|submitit_*``).

Each worker loads its own generator (one engine per process, reused by the jobs the worker runs next). Two fixes
for joblib's ``loky`` workers, harmless elsewhere:

- loky makes ``loky`` the process's start method, and a process that vLLM spawns (its engine core, in vLLM's
  process layout: a GPU, or ``VLLM_ENABLE_V1_MULTIPROCESSING=1`` on a CPU) re-reads the start method by name,
  where only the standard ones exist: the job switches back to ``spawn``;
- a multiprocessing child joins its own children at exit and runs no ``atexit`` hook (it ends with
  ``os._exit``; the model layer's at-exit release never runs there), so an engine left open would keep the
  worker, and the launcher waiting on it, alive forever: the worker closes its language models first.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing import util

_DONE: dict[str, bool] = {}


def plain_start_method() -> None:
    """``spawn`` as the start method where a launcher's worker set one of its own (loky)."""
    if multiprocessing.get_start_method(allow_none=True) not in (None, "fork", "spawn", "forkserver"):
        multiprocessing.set_start_method("spawn", force=True)


def _release_models() -> None:
    import sys

    if "harness.lm" in sys.modules:
        sys.modules["harness.lm"].release()


def prepare_worker() -> None:
    """Call at the start of a job: the start-method fix, and (once, in a multiprocessing child) closing the
    process's language models when it exits, before multiprocessing joins the engines' processes."""
    plain_start_method()
    if multiprocessing.parent_process() is not None and not _DONE.get("release"):
        util.Finalize(None, _release_models, exitpriority=100)
        _DONE["release"] = True
