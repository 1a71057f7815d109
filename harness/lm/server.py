"""A model behind an OpenAI-compatible server: ``POST {base_url}/chat/completions`` (OpenAI, vLLM's
``vllm serve``, llama.cpp's server), greedy (temperature 0), for the ``openai_server`` generator and for
methods whose LLM runs behind a server (EDC²'s ``ServerLLM``).

- The API key is read from the environment variable named by ``api_key_env`` when each request is built and
  sent as ``Authorization: Bearer``; it is never kept on an object, never in ``describe()``, and cut out of error
  messages (a server may echo it). No variable, or an empty one: no header (a local server without a key).
- Connection errors (refused, reset, dropped mid-answer), HTTP 5xx and 429 are retried ``retries`` times,
  waiting ``backoff_s * 2**attempt`` (or the server's ``Retry-After``, when longer, up to 60 s); any other status
  fails at once with the server's message. A request unanswered after ``timeout_s`` fails at once, in one line
  naming the URL and the timeout (retrying would only multiply the wait).
- ``complete`` sends up to ``concurrency`` requests at a time (threads) and returns replies in input order; the
  first failure cancels the requests not yet sent and is raised (``ServerError``, one line).
- Calls go through the model layer's call cache (``harness.lm.cache``) under the served model's name: give other
  weights another name (vLLM: ``--served-model-name``), or turn the cache off (``lm.cache=false``).
- ``tokenize`` uses vLLM's ``/tokenize`` endpoint (not part of OpenAI's API).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from harness.lm.cache import cached_calls
from harness.protocols import Messages

RETRY_STATUS = (429, 500, 502, 503, 504)
MAX_WAIT_S = 60.0


class ServerError(RuntimeError):
    """The server could not answer: unreachable after its retries, an error status, or a timeout (one line)."""


@dataclass
class Reply:
    """One chat completion: its text (stripped), the server's token counts, why it stopped, the seconds it cost
    when computed and whether the call cache answered it."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None
    seconds: float = 0.0
    replayed: bool = False


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _is_timeout(e: BaseException) -> bool:
    return isinstance(e, TimeoutError) or (isinstance(e, urllib.error.URLError) and isinstance(e.reason, TimeoutError))


class ServerClient:
    """Greedy chat completions from ``model`` at ``base_url``; see the module docstring."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = "OPENAI_API_KEY",
        timeout_s: float = 120.0,
        retries: int = 5,
        backoff_s: float = 1.0,
        concurrency: int = 8,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        self.base_url, self.model, self.api_key_env = base_url.rstrip("/"), model, api_key_env
        self.timeout_s, self.retries, self.backoff_s = float(timeout_s), int(retries), float(backoff_s)
        self.concurrency = max(int(concurrency), 1)
        self.extra_body = dict(extra_body or {})
        self.namespace = f"server|{model}"

    # ------------------------------------------------------------------ one request
    def _key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None if self.api_key_env else None

    def _scrub(self, text: str) -> str:
        key = self._key()
        return text.replace(key, "<redacted>") if key else text

    def _wait(self, attempt: int, retry_after: str | None) -> None:
        wait = self.backoff_s * 2**attempt
        with contextlib.suppress(ValueError):  # Retry-After may also be an HTTP date: then the backoff
            wait = max(wait, float(retry_after)) if retry_after else wait
        time.sleep(min(wait, MAX_WAIT_S))

    def post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` as JSON to ``url`` and return the JSON answer, with the retries and the timeout of the
        module docstring; raises ``ServerError``."""
        data = json.dumps(body).encode()
        for attempt in range(self.retries + 1):
            headers = {"Content-Type": "application/json"}
            key = self._key()
            if key:
                headers["Authorization"] = f"Bearer {key}"
            req = urllib.request.Request(url, data, headers, method="POST")
            del headers, key
            retry_after = None
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                    return json.loads(r.read())
            except urllib.error.HTTPError as e:
                detail = _one_line(self._scrub(e.read().decode("utf-8", "replace")))
                why = f"HTTP {e.code}: {detail}"
                if e.code in (401, 403):
                    why += f" (the key comes from ${self.api_key_env}: {'set' if self._key() else 'unset'})"
                if e.code not in RETRY_STATUS:
                    raise ServerError(f"{url}: {why}") from None
                retry_after = e.headers.get("Retry-After")
            except (OSError, http.client.HTTPException) as e:
                if _is_timeout(e):
                    raise ServerError(f"{url}: no answer within timeout_s={self.timeout_s:g} s") from None
                reason = e.reason if isinstance(e, urllib.error.URLError) else e
                why = _one_line(self._scrub(f"{type(reason).__name__}: {reason}"))
            finally:
                del req
            if attempt < self.retries:
                self._wait(attempt, retry_after)
        raise ServerError(f"{url}: failed after {self.retries + 1} tries ({why})")

    def chat(self, messages: Messages, max_new_tokens: int) -> dict[str, Any]:
        """One greedy completion of a chat prompt, as the call cache stores it."""
        body = {
            "model": self.model,
            "messages": list(messages),
            "temperature": 0,
            "max_tokens": int(max_new_tokens),
            **self.extra_body,
        }
        url = f"{self.base_url}/chat/completions"
        out = self.post(url, body)
        try:
            choice, usage = out["choices"][0], out.get("usage") or {}
            return {
                "text": (choice["message"].get("content") or "").strip(),
                "prompt_tokens": int(usage.get("prompt_tokens") or 0),
                "completion_tokens": int(usage.get("completion_tokens") or 0),
                "finish_reason": choice.get("finish_reason"),
            }
        except (KeyError, IndexError, TypeError, AttributeError):
            raise ServerError(f"{url}: not a chat completion: {_one_line(json.dumps(out))}") from None

    # ------------------------------------------------------------------ batches
    def _parallel(self, prompts: list[Messages], max_new_tokens: int) -> list[dict[str, Any]]:
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(prompts))) as pool:
            futures = [pool.submit(self.chat, m, max_new_tokens) for m in prompts]
            try:
                return [f.result() for f in futures]
            except BaseException:
                for f in futures:
                    f.cancel()
                raise

    def complete(self, prompts: Sequence[Messages], max_new_tokens: int) -> list[Reply]:
        """Greedy completions of chat prompts, in input order, through the call cache."""
        settings = {"max_new_tokens": int(max_new_tokens), "temperature": 0, "extra_body": self.extra_body}
        rows = cached_calls(
            self.namespace, "chat", [list(p) for p in prompts], settings, lambda ps: self._parallel(ps, max_new_tokens)
        )
        return [
            Reply(
                r.value["text"],
                r.value["prompt_tokens"],
                r.value["completion_tokens"],
                r.value["finish_reason"],
                r.seconds,
                r.replayed,
            )
            for r in rows
        ]

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens, from vLLM's ``/tokenize`` (at the server's root)."""
        root = self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url
        out = self.post(f"{root}/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False})
        return list(out["tokens"])

    def describe(self) -> dict[str, Any]:
        """Where and how calls go (the key's variable name, never its value)."""
        return {
            "base_url": self.base_url,
            "model": self.model,
            "api_key_env": self.api_key_env,
            "timeout_s": self.timeout_s,
            "retries": self.retries,
            "backoff_s": self.backoff_s,
            "concurrency": self.concurrency,
            "extra_body": self.extra_body,
        }
