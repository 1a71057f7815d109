"""The generator behind an OpenAI-compatible server (``generator=openai_server``): the shared prompt (its
``prompt`` template of ``harness.prompt``) through the server's chat completions endpoint, greedy, ``max_new_tokens``;
requests, retries, timeout, concurrency, the key and the call cache as ``harness.lm.server`` describes.

Token counts for CR come from ``tokenizer``: a local model ref (``embedded:smollm2-135m-instruct``, a hub id or a
folder; its tokenizer is loaded here, no weights) or ``server`` (vLLM's ``/tokenize``, one request per count).
There is no default: CR measured with another model's tokenizer would not be the generator's CR. Prompt and
completion token counts in records are the server's (``usage``).

The prompt is fitted to the served model by the model layer's rule (``harness.lm.fit``: prompt + ``max_new_tokens``
within ``context_length``, default 8192, the context of the embedded and paper generators; ``+generator.
context_length=N`` for another; the documents cut first, the question only when it alone overflows), counting its
tokens with the local ``tokenizer`` through its chat template (the served model's, so exact), or, with ``server``,
by ``ByteEstimate`` (one token per UTF-8 byte plus a chat-template allowance: an upper bound, so it may cut more
than needed but never too little). ``Generation.truncated`` records what was cut.

It cannot score answers (no ``answer_nll``: a chat endpoint returns no prompt log-probabilities), so methods
that need it (``ci_oracle`` scoring with the generator, CompSelect's and CI value's NLL labels) stop with a
``ConfigError`` saying so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from harness.lm.fit import truncated_of
from harness.lm.server import ServerClient
from harness.metrics import answer_rule
from harness.prompt import get_prompt
from harness.protocols import Messages
from harness.types import Generation
from harness.validate import ConfigError


class OpenAIServerGenerator:
    """Greedy chat generation by ``model`` at ``base_url``; the key comes from ``$<api_key_env>`` per request."""

    backend = "openai_server"
    dtype = None  # the server's business; run.json names the server and its model instead

    def __init__(
        self,
        name: str,
        model: str,
        base_url: str,
        tokenizer: str | None,
        api_key_env: str | None = "OPENAI_API_KEY",
        max_new_tokens: int = 32,
        concurrency: int = 8,
        timeout_s: float = 120.0,
        retries: int = 5,
        backoff_s: float = 1.0,
        extra_body: dict[str, Any] | None = None,
        prompt: str = "paper",
        answer: str = "paper",
        context_length: int = 8192,
    ) -> None:
        self.prompt, self.answer, self.answer_rule = get_prompt(prompt), answer, answer_rule(answer)
        if getattr(self.prompt, "stop", ""):  # a CompletionPrompt: raw text, which a chat endpoint would template
            raise ConfigError(
                f"generator.prompt={prompt!r}: a completion prompt needs a local engine, not a chat server"
            )
        self.name, self.max_new_tokens, self.tokenizer_ref = name, max_new_tokens, tokenizer
        self.context_length = int(context_length)
        self.client = ServerClient(base_url, model, api_key_env, timeout_s, retries, backoff_s, concurrency, extra_body)
        self._fitter: Any = None
        self._count = self._counter(tokenizer)

    def _counter(self, ref: str | None) -> Callable[[str], int]:
        if not ref:
            raise ConfigError(
                "generator.tokenizer is null: CR counts context tokens with the generator's tokenizer; set it to a "
                "local ref of the served model's tokenizer (e.g. embedded:smollm2-135m-instruct) or to `server` "
                "(a vLLM server's /tokenize)"
            )
        from harness.lm.fit import ByteEstimate

        if ref == "server":
            self._fitter = ByteEstimate(self.client.model, self.context_length)
            return lambda text: len(self.client.tokenize(text))
        from harness.lm.loading import load_tokenizer
        from harness.lm.model import LM

        tok = load_tokenizer(ref)
        info = {"weights_sha256": None, "engine": self.backend, "dtype": None}
        self._fitter = LM(ref, None, tok, info, context_length=self.context_length)  # tokenizes only, no engine
        return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])

    def count_tokens(self, text: str) -> int:
        return self._count(text) if text else 0

    def messages(self, question: str, documents: Sequence[str]) -> Messages:
        """The chat prompt of ``question`` over ``documents`` (this generator's template), fitted to the served
        model (see the module docstring)."""
        from harness.lm.fit import fit_messages

        return fit_messages(self._fitter, self.prompt, question, documents, self.max_new_tokens)

    def generate(self, prompts: Sequence[Messages]) -> list[Generation]:
        replies = self.client.complete([list(m) for m in prompts], self.max_new_tokens)
        return [
            Generation(r.text, self.answer_rule(r.text), r.prompt_tokens, r.completion_tokens, cut)
            for r, cut in zip(replies, map(truncated_of, prompts), strict=True)
        ]

    def describe(self) -> dict[str, Any]:
        from harness.lm.models import resolve

        tok = "server" if self.tokenizer_ref == "server" else resolve(str(self.tokenizer_ref)).describe()
        client = self.client.describe()
        return {
            "name": self.name,
            "backend": self.backend,
            "model": {"ref": client["model"], "source": "openai_server"},  # the shape of a local model's entry
            "server": {"base_url": client["base_url"], "model": client["model"]},
            "dtype": self.dtype,
            "decoding": {"greedy": True, "temperature": 0, "max_new_tokens": self.max_new_tokens},
            "prompt": self.prompt.describe(),
            "answer": self.answer,
            "tokenizer": tok,
            "context_length": self.context_length,
            "client": client,
        }
