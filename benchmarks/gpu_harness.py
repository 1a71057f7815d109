"""The harness itself on a GPU at the papers' model shapes, with random weights: measured seconds beside the tokens
each record counted (issue 83's device check).

Random weights cost what trained ones cost at a fixed number of tokens, but they never stop by themselves: every
generation writes its full token cap, which the records count. No weights travel: each model folder holds a config
of the paper's shape and SmolLM2's tokenizer (its 49,152-token vocabulary, so the embedding and output layers are
smaller than Llama-3's 128,256), and ``harness.lm.loading.load_causal_lm`` is replaced, in this process only, by a
builder that creates such a folder's model from its config on the device. Everything else is the harness as it is:
``harness.api.evaluate`` on the transformers engine (no vLLM on that machine), bf16, ``batch_size=1`` and the call
cache off, so that every record's ``compress_s`` and ``generate_s`` is a batch-1 timing of its own calls.

Eager PyTorch may pay a one-off cost for each new prompt length (seen on the H200 before: 1.7-3.8 s on a plain
``generate``'s first run at a length). ``probe`` measures it with cuDNN's attention on and off; the runs go with
whichever had the smaller first-run cost, and the first ``--warmup`` records of each run are marked as warm-ups.
``kernels`` times the exact shapes run (prefill at n, one eager decode step at L), so a prediction can be checked
against the table of the models that ran as well as against the H200 table of the papers' checkpoints.

    python benchmarks/gpu_harness.py --tokenizer .devcarry/tok-smollm2 --out $OUT   # on the GPU machine
    python benchmarks/gpu_harness.py --tokenizer DIR --tiny --out /tmp/x               # tiny shapes on a CPU

Writes ``gpu_harness.json`` (meta, probe, kernels, runs) and ``records.jsonl`` (one line per record: run, method,
warm-up flag, tokens, seconds; the context text left out) under ``--out``, rewritten after each step.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MARKER = "random_weights.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")
SHAPES: dict[str, tuple[str, dict[str, Any]]] = {  # the papers' shapes (shared/reference/gpu/measure_kernels.py)
    "llama3_8b": (
        "llama",
        dict(
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            max_position_embeddings=8192,
            rope_theta=500000,
        ),
    ),
    "llama32_3b": (
        "llama",
        dict(
            hidden_size=3072,
            intermediate_size=8192,
            num_hidden_layers=28,
            num_attention_heads=24,
            num_key_value_heads=8,
            tie_word_embeddings=True,
            max_position_embeddings=8192,
            rope_theta=500000,
        ),
    ),
    "gpt2": ("gpt2", dict()),
}
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
TINY_GPT2 = dict(n_embd=64, n_layer=2, n_head=4)


def shape_config(shape: str, tiny: bool, vocab: int, ids: dict[str, int]) -> Any:
    """The transformers config of ``shape`` (tiny: the same family at toy sizes) over the tokenizer's vocabulary."""
    from transformers import GPT2Config, LlamaConfig

    family, kw = SHAPES[shape]
    if family == "gpt2":
        return GPT2Config(vocab_size=vocab, **(TINY_GPT2 if tiny else {}), **ids)
    kw = {**kw, **(TINY if tiny else {})}
    return LlamaConfig(vocab_size=vocab, **kw, **ids)


