"""``generator=openai_server`` against a real vLLM OpenAI-compatible server with SmolLM2 (fp32), started here on
127.0.0.1 on a free port and requiring a recognisable fake API key: the same greedy answers as the in-process vLLM
engine; a server killed mid-run leaves a folder that a re-run against a fresh server (another port) completes to
the same records; the key reaches no file and no log. Retries on 5xx/429, the concurrency limit and key
scrubbing are checked against small local HTTP servers (a real server cannot be made to answer 503 on demand)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import ClassVar

import pytest

from harness.lm.server import ServerClient, ServerError
from tests.conftest import LM, REPO
from tests.http_stub import JSONHandler, chat_reply, serve

KEY = "sk-harness-FAKE-5d0c3e9a71b24f68"  # recognisable: grepped for in every file and log of the runs
MODEL = "smollm2-135m-instruct"  # the served model's name
LIMIT, BATCH = 6, 2
LOGS: list[str] = []  # stdout and stderr of every harness run here


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VLLMServer:
    """``python -m vllm.entrypoints.openai.api_server`` with SmolLM2 in fp32 and the in-process engine's settings
    (eager, prefix caching, KV blocks of 32, every core bound), on a free port, requiring ``KEY``."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.proc, self.port = folder, None, 0
        self.log: Path | None = None
        self.fresh: VLLMServer | None = None
        self.killed: tuple[set[str], set[int]] = (set(), set())  # segments its killed processes mapped, their pids

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def launch(self) -> None:
        """Start the server process on a free port (``wait`` until it answers)."""
        from harness.lm.models import resolve
        from harness.lm.vllm_engine import CPU_BLOCK_SIZE, cpu_environment

        self.port = free_port()
        cmd = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            resolve(LM).path,
            "--served-model-name",
            MODEL,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            "float32",
            "--max-model-len",
            "4096",
            "--block-size",
            str(CPU_BLOCK_SIZE),
            "--enable-prefix-caching",
            "--enforce-eager",
        ]
        env = {**os.environ, **cpu_environment(None), "VLLM_API_KEY": KEY, "HF_HUB_OFFLINE": "1"}
        self.log = self.folder / "server.log"
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.folder, start_new_session=True
            )

    def wait(self, wait_s: float = 900) -> None:
        """Block until the launched server answers ``/health``."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < wait_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM server exited: {self.log}\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(1)
        self.kill()
        raise RuntimeError(f"vLLM server not healthy after {wait_s} s: {self.log}")

    def take_over_fresh(self) -> None:
        """Become ``self.fresh``, a server launched beside this one that no run has used (another process, port)."""
        self.fresh.wait()
        self.proc, self.port, self.log = self.fresh.proc, self.fresh.port, self.fresh.log

    def kill(self) -> None:
        """SIGKILL the server's process group (the API server and its engine core), as a crash would, then remove
        the shared-memory segments the crash leaves in ``/dev/shm`` (its resource tracker died with it)."""
        from harness.lm.vllm_engine import process_segments, remove_segments

        if self.proc is not None and self.proc.poll() is None:
            names, pids = process_segments([self.proc.pid])
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)
            remove_segments(names, pids, untrack=False)
            self.killed = (self.killed[0] | names, self.killed[1] | pids)

    def left_in_shm(self) -> list[str]:
        """What of its killed processes' shared memory is still in ``/dev/shm`` (the kinds vLLM and loky make)."""
        from harness.lm.vllm_engine import segments_left

        return segments_left(*self.killed)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("vllm")
    srv, fresh = VLLMServer(tmp_path_factory.mktemp("vllm-server")), VLLMServer(tmp_path_factory.mktemp("fresh"))
    # the fresh server of the killed-run test starts beside the first one: their start-ups (mostly one core each:
    # imports, weights) overlap instead of adding up (~30 s of this module's ~2 minutes)
    srv.launch()
    fresh.launch()
    srv.fresh = fresh
    try:
        srv.wait()
        yield srv
    finally:
        srv.kill()
        fresh.kill()


def harness_cmd(results: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "harness",
        "method=full",
        "dataset=nq",
        f"limit={LIMIT}",
        f"batch_size={BATCH}",
        "latency.samples=0",
        "progress=false",
        f"results_dir={results}",
        *overrides,
    ]


def harness_env(key: str | None = KEY) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    return {**env, "HF_HUB_OFFLINE": "1", **({"OPENAI_API_KEY": key} if key else {})}


def run_harness(results: Path, *overrides: str) -> subprocess.CompletedProcess:
    r = subprocess.run(
        harness_cmd(results, *overrides), cwd=REPO, capture_output=True, text=True, timeout=900, env=harness_env()
    )
    LOGS.extend([r.stdout, r.stderr])
    return r