def make_folder(root: Path, shape: str, tokenizer: Path, tiny: bool) -> Path:
    """A model folder of ``shape``: its config, the tokenizer's files and the marker; no weights."""
    gen = json.loads((tokenizer / "generation_config.json").read_text())
    ids = {k: gen[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in gen}
    vocab = json.loads((tokenizer / "config.json").read_text())["vocab_size"]
    folder = root / f"random-{shape}{'-tiny' if tiny else ''}"
    folder.mkdir(parents=True, exist_ok=True)
    shape_config(shape, tiny, vocab, ids).save_pretrained(folder)
    for name in TOKENIZER_FILES:
        if (tokenizer / name).is_file():
            shutil.copy(tokenizer / name, folder / name)
    (folder / MARKER).write_text(json.dumps({"shape": shape, "tiny": tiny, "vocab_size": vocab}))
    return folder


def patch_loader() -> None:
    """``harness.lm.loading.load_causal_lm`` builds a marked folder's model from its config, random, on the device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from harness.lm import loading
    from harness.lm.models import resolve

    original = loading.load_causal_lm

    def random_or_loaded(ref: str, dtype: str = "float32", device: str = "cpu", trust_remote_code: bool = False):
        path = Path(resolve(ref).path)
        if not (path / MARKER).is_file():
            return original(ref, dtype, device, trust_remote_code)
        cfg = AutoConfig.from_pretrained(path)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype))
        return model.eval()

    loading.load_causal_lm = random_or_loaded


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn) -> float:
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def build(folder: Path, dtype: str, device: str):
    """The random model of a marked folder (the same builder the harness gets)."""
    from harness.lm import loading

    return loading.load_causal_lm(str(folder), dtype, device)


def plain_generate(model: Any, ids: Any, new: int) -> None:
    """A plain greedy ``generate`` of exactly ``new`` tokens after ``ids`` (random weights never stop by themselves,
    ``min_new_tokens`` makes sure)."""
    import torch

    with torch.inference_mode():
        model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
        )


def probe(model: Any, lengths: list[int], new: int, device: str) -> dict[str, Any]:
    """A plain ``generate`` of ``new`` tokens at each new prompt length, run twice: (first, second) seconds, with
    cuDNN's attention on and then off (each setting on lengths of its own, so that each first run is a first)."""
    import torch

    out: dict[str, Any] = {}
    for label, cudnn in (("cudnn_sdp_on", True), ("cudnn_sdp_off", False)):
        torch.backends.cuda.enable_cudnn_sdp(cudnn)
        rows = []
        for n in lengths:
            n = n + (0 if cudnn else 1)  # a length the other setting has not seen
            ids = torch.randint(100, 1000, (1, n), device=device)

            def go(ids=ids):
                plain_generate(model, ids, new)

            rows.append({"n": n, "first_s": timed(go), "second_s": timed(go), "third_s": timed(go)})
        out[label] = rows
    return out


def kernels(
    model: Any, ns: list[int], ls: list[int], device: str, repeats: int = 5, generate_k: int = 0
) -> dict[str, Any]:
    """Median seconds of one prefill forward at n (last-position logits) and one eager decode step on a
    ``DynamicCache`` of L tokens, for the model that runs (after two warm-ups each); with ``generate_k``, also a
    plain ``generate``'s seconds per written token (``generate_steps``)."""
    import torch
    from transformers import DynamicCache

    def med(fn) -> float:
        for _ in range(2):
            timed(fn)
        return statistics.median(timed(fn) for _ in range(repeats))

    out: dict[str, Any] = {"prefill": {}, "decode_eager": {}}
    with torch.inference_mode():
        for n in ns:
            ids = torch.randint(100, 1000, (1, n), device=device)
            out["prefill"][str(n)] = {"median_s": med(lambda ids=ids: model(input_ids=ids, logits_to_keep=1))}
        for L in ls:
            ids = torch.randint(100, 1000, (1, L), device=device)
            cache = DynamicCache(config=model.config)
            model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
            one = torch.randint(100, 1000, (1, 1), device=device)

            def step(cache=cache, one=one, L=L):
                model(input_ids=one, past_key_values=cache, use_cache=True, logits_to_keep=1)
                cache.crop(-1)  # back to L tokens for the next repeat

            out["decode_eager"][str(L)] = {"median_s": med(step)}
        if generate_k:
            out["decode_generate"] = generate_steps(model, ls, generate_k, device)
    return out


def generate_steps(model: Any, ls: list[int], k: int, device: str, repeats: int = 3) -> dict[str, Any]:
    """Seconds per written token of a plain ``generate`` at prompt length L (what the transformers engine pays: a
    decode step plus ``generate``'s own work per token): (time of k + 1 new tokens - time of 1) / k, medians."""
    import torch

    out: dict[str, Any] = {}
    for L in ls:
        ids = torch.randint(100, 1000, (1, L), device=device)

        def gen(new: int, ids=ids) -> None:
            plain_generate(model, ids, new)

        gen(k + 1)  # the first run at a length (see probe)
        one = statistics.median(timed(lambda: gen(1)) for _ in range(repeats))
        many = statistics.median(timed(lambda: gen(k + 1)) for _ in range(repeats))
        out[str(L)] = {"median_s": (many - one) / k, "k": k, "one_s": one, "many_s": many}
    return out


def method_runs(folders: dict[str, Path], device: str, limits: dict[str, int]) -> list[tuple[str, int, list[str]]]:
    """(method, questions, overrides) of each run: the reader is the 8B shape; RECOMP-abs and CompSelect's
    extractor are the 3B shape (CompSelect untuned, without its truncator: a random extractor maps no clue, so
    neither its reranker nor its truncator would run; its cost is the extractor's); Selective-Context scores with
    the GPT-2 shape."""
    c3b, gpt2 = str(folders["llama32_3b"]), str(folders["gpt2"])
    specific = {
        "naive": [],
        "full": [],
        "recomp_abs": [f"models.recomp_abs.model={c3b}"],
        "compselect": [
            f"models.compselect.lm={c3b}",
            f"models.compselect.device={device}",
            "models.compselect.dtype=bfloat16",
            "models.compselect.max_input_tokens=2048",
            "method.extractor=null",
            "method.truncation=none",
            "method.reranker=null",
        ],
        "selective_context": [
            f"models.selective_context.model={gpt2}",
            f"models.selective_context.device={device}",
            "models.selective_context.dtype=bfloat16",
        ],
    }
    return [(m, n, specific[m]) for m, n in limits.items()]


def common_overrides(reader: Path, results: Path) -> list[str]:
    return [
        "generator=smollm2_transformers",
        f"generator.model={reader}",
        "generator.dtype=bfloat16",
        "models.lm_engine=transformers",
        "models.lm_dtype=bfloat16",
        "models.speculative=null",
        "batch_size=1",
        "latency.samples=0",
        "lm.cache=false",
        "progress=false",
        f"results_dir={results}",
    ]


KEEP = (
    "id",
    "prediction",
    "prompt_tokens",
    "completion_tokens",
    "compressed_tokens",
    "original_tokens",
    "compress_s",
    "generate_s",
    "stages",
    "tokens",
    "batch",
    "threads",
    "error",
)


LINES: list[dict[str, Any]] = []


def run_methods(
    args: argparse.Namespace, folders: dict[str, Path], report: dict[str, Any], out: Path, tag: str = ""
) -> None:
    """Each method through ``harness.api.evaluate``; its records (context text left out) to ``records.jsonl``."""
    from harness.api import evaluate

    results = Path(tempfile.mkdtemp(prefix="gpu-harness-results-"))
    limits = dict(item.split(":") for item in args.methods.split(","))
    lines = LINES
    for method, n, extra in method_runs(folders, args.device, {m: int(k) for m, k in limits.items()}):
        if time.time() - T0 > args.budget_s:
            report["runs"][method] = {"skipped": "budget"}
            continue
        t0 = time.perf_counter()
        try:
            ev = evaluate(method, "nq", limit=n, overrides=[*common_overrides(folders["llama3_8b"], results), *extra])
        except Exception as e:  # one method failing leaves the others' figures
            report["runs"][method] = {"error": f"{type(e).__name__}: {e}"[:2000]}
            continue
        folder = Path(ev.folder)
        records = [json.loads(x) for x in (folder / "predictions.jsonl").read_text().splitlines() if x.strip()]
        for i, r in enumerate(records):
            lines.append({"method": method, "tag": tag, "warmup": i < args.warmup, **{k: r[k] for k in KEEP if k in r}})
        report["runs"][f"{method}:{tag}" if tag else method] = {
            "wall_s": time.perf_counter() - t0,
            "n": len(records),
            "overrides": extra,
            "summary": json.loads((folder / "summary.json").read_text()),
        }
        (out / "records.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        write(out, report)


def plain_loop(model: Any, n: int, times: int, device: str) -> dict[str, Any]:
    """``times`` plain ``generate`` calls of 32 tokens after an n-token prompt, each with the SM clock read after
    it: the engine's own speed at this point of the process, to set beside the harness's records."""
    import torch

    ids = torch.randint(100, 1000, (1, n), device=device)
    out = []
    for _ in range(times):

        def go() -> None:
            plain_generate(model, ids, 32)

        secs = timed(go)
        clock = torch.cuda.clock_rate() if torch.cuda.is_available() else None
        out.append({"s": secs, "sm_mhz": clock})
    return {"n": n, "runs": out}


def diagnose(args: argparse.Namespace, folders: dict[str, Path], report: dict[str, Any], out: Path) -> None:
    """Why the harness's batch-1 generations on a GPU jitter between a plain ``generate``'s time and about twice it:
    plain loops between three runs of ``full`` (as configured; torch on one CPU thread; Python's collector off)."""
    import gc

    import torch

    from harness import resources

    variants = [
        ("as_configured", lambda: None),
        ("one_thread", lambda: torch.set_num_threads(1)),
        ("gc_off", gc.disable),
    ]
    report["diagnose"] = {}
    for label, setup in variants:
        setup()
        args.methods = f"full:{args.diagnose}"
        run_methods(args, folders, report, out, tag=label)
        lm = resources.get(next(k for k in resources.loaded() if k[0] == "generator")).lm
        engine = lm.engine
        report["diagnose"][label] = {
            "threads": torch.get_num_threads(),
            "gc": gc.isenabled(),
            "plain": plain_loop(engine.model, 800, 8, args.device),
        }
        write(out, report)


def write(out: Path, report: dict[str, Any]) -> None:
    report["meta"]["elapsed_s"] = round(time.time() - T0, 1)
    tmp = out / "gpu_harness.json.tmp"
    tmp.write_text(json.dumps(report, indent=1, default=str))
    os.replace(tmp, out / "gpu_harness.json")


def environment(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import transformers

    meta: dict[str, Any] = {
        "argv": sys.argv[1:],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": sys.version.split()[0],
        "device": args.device,
        "tiny": args.tiny,
        "started_unix": T0,
    }
    if torch.cuda.is_available():
        meta["device_name"] = torch.cuda.get_device_name(0)
    return meta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", type=Path, required=True, help="a folder with SmolLM2's tokenizer and config")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    ap.add_argument("--models", type=Path, default=Path("/dev/shm" if Path("/dev/shm").is_dir() else "/tmp"))
    ap.add_argument(
        "--methods",
        default="full:24,naive:12,recomp_abs:14,selective_context:12,compselect:10",
        help="method:questions, comma-separated, in order",
    )
    ap.add_argument("--warmup", type=int, default=2, help="records marked as warm-ups at the start of each run")
    ap.add_argument("--budget-s", type=float, default=480.0, help="no new run starts after this many seconds")
    ap.add_argument("--tiny", action="store_true", help="toy sizes (a CPU test of the script)")
    ap.add_argument("--diagnose", type=int, default=0, help="questions of each diagnose() run (0: the normal runs)")
    ap.add_argument("--generate-k", type=int, default=32, help="tokens of the generate-per-token column (0: none)")
    args = ap.parse_args()
    import torch

    args.device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = "bfloat16" if args.device == "cuda" else "float32"
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"meta": environment(args), "probe": {}, "kernels": {}, "runs": {}}
    patch_loader()
    folders = {s: make_folder(args.models, s, args.tokenizer, args.tiny) for s in SHAPES}
    if args.diagnose:
        if args.device == "cuda":
            torch.backends.cuda.enable_cudnn_sdp(False)  # the probe's finding: no first-run cost per length
        diagnose(args, folders, report, args.out)
        report["meta"]["status"] = "done"
        write(args.out, report)
        return
    for shape in ("llama3_8b", "llama32_3b"):
        model = build(folders[shape], dtype, args.device)
        if shape == "llama3_8b" and args.device == "cuda":  # first, while every length is new
            report["probe"] = probe(model, [300, 900], 32, args.device)
            firsts = {k: sum(r["first_s"] - r["third_s"] for r in v) for k, v in report["probe"].items()}
            report["probe"]["chosen"] = min(firsts, key=firsts.get)
            torch.backends.cuda.enable_cudnn_sdp(report["probe"]["chosen"] == "cudnn_sdp_on")
        ns, ls = [64, 128, 256, 512, 1024, 2048], [128, 512, 1024, 2048]
        report["kernels"][shape] = kernels(model, ns, ls, args.device, generate_k=args.generate_k)
        del model
        write(args.out, report)
    if args.device == "cuda":
        torch.cuda.empty_cache()
    run_methods(args, folders, report, args.out)
    report["meta"]["status"] = "done"
    write(args.out, report)


T0 = time.time()

if __name__ == "__main__":
    main()