def records(results: Path) -> list[dict]:
    [path] = results.rglob("predictions.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def served(url: str, *more: str) -> tuple[str, ...]:
    return ("generator=openai_server", f"generator.base_url={url}", *more)


@pytest.fixture(scope="module")
def uninterrupted(server, tmp_path_factory):
    """An uninterrupted run through the server (with a 2-example latency pass, so latency.jsonl exists too)."""
    results = tmp_path_factory.mktemp("served")
    r = run_harness(results, *served(server.url), "latency.samples=2", "latency.warmup=1")
    assert r.returncode == 0, r.stderr[-3000:]
    return results


# -- (a) the same greedy answers as the in-process engine ----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.vllm
def test_served_answers_equal_the_in_process_vllm_engine(uninterrupted, tmp_path):
    """fp32 on both sides, same engine settings: every answer, prompt length and CR token count is the same. The
    server's completion count includes the end-of-turn token when the answer stopped (usage counts it; the model
    layer does not)."""
    import harness

    # in this process: the default generator's engine is shared with the other tests that ran it
    harness.evaluate(
        "full",
        "nq",
        limit=LIMIT,
        # the server generator's prompt (the paper's) on both sides
        overrides=[
            "generator=smollm2_vllm",
            "generator.dtype=float32",
            "generator.prompt=paper",
            "generator.answer=paper",
        ],
        batch_size=BATCH,
        latency={"samples": 0},
        progress=False,
        results_dir=str(tmp_path),
    )
    local, remote = records(tmp_path), records(uninterrupted)
    assert [x["id"] for x in remote] == [x["id"] for x in local] and len(local) == LIMIT
    for a, b in zip(local, remote, strict=True):
        assert b["raw_output"] == a["raw_output"] and b["prediction"] == a["prediction"], a["id"]
        for k in ("prompt_tokens", "original_tokens", "compressed_tokens", "subem", "f1"):
            assert b[k] == a[k], (a["id"], k)
        stopped = a["completion_tokens"] < 32
        assert b["completion_tokens"] == a["completion_tokens"] + stopped, a["id"]
    summary = json.loads(next(uninterrupted.rglob("summary.json")).read_text())
    assert summary["generator_info"]["backend"] == "openai_server" and summary["n"] == LIMIT
    run = json.loads(next(uninterrupted.rglob("run.json")).read_text())
    assert run["servers"] == [{"base_url": summary["generator_info"]["server"]["base_url"], "model": MODEL}]
    assert "base_url" not in run["config"]["generator"]  # where calls go is not part of the run's key


@pytest.mark.vllm
def test_token_counts_through_vllm_tokenize_equal_the_local_tokenizer(server, uninterrupted, monkeypatch):
    from harness.generators.openai_server import OpenAIServerGenerator

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    g = OpenAIServerGenerator("s", MODEL, server.url, tokenizer="server")
    for rec in records(uninterrupted)[:3]:
        assert g.count_tokens(rec["context"]) == rec["compressed_tokens"] > 100


# -- (b) a server that dies mid-run --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def interrupted(server, uninterrupted, tmp_path_factory):
    """A run whose server is killed once the first batch is on disk, then the same command against a fresh
    server on another port. Returns the results folder, both processes' outputs and the records left between."""
    results = tmp_path_factory.mktemp("killed")
    fast_fail = ("generator.retries=2", "generator.backoff_s=0.2")
    out, err = results.parent / "killed.out", results.parent / "killed.err"
    with out.open("w") as fo, err.open("w") as fe:
        proc = subprocess.Popen(
            harness_cmd(results, *served(server.url, *fast_fail)),
            cwd=REPO,
            stdout=fo,
            stderr=fe,
            text=True,
            env=harness_env(),
        )
        t0 = time.monotonic()
        while time.monotonic() - t0 < 600 and proc.poll() is None:
            preds = list(results.rglob("predictions.jsonl"))
            if preds and preds[0].read_text().count("\n") >= BATCH:
                server.kill()
                break
            time.sleep(0.02)
        rc = proc.wait(timeout=600)
    first = (rc, out.read_text(), err.read_text())
    LOGS.extend(first[1:])
    [path] = results.rglob("predictions.jsonl")
    left = path.read_bytes()
    server.take_over_fresh()  # a fresh server (launched beside the first, never used), another port
    second = run_harness(results, *served(server.url, *fast_fail))
    return results, first, left, second


@pytest.mark.slow
@pytest.mark.vllm
def test_killed_server_fails_in_one_line_and_a_rerun_resumes_to_the_same_records(interrupted, uninterrupted, server):
    results, (rc, _, stderr), left, second = interrupted
    # the crash's shared memory (vLLM's queues, loky's semaphores) was found and removed, not left in /dev/shm
    assert server.killed[1] and not server.left_in_shm()
    assert rc == 2, stderr[-3000:]
    [line] = stderr.strip().splitlines()[-1:]
    assert line.startswith("error: http://127.0.0.1:") and "/v1/chat/completions: failed after 3 tries" in line
    assert "Traceback" not in stderr
    # nothing half-written: whole lines only, the first batch at least, not the whole run
    assert left.endswith(b"\n")
    kept = [json.loads(x) for x in left.decode().splitlines()]
    assert BATCH <= len(kept) < LIMIT and len(kept) % BATCH == 0
    assert second.returncode == 0, second.stderr[-3000:]
    resumed, reference = records(results), records(uninterrupted)
    assert resumed[: len(kept)] == kept  # the records already there are kept as they were
    assert [r["id"] for r in resumed] == [r["id"] for r in reference]  # each example once, none lost
    fields = (
        "prediction",
        "raw_output",
        "context",
        "prompt_tokens",
        "completion_tokens",
        "original_tokens",
        "compressed_tokens",
        "subem",
        "em",
        "f1",
    )
    assert [{k: r[k] for k in fields} for r in resumed] == [{k: r[k] for k in fields} for r in reference]
    summary = json.loads(next(results.rglob("summary.json")).read_text())
    assert summary["n"] == LIMIT and summary["run"]["examples_computed"] == LIMIT - len(kept)
    run = json.loads(next(results.rglob("run.json")).read_text())
    urls = [s["base_url"] for s in run["servers"]]
    assert len(urls) == 2 and urls[0] != urls[1] and {s["model"] for s in run["servers"]} == {MODEL}


# -- (c) the key -----------------------------------------------------------------------------------------------------


@pytest.mark.vllm
def test_the_api_key_reaches_no_file_and_no_log(server, uninterrupted, interrupted, monkeypatch):
    """The server refuses requests without the key, so the runs above sent it; yet no file of their folders (records,
    summary, run.json, Hydra's config and log) and nothing they printed holds it."""
    from harness.generators.openai_server import OpenAIServerGenerator
    from harness.prompt import build_messages

    files = [p for folder in (uninterrupted, interrupted[0]) for p in folder.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"predictions.jsonl", "latency.jsonl", "summary.json", "run.json", "config.yaml", "__main__.log"} <= names
    leaks = [str(p) for p in files if KEY.encode() in p.read_bytes()]
    assert not leaks and len(LOGS) >= 6 and not [log for log in LOGS if KEY in log]
    assert "OPENAI_API_KEY" in next(uninterrupted.rglob("summary.json")).read_text()  # its variable's name is kept
    # without the key: a one-line refusal naming the variable; with it, nothing holds it but the environment
    g = OpenAIServerGenerator("s", MODEL, server.url, tokenizer=LM, api_key_env="HARNESS_TEST_NO_SUCH_KEY")
    with pytest.raises(ServerError, match=r"HTTP 401: .*\$HARNESS_TEST_NO_SUCH_KEY: unset\)$"):
        g.generate([build_messages("who?", [])])
    monkeypatch.setenv("HARNESS_TEST_KEY", KEY)
    g = OpenAIServerGenerator("s", MODEL, server.url, tokenizer=LM, api_key_env="HARNESS_TEST_KEY")
    assert g.generate([build_messages("who wrote hamlet?", [])])[0].text
    assert KEY not in json.dumps(g.describe()) and KEY not in repr(vars(g)) + repr(vars(g.client))


# -- timeout, EDC2 through the shared client ------------------------------------------------------------------------


@pytest.mark.vllm
def test_timeout_fails_at_once_in_one_line_naming_url_and_timeout(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # without it the server refuses at once, before any timeout
    c = ServerClient(server.url, MODEL, "OPENAI_API_KEY", timeout_s=0.01, retries=3, backoff_s=5)
    t0 = time.monotonic()
    with pytest.raises(ServerError) as e:
        c.complete([[{"role": "user", "content": "Tell me a long story. " * 100}]], 32)
    assert str(e.value) == f"{server.url}/chat/completions: no answer within timeout_s=0.01 s"
    assert time.monotonic() - t0 < 5  # not retried


@pytest.mark.slow
@pytest.mark.vllm
def test_edc2_compresses_through_the_served_model(server, env, nq5, monkeypatch):
    from methods.edc2.llm import ServerLLM
    from methods.edc2.method import EDC2

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    m = EDC2(ServerLLM(MODEL, base_url=server.url, max_new_tokens=24), "embedded:all-minilm-l6-v2")
    m.bind(env)
    comps = m.compress_batch(nq5[:2])
    info = json.dumps(m.describe())
    for c in comps:
        assert c.meta["llm_calls"] == 2 and all(s.strip() for s in c.meta["summaries"])
    assert server.url in info and KEY not in info


# -- no server needed: what the generator refuses, retries, the concurrency limit ----------------------------------


@pytest.mark.slow
def test_a_method_needing_answer_nll_says_the_served_generator_cannot(tmp_path):
    r = subprocess.run(
        harness_cmd(
            tmp_path, "method=ci_oracle", "generator=openai_server", "generator.base_url=http://127.0.0.1:9/v1"
        ),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=harness_env(None),
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    [line] = r.stderr.strip().splitlines()[-1:]
    assert (
        line.startswith(
            "error: ci_oracle needs answer log-likelihoods from the generator, but the generator "
            "openai-server (OpenAIServerGenerator) cannot score answers"
        )
        and "scorer_model" in line
    )


def test_no_tokenizer_is_refused_and_the_key_variable_name_is_not_redacted():
    from harness.generators.openai_server import OpenAIServerGenerator
    from harness.provenance import redact
    from harness.validate import ConfigError

    with pytest.raises(ConfigError, match=r"generator\.tokenizer is null"):
        OpenAIServerGenerator("s", MODEL, "http://127.0.0.1:9/v1", tokenizer=None)
    assert redact({"api_key_env": "OPENAI_API_KEY", "api_key": "sk-1", "g": {"token": "t"}}) == {
        "api_key_env": "OPENAI_API_KEY",
        "api_key": "<redacted>",
        "g": {"token": "<redacted>"},
    }


class _Stub(JSONHandler):
    """Answers each POST with the next status of ``statuses`` (then 200, echoing the last message), after
    ``delay_s``; counts requests and the most in flight at once."""

    statuses: ClassVar[list[int]] = []
    delay_s: ClassVar[float] = 0.0
    seen: ClassVar[list[str | None]] = []
    live: ClassVar[list[int]] = [0, 0]  # in flight now, most at once
    lock = threading.Lock()

    def do_POST(self):
        cls = type(self)
        body = self.read_json()
        with cls.lock:
            cls.seen.append(self.headers.get("Authorization"))
            cls.live[0] += 1
            cls.live[1] = max(cls.live)
            status = cls.statuses.pop(0) if cls.statuses else 200
        time.sleep(cls.delay_s)
        if status == 200:
            out = chat_reply(f" {body['messages'][-1]['content']} ")
        else:  # an error body that echoes the credentials, as some servers do
            out = {"error": f"status {status} for {self.headers.get('Authorization')}"}
        with cls.lock:
            cls.live[0] -= 1
        self.send_json(out, status, {"Retry-After": "0"} if status == 429 else None)


@pytest.fixture()
def stub(monkeypatch):
    monkeypatch.setenv("HARNESS_STUB_KEY", KEY)
    _Stub.statuses, _Stub.delay_s, _Stub.seen, _Stub.live = [], 0.0, [], [0, 0]
    with serve(_Stub) as url:
        yield url


def client(url: str, **kw) -> ServerClient:
    return ServerClient(url, "m", "HARNESS_STUB_KEY", **{"timeout_s": 10, "retries": 2, "backoff_s": 0.05, **kw})


def ask(c: ServerClient, *texts: str) -> list[str]:
    return [r.text for r in c.complete([[{"role": "user", "content": t}] for t in texts], 8)]


def test_5xx_and_429_are_retried_with_backoff_then_answered(stub):
    _Stub.statuses = [503, 429]
    t0 = time.monotonic()
    assert ask(client(stub), "hello") == ["hello"]
    assert len(_Stub.seen) == 3 and time.monotonic() - t0 >= 0.05 + 0.1  # waited 0.05 s, then 0.1 s
    assert set(_Stub.seen) == {f"Bearer {KEY}"}


def test_retries_run_out_and_other_statuses_fail_at_once_with_the_key_cut_out(stub):
    _Stub.statuses = [500, 500, 500]
    with pytest.raises(ServerError, match=r"/v1/chat/completions: failed after 3 tries \(HTTP 500: ") as e:
        ask(client(stub), "x")
    assert KEY not in str(e.value) and "Bearer <redacted>" in str(e.value) and "\n" not in str(e.value)
    _Stub.statuses, _Stub.seen = [400], []
    with pytest.raises(ServerError, match=r"/v1/chat/completions: HTTP 400: ") as e:
        ask(client(stub), "x")
    assert len(_Stub.seen) == 1 and KEY not in str(e.value)


def test_requests_run_in_parallel_up_to_the_concurrency_limit_in_input_order(stub):
    _Stub.delay_s = 0.2
    texts = [f"q{i}" for i in range(9)]
    assert ask(client(stub, concurrency=3), *texts) == texts
    assert _Stub.live[1] == 3
