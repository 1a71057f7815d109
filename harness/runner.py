"""The run loop: data -> compress -> prompt -> generate -> score -> records -> summary."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from harness import metrics, provenance, renames, resources
from harness.data import DatasetError, DatasetSpec, LoadedDataset, load_dataset_report
from harness.prompt import render_documents
from harness.protocols import Compressor, Generator, MethodEnv
from harness.records import RUN, RunRecords, config_key, folder_disk_full, summarize
from harness.reuse import ContextStore, StoredContexts, documents_field, stamp
from harness.runlock import run_lock
from harness.shards import Shard, merge_if_complete, write_shard_summary
from harness.types import Compressed, Example, Unit
from harness.validate import ConfigError, validate_config

log = logging.getLogger(__name__)

# Settings that change how a run is executed, not what it computes: a folder may be resumed under other values.
EXECUTION_KEYS = (
    "limit",
    "batch_size",
    "latency",
    "progress",
    "results_dir",
    "lm",
    "shard",
    "on_error",
    "reuse",
    "contexts",
)
# Settings of a server client (harness/lm/server.py), wherever they sit under the generator or a method: where and
# how calls go, not what they compute (a run resumes against a restarted server on another port).
CLIENT_KEYS = ("base_url", "api_key_env", "concurrency", "timeout_s", "retries", "backoff_s")


# Generator settings that say how it reads (its prompt, answer rule, lengths), not which model it runs: a switch of
# generator that changes only these keeps the model (the next generator's ``get_lm`` hands back the same LM).
READING_KEYS = ("name", "prompt", "answer", "max_new_tokens", "max_input_tokens", "chat_template_kwargs")


def get_generator(cfg: DictConfig) -> tuple[Generator, bool]:
    """The shared generator for this config, built once per process (a multirun reuses it); a generator of another
    config is released first (``release_generators``), so that one generator's engine is alive at a time.

    Returns the generator and whether this call loaded it."""
    settings = OmegaConf.to_container(cfg, resolve=True)
    key = ("generator", json.dumps(settings, sort_keys=True))
    fresh = key not in resources.loaded()
    if fresh:
        release_generators(settings)
        log.info("loading generator %s (%s)", cfg.name, cfg._target_)
    generator = resources.shared(key, lambda: built("generator", cfg))
    if fresh:
        from harness.lm import live

        log.info("LMs alive after loading generator %s: %s", cfg.name, [lm.ref for lm in live()])
    return generator, fresh


def release_generators(next_settings: dict[str, Any] | None = None) -> int:
    """Forget the process's generators and close the LMs they hold (``harness.lm.release``: each vLLM engine
    reserves its share of GPU memory until closed), except the LM of one that differs from ``next_settings`` (the
    generator about to load) only in ``READING_KEYS``: the next one gets it back. Returns how many LMs were closed.

    A method's LM that is the same instance (same weights, engine, dtype) goes too: methods are built and bound
    per run (``_run``), so the next run's method asks ``get_lm`` again and reloads it."""
    from harness.lm import LM, release

    old = [k for k in resources.loaded() if k[0] == "generator"]
    closing: list[LM] = []
    names: list[str] = []
    for k, gen in zip(old, resources.drop(lambda k, _: k not in old), strict=True):
        if next_settings is not None and _reading_only(json.loads(k[1]), next_settings):
            log.info("generator switch: %s dropped, its LM kept for the next one (same model)", gen.name)
            continue
        closing += [v for v in getattr(gen, "__dict__", {}).values() if isinstance(v, LM)]
        names.append(str(gen.name))
    if not names:
        return 0
    engines = sum(len(lm.engines()) for lm in closing)
    closed = release(lambda lm: any(lm is c for c in closing))
    refs = [lm.ref for lm in closing]
    log.info("generator switch: %s released: %d LMs closed (%d engines): %s", ", ".join(names), closed, engines, refs)
    return closed


def _reading_only(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two generator configs differ only in how they read (``READING_KEYS``)."""
    strip = lambda s: {k: v for k, v in s.items() if k not in READING_KEYS}  # noqa: E731
    return strip(a) == strip(b)


def built(section: str, cfg: Any, **kwargs: Any) -> Any:
    """``instantiate(cfg)``; a ``ConfigError`` raised while building (a model reference that cannot load, say) comes
    out as one ``ConfigError`` line led by the key it came from (``generator``, ``method.scorer``), not as hydra's
    wrapper, so that the command line ends with ``error: ...`` like any other bad setting."""
    from hydra.errors import InstantiationException

    try:
        return instantiate(cfg, **kwargs)
    except InstantiationException as e:
        cause: BaseException | None = e
        while isinstance(cause, InstantiationException):
            cause = cause.__cause__
        if not isinstance(cause, ConfigError):
            raise
        key = next(iter(re.findall(r"full_key: (\S+)", str(e))), "")  # a node of the run config: from its root
        where = key if key.split(".")[0] == section else ".".join(filter(None, [section, key]))
        msg = str(cause)
        raise ConfigError(msg if msg.startswith(section) else f"{where}: {msg}") from cause


CONFIG_ONLY = ("name", "per_dataset")  # a method config's keys the runner reads itself, never constructor arguments


def build_method(method_cfg: DictConfig) -> Compressor:
    """Instantiate a method from its config; ``name`` (the variant's name) is set on the instance. A variant's
    ``per_dataset`` mapping (the values its knobs read by ``${.per_dataset.${dataset.name}}``, e.g. a budget chosen
    per dataset) is config only, never a constructor argument."""
    kwargs = OmegaConf.to_container(method_cfg, resolve=True)
    name = kwargs.pop("name")
    for key in CONFIG_ONLY[1:]:
        kwargs.pop(key, None)
    compressor = built("method", kwargs, _convert_="all")
    compressor.name = name
    return compressor


def _units(units: list[Unit] | None) -> list[list[int | None]] | None:
    return None if units is None else [[u.passage, u.sentence] for u in units]


def _threads() -> int:
    """The thread count the timings were taken at (the model layer's: ``threads``, OMP_NUM_THREADS or every
    core)."""
    from harness.lm.hardware import thread_count

    return thread_count(_THREADS.get("n"))


_THREADS: dict[str, int | None] = {}


def _record(
    ex: Example, comp: Compressed, gen, original: int, compressed: int, cs: float, gs: float, batch: int
) -> dict:
    context = render_documents(comp.documents)
    return {
        "id": ex.id,
        "question": ex.question,
        "answers": list(ex.answers),
        "prediction": gen.answer,
        "raw_output": gen.text,
        "context": context,
        **documents_field(comp.documents),  # where the context does not split back into them (harness.reuse)
        "units": _units(comp.units),
        "original_tokens": original,
        "compressed_tokens": compressed,
        "prompt_tokens": gen.prompt_tokens,
        "completion_tokens": gen.completion_tokens,
        "compress_s": cs,
        "generate_s": gs,
        "stages": comp.timings,
        "batch": batch,
        "threads": _threads(),
        "meta": with_truncation(comp.meta, getattr(gen, "truncated", None)),
        **metrics.score(gen.answer, ex.answers),
        "echo": metrics.echo(gen.answer, ex.question, context),
        "hedge": metrics.hedge(gen.answer, ex.question, ex.answers, ex.meta.get("type")),
    }


def with_truncation(meta: dict[str, Any], generator_cut: dict[str, int] | None) -> dict[str, Any]:
    """The method's ``meta`` with the generator's prompt cut added under ``truncated.generator`` (``harness.lm.fit``;
    a method's LM stages put theirs under their own names)."""
    if not generator_cut:
        return meta
    return {**meta, "truncated": {**(meta.get("truncated") or {}), "generator": dict(generator_cut)}}


class ExampleError(RuntimeError):
    """An example's compression or generation raised (``on_error: fail``); the message names the example, the
    method and the stage in one line."""


@dataclass
class Failure:
    """What one example's stage raised."""

    stage: str
    error: Exception

    def describe(self) -> dict[str, str]:
        return {"stage": self.stage, "type": type(self.error).__name__, "message": one_line(self.error)}


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _run_errors() -> tuple[type[BaseException], ...]:
    """Errors of the run's setup, not of one example: they stop the run as they are, whatever ``on_error``."""
    from harness.lm.server import ServerError
    from harness.validate import ConfigError

    return (ConfigError, ServerError)


def attempt(stage: str, items: Sequence[Any], call) -> list[Any]:
    """``call(items)``; when it raises, each item alone, so that a failure is pinned on its item: the result,
    or a ``Failure``, per item."""
    setup = _run_errors()
    try:
        return list(call(items))
    except setup:
        raise
    except Exception as e:
        if len(items) == 1:
            return [Failure(stage, e)]
    out: list[Any] = []
    for item in items:
        try:
            out.append(call([item])[0])
        except setup:
            raise
        except Exception as e:
            out.append(Failure(stage, e))
    return out


def _failed_record(ex: Example, failure: Failure, batch: int) -> dict:
    return {
        "id": ex.id,
        "question": ex.question,
        "answers": list(ex.answers),
        "error": failure.describe(),
        "batch": batch,
        "threads": _threads(),
    }


def process(
    examples: Sequence[Example],
    compressor: Compressor,
    generator: Generator,
    batch_size: int | None = None,
    on_error: str = "fail",
) -> tuple[list[dict[str, Any]], float]:
    """Compress, generate and score a batch; per-example times are the batch's, amortised. Returns records
    and the model seconds spent (compression plus generation). ``batch_size``: the configured size each record
    says it was timed at (default: the batch's length; a run's last batch may be shorter).

    Calls the model layer answered from its cache (``harness.lm.cache``) add the seconds they were measured
    at, so a cache never makes a method or the generator look faster than it is; the record counts them.

    An example whose compression or generation raises (found by retrying its batch one example at a time)
    stops the run with an ``ExampleError`` naming it (``on_error: fail``), or gets a record with the error
    instead of scores (``skip``)."""
    from harness.lm.cache import REPLAYS
    from harness.lm.meter import metered

    r0 = (REPLAYS.calls, REPLAYS.seconds)
    t0 = time.perf_counter()
    with metered() as compress_meter:
        comps = attempt("compress", examples, compressor.compress_batch)
    t1 = time.perf_counter()
    r1 = (REPLAYS.calls, REPLAYS.seconds)
    ok = [i for i, c in enumerate(comps) if not isinstance(c, Failure)]
    asked = [generator.messages(examples[i].question, comps[i].documents) for i in ok]
    outcome: list[Any] = list(comps)
    with metered() as generate_meter:
        answered = attempt("generate", asked, generator.generate) if asked else []
    for i, gen in zip(ok, answered, strict=True):
        outcome[i] = gen if isinstance(gen, Failure) else (comps[i], gen)
    t2 = time.perf_counter()
    r2 = (REPLAYS.calls, REPLAYS.seconds)
    failures = [(ex, f) for ex, f in zip(examples, outcome, strict=True) if isinstance(f, Failure)]
    if failures and on_error == "fail":
        ex, f = failures[0]
        raise ExampleError(
            f"example {ex.id}: method {compressor.name}, stage {f.stage}: {type(f.error).__name__}: "
            f"{one_line(f.error)} (on_error=skip records the error and goes on)"
        )
    replayed = {"compress_calls": r1[0] - r0[0], "generate_calls": r2[0] - r1[0]}
    per_example = ((t1 - t0 + r1[1] - r0[1]) / len(examples), (t2 - t1 + r2[1] - r1[1]) / len(examples))
    rows = _rows(examples, outcome, generator, per_example, batch_size or len(examples))
    tokens = stage_tokens(compress_meter.entries, generate_meter.entries, len(examples))
    for row in rows:
        if "error" in row:
            continue
        row["tokens"] = {**tokens, "generate": tokens["generate"] or served_tokens(generator, row)}
        if any(replayed.values()):
            row["replayed"] = replayed
    return rows, t2 - t0


def stage_tokens(compress: list[dict], generate: list[dict], examples: int) -> dict[str, list[dict]]:
    """Each stage's model calls as token groups (``harness.lm.meter.groups``), an example's share of the batch."""
    from harness.lm.meter import groups

    return {"compress": groups(compress, examples), "generate": groups(generate, examples)}


def served_tokens(generator: Generator, row: dict[str, Any]) -> list[dict]:
    """The generator's group from its own counts, where no model-layer call was metered (a server answered)."""
    return [
        {
            "model": str(getattr(generator, "name", "generator")),
            "adapter": None,
            "op": "generate",
            "n": 1,
            "read": row["prompt_tokens"],
            "written": row["completion_tokens"],
            "counted_by": "server usage",
        }
    ]


def _rows(
    examples: Sequence[Example],
    outcome: Sequence[Any],
    generator: Generator,
    seconds: tuple[float, float],
    batch: int,
) -> list[dict[str, Any]]:
    """One record per example: its scores, from its (compression, generation) pair and the per-example
    (compression, generation) ``seconds``, or its failure."""
    rows = []
    for ex, result in zip(examples, outcome, strict=True):
        if isinstance(result, Failure):
            log.warning("example %s failed in %s: %s", ex.id, result.stage, one_line(result.error))
            rows.append(_failed_record(ex, result, batch))
            continue
        comp, gen = result
        original = generator.count_tokens(render_documents([p.render() for p in ex.passages]))
        compressed = generator.count_tokens(render_documents(comp.documents))
        rows.append(_record(ex, comp, gen, original, compressed, *seconds, batch))
    return rows


def latency_pass(
    todo: Sequence[Example],
    warmup: Sequence[Example],
    compressor: Compressor,
    generator: Generator,
    records: RunRecords,
    progress: bool,
    store: ContextStore | None = None,
) -> float:
    """The papers' latency protocol: one example at a time after ``warmup`` untimed ones, each as if unseen
    (the model layer's call cache bypassed, every engine's prefix cache and the sentence-split memo emptied
    before it: the accuracy pass has just computed these prompts). Returns the model seconds spent. An example
    that fails is not timed (the accuracy pass has already stopped the run on it, or recorded it). An example whose
    context and batch-1 timing ``store`` holds is read back (``harness.reuse``): only its generation is timed."""
    from harness.lm import cache as lm_cache
    from harness.lm import forget_prefixes
    from harness.text import forget_splits

    def forget() -> None:
        forget_prefixes()
        forget_splits()

    reader = None if store is None else StoredContexts(store, compressor.name)

    def stored(e: Example, timed: bool) -> bool:
        return store is not None and e.id in store.records and (not timed or e.id in store.latency)

    spent = 0.0
    with lm_cache.bypassed():
        for e in warmup:
            forget()
            process([e], reader if stored(e, False) else compressor, generator, on_error="skip")
        for e in tqdm(todo, desc="latency (batch 1)", unit="ex", disable=not progress):
            forget()
            rows, secs = process([e], reader if stored(e, True) else compressor, generator, on_error="skip")
            spent += secs
            if stored(e, True):
                stamp(rows, store, latency=True)
            if "error" in rows[0]:  # failed in the accuracy pass too (on_error: skip): not timed
                continue
            keep = (
                "id",
                "compress_s",
                "generate_s",
                "stages",
                "tokens",
                "threads",
                "replayed",
                "reused",
                "compress_threads",
            )
            records.add_latency([{k: rows[0][k] for k in keep if k in rows[0]}])
    return spent


def _batches(items: Sequence[Any], size: int):
    for i in range(0, len(items), max(size, 1)):
        yield items[i : i + size]


# method settings added after runs were made, with the value those runs had: left out of the key at that value,
# and left out of the shared ``models`` block always (the method's own config carries what it uses), so that
# neither the earlier runs nor the other methods' runs change key when one is added
DEFAULTED_METHOD_SETTINGS = {"clue_context": "sentence", "reranker_input": "clue"}  # CompSelect (methods/compselect)
DEFAULTED_MODEL_SETTINGS = {"compselect": ("clue_context", "reranker_input")}


def _drop_defaulted_model_settings(key_cfg: dict[str, Any]) -> None:
    method = key_cfg.get("method")
    if isinstance(method, dict):
        for setting, default in DEFAULTED_METHOD_SETTINGS.items():
            if method.get(setting) == default:
                method.pop(setting)
    models = key_cfg.get("models")
    for model, settings in DEFAULTED_MODEL_SETTINGS.items():
        if isinstance(models, dict) and isinstance(models.get(model), dict):
            for setting in settings:
                models[model].pop(setting, None)


def _without_client_keys(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_client_keys(v) for k, v in node.items() if k not in CLIENT_KEYS}
    if isinstance(node, list):
        return [_without_client_keys(v) for v in node]
    return node


def key_config(cfg: DictConfig, keyed: bool = True) -> dict[str, Any]:
    """The part of a run config that names what a run computes (its key, in ``run.json``): execution settings
    left out (``EXECUTION_KEYS``, ``CLIENT_KEYS`` under the generator and the method, and the speculative decoding
    of the generator and the models, which gives the same tokens), and dataset settings at
    their defaults (``skip_unanswerable: false``, ``sample: first`` with any ``seed``) too, so that runs made
    before those settings existed keep their key and resume (so are the method settings of
    ``DEFAULTED_METHOD_SETTINGS`` at those values); so do the generator's ``prompt`` and ``answer`` at the
    paper's; moved modules and artifact folders keep their old names in it (``harness.renames``) for the same
    reason (``keyed=False``: the names as they are, for the context key, which hashes the files they name)."""
    key_cfg = {k: v for k, v in OmegaConf.to_container(cfg, resolve=True).items() if k not in EXECUTION_KEYS}
    for part in ("generator", "models"):  # the same greedy tokens with or without (harness.lm.speculative)
        if isinstance(key_cfg.get(part), dict):
            key_cfg[part].pop("speculative", None)
    for part in ("generator", "method"):
        if part in key_cfg:
            key_cfg[part] = _without_client_keys(key_cfg[part])
    g = key_cfg.get("generator") or {}
    for setting in ("prompt", "answer"):  # the paper's, as every run made before these settings existed
        if g.get(setting) == "paper":
            g.pop(setting)
    _drop_defaulted_model_settings(key_cfg)
    d = key_cfg["dataset"]
    if not d.get("skip_unanswerable", False):
        d.pop("skip_unanswerable", None)
    if d.get("sample", "first") == "first":
        d.pop("sample", None)
        d.pop("seed", None)
    return provenance.redact(renames.as_keyed(key_cfg) if keyed else key_cfg)


def context_key(cfg: DictConfig, compressor: Compressor) -> str | None:
    """The run's context key (``harness.reuse.identity``): None for a method that reads the generator."""
    from harness import reuse

    return reuse.identity(key_config(cfg, keyed=False), compressor)


def run(cfg: DictConfig, out_dir: str | Path) -> dict[str, Any]:
    """Run one (method, dataset, generator) configuration into ``out_dir`` and return its summary.

    The folder is locked meanwhile (``harness.runlock``: a second process fails with ``RunFolderBusy``). With
    ``shard=i/n`` the run takes every n-th example from the i-th into ``out_dir/shards/i-of-n`` (its summary in
    ``shard.json``), and the shard that completes the set merges them into ``out_dir`` (``harness.shards``); its
    summary then names the merged folder under ``merged_into``. A full disk raises ``DiskFull`` (one line: the
    file, the records kept, free space and re-run to resume)."""
    validate_config(cfg)
    shard = Shard.parse(cfg.get("shard"))
    folder = Path(out_dir) if shard is None else shard.folder(out_dir)
    try:
        with run_lock(folder):
            summary = _run(cfg, folder, shard)
        if shard is not None:
            summary["merged_into"] = merge_if_complete(shard.run_folder(folder), shard.count)
    except OSError as e:  # a full disk anywhere in the folder (run.json, summary, a merge): one line, resumable
        full = folder_disk_full(e, folder)
        if full is None:
            raise
        raise full from e
    return summary


def _run(cfg: DictConfig, out_dir: Path, shard: Shard | None) -> dict[str, Any]:
    """``run`` in its locked folder: all of the examples, or a shard's share of them."""
    t_start = time.perf_counter()
    loaded, mine = _examples(cfg, shard)  # validated before any model loads
    examples = loaded.examples
    key_cfg = key_config(cfg)
    records = RunRecords(out_dir, config_key(key_cfg), key_cfg)
    todo = [e for e in mine if "error" in records.predictions.get(e.id, {"error": "not yet run"})]
    lat = cfg.latency
    lat_sample = examples[: int(lat.samples)]
    if shard is not None:  # the shard's part of the unsharded run's latency sample
        lat_sample = shard.take(lat_sample)
    lat_todo = [e for e in lat_sample if e.id not in records.latency]
    warmup = list(examples[: int(lat.warmup)]) if lat_todo else []
    compressor = build_method(cfg.method)  # not bound yet: nothing loaded
    key, store = _context_store(cfg, compressor, bool(todo or lat_todo))
    missing = [] if store is None else store.missing(todo, lat_todo) + store.missing(warmup, [])
    if missing and cfg.get("contexts"):
        raise ConfigError(
            f"contexts={cfg.contexts}: {len(missing)} contexts (or batch-1 timings) of {cfg.method.name}/"
            f"{cfg.dataset.name} this run needs are not in it (e.g. example {missing[0]}): another sample, top_k, "
            "limit or latency.samples than the file's"
        )
    t_load = time.perf_counter()
    bind = store is None or bool(missing)
    generator, generator_loaded = _models(cfg, records, compressor, bind, (key, store))
    load_s = time.perf_counter() - t_load

    model_s = _accuracy_pass(cfg, todo, len(mine), shard, compressor, generator, records, store)
    if lat_todo:
        model_s += latency_pass(lat_todo, warmup, compressor, generator, records, cfg.progress, store)

    preds = [records.predictions[e.id] for e in mine]
    lats = [records.latency[e.id] for e in lat_sample if e.id in records.latency]
    wall_s = time.perf_counter() - t_start - load_s
    timing = {"wall_s": wall_s, "model_s": model_s, "load_s": load_s, "computed": len(todo)}
    summary = _summary(cfg, summarize(preds, lats), len(loaded.skipped), timing, generator_loaded)
    summary["run"]["method_bound"] = bind
    summary["reused_contexts"] = sum("reused" in r for r in preds)
    summary.update(
        method_info=compressor.describe() if bind else _reused_info(store),
        generator_info=generator.describe(),
        config=provenance.redact(OmegaConf.to_container(cfg, resolve=True)),
        config_key=records_key(records),
        packages=provenance.package_versions(),
        git=provenance.git_commit(),
        hardware=provenance.hardware(),
        finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )
    if shard is None:
        records.write_summary(summary)
    else:
        summary["shard"] = shard.describe(examples, mine)
        write_shard_summary(out_dir, summary)
    return summary


def _examples(cfg: DictConfig, shard: Shard | None) -> tuple[LoadedDataset, list[Example]]:
    """The loaded split (``load_dataset_report``) and the examples this run takes (a shard's share, or all)."""
    d = cfg.dataset
    skip = bool(d.get("skip_unanswerable", False))
    sample, seed = str(d.get("sample", "first")), int(d.get("seed", 0))
    loaded = load_dataset_report(
        DatasetSpec(d.name, d.path, int(d.top_k), d.rank, cfg.limit, skip, sample=sample, seed=seed)
    )
    mine = list(loaded.examples) if shard is None else shard.take(loaded.examples)
    if not mine:
        raise DatasetError(
            f"{d.path}: shard={cfg.shard} selects no example: the split gives {len(loaded.examples)} and shard i "
            "takes every n-th from the i-th"
        )
    return loaded, mine


def _accuracy_pass(
    cfg: DictConfig,
    todo: Sequence[Example],
    total: int,
    shard: Shard | None,
    compressor: Compressor,
    generator: Generator,
    records: RunRecords,
    store: ContextStore | None = None,
) -> float:
    """The examples not yet recorded, in batches of ``batch_size``, each batch recorded as it ends (a resume
    goes on from there); those whose context ``store`` holds first, read back (``harness.reuse``). Returns the
    model seconds spent."""
    on_error = str(cfg.get("on_error", "fail"))
    model_s = 0.0
    name = f"{cfg.method.name}/{cfg.dataset.name}" + ("" if shard is None else f" shard {shard.index}/{shard.count}")
    held = set() if store is None else {e.id for e in todo if e.id in store.records}
    groups = [([e for e in todo if e.id not in held], compressor)]
    if held:
        groups.insert(0, ([e for e in todo if e.id in held], StoredContexts(store, compressor.name)))
    with tqdm(total=total, initial=total - len(todo), desc=name, unit="ex", disable=not cfg.progress) as bar:
        for group, method in groups:
            for batch in _batches(group, int(cfg.batch_size)):
                rows, secs = process(batch, method, generator, int(cfg.batch_size), on_error)
                model_s += secs
                records.add_predictions(rows if method is compressor else stamp(rows, store))
                bar.update(len(batch))
    return model_s


def _summary(
    cfg: DictConfig, scores: dict[str, Any], skipped: int, timing: dict[str, Any], generator_loaded: bool
) -> dict[str, Any]:
    """The head of a run's summary: what ran, its scores (``summarize``), and how its time went."""
    d = cfg.dataset
    sample, seed = str(d.get("sample", "first")), int(d.get("seed", 0))
    wall_s, model_s = timing["wall_s"], timing["model_s"]
    return {
        "method": cfg.method.name,
        "dataset": d.name,
        "split": d.get("split"),
        "generator": cfg.generator.name,
        "profile": cfg.profile.name,
        "backbone": backbone(cfg),
        "sample": sample,
        "sample_seed": seed if sample == "shuffled" else None,
        **scores,
        "skipped_examples": skipped,
        "run": {
            "wall_s": wall_s,
            "model_s": model_s,
            "load_s": timing["load_s"],
            "generator_loaded_here": generator_loaded,
            "examples_computed": timing["computed"],
            "overhead": wall_s / model_s if model_s > 0 else None,
            "batch_size": int(cfg.batch_size),
            "latency_warmup": int(cfg.latency.warmup),
        },
    }


def backbone(cfg: DictConfig) -> dict[str, Any]:
    """The compressors' language models of a run: the switch (``backbone=``, conf/backbone/; None: the profile's
    own), the methods' shared LM and CompSelect's. Recorded for every method, since the run's config sets them."""
    models = cfg.get("models") or {}
    switch = cfg.get("backbone")
    return {
        "switch": switch.get("name") if switch else None,
        "lm": models.get("lm"),
        "compselect_lm": (models.get("compselect") or {}).get("lm"),
    }


def _models(
    cfg: DictConfig, records: RunRecords, compressor: Compressor, bind: bool, contexts: tuple[str | None, Any]
) -> tuple[Generator, bool]:
    """The run's generator (and whether this call loaded it), and the method bound to it unless ``bind`` is false
    (every context is read back: ``harness.reuse``); their weights checked against the folder's records, and the
    run's context key noted in ``run.json`` (``contexts``); the LM call cache and speculative decoding configured
    first, as the run asks. ``contexts``: the context key and the store (None without one)."""
    from harness.lm import cache as lm_cache
    from harness.lm import speculative

    lm_cfg = cfg.get("lm") or {}
    lm_cache.configure(lm_cfg.get("cache"), lm_cfg.get("cache_path"))
    speculative.configure(cfg.models.get("speculative"))  # every LM the method starts
    _THREADS["n"] = cfg.generator.get("threads")
    generator, generator_loaded = get_generator(cfg.generator)
    key, store = contexts
    if bind:
        compressor.bind(MethodEnv(count_tokens=generator.count_tokens, generator=generator))
        method = {"method_weights": weight_digests(compressor.describe()), "method_info": compressor.describe()}
    else:
        method = {k: store.method.get(k) for k in ("method_weights", "method_info")}
    gen_info = generator.describe()
    engine = [f"engine {gen_info.get('backend')} {gen_info.get('dtype')}"]  # bf16 and fp32 answers differ
    records.check_weights(list(method["method_weights"] or []) + weight_digests(gen_info) + engine)
    records.mark("contexts", {"key": key, **method})
    if gen_info.get("server"):
        records.note_server(gen_info["server"])
    spec = {"generator": (gen_info.get("lm") or {}).get("speculative"), "models": _plain(cfg.models.get("speculative"))}
    records.note("speculative", spec)
    return generator, generator_loaded


def _context_store(cfg: DictConfig, compressor: Compressor, needed: bool) -> tuple[str | None, ContextStore | None]:
    """The run's context key and where its contexts can be read back (``harness.reuse``): the file of
    ``contexts=FILE``, or, with ``reuse`` on and contexts ``needed``, the runs of the same key under another
    generator under ``results_dir`` (None when they hold none)."""
    from harness import reuse

    key = context_key(cfg, compressor)
    if path := cfg.get("contexts"):
        return key, reuse.from_file(path, key, cfg.method.name, cfg.dataset.name)
    if key is None or not cfg.get("reuse", True) or not needed:
        return key, None
    where = (cfg.profile.name, cfg.dataset.name, cfg.method.name)
    store = reuse.from_results(cfg.results_dir, key, where, str(cfg.generator.name))
    if store.records:
        log.info("%s: %d contexts read back from earlier runs (harness.reuse)", cfg.method.name, len(store.records))
    return key, store if store.records else None


def _reused_info(store: ContextStore | None) -> dict[str, Any]:
    """The method's ``describe()`` as the run that made the contexts recorded it (the method was not bound)."""
    return {**((store.method.get("method_info") if store else None) or {}), "contexts_reused": True}


def _plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


def weight_digests(info: Any) -> list[str]:
    """Every ``sha256`` value in a ``describe()`` tree: the weights a method or generator loaded."""
    if isinstance(info, dict):
        found = []
        for k, v in info.items():
            found += [v] if k == "sha256" and isinstance(v, str) else weight_digests(v)
        return found
    if isinstance(info, list | tuple):
        return [d for v in info for d in weight_digests(v)]
    return []


def records_key(records: RunRecords) -> str:
    return json.loads((records.folder / RUN).read_text())["key"]


def format_summary(s: dict[str, Any]) -> str:
    """A one-row table for the terminal."""

    def f(x: Any, fmt: str = "{:.2f}") -> str:
        return "-" if x is None else fmt.format(x)

    head = [
        "method",
        "dataset",
        "n",
        "SubEM",
        "EM",
        "F1",
        "CR",
        "CR(mean)",
        "compress_s",
        "generate_s",
        "total_s",
        "latency",
    ]
    row = [
        s["method"],
        s["dataset"],
        str(s["n"]),
        f(s["subem"]),
        f(s["em"]),
        f(s["f1"]),
        f(s["cr"], "{:.2f}x"),
        f(s["cr_mean"], "{:.2f}x"),
        f(s["compress_s"], "{:.3f}"),
        f(s["generate_s"], "{:.3f}"),
        f(s["total_latency_s"], "{:.3f}"),
        f"{s['latency_protocol']}(n={s['latency_n']})",
    ]
    widths = [max(len(a), len(b)) for a, b in zip(head, row, strict=True)]
    line = lambda cells: " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    out = [line(head), "-+-".join("-" * w for w in widths), line(row)]
    if s.get("kept_nothing"):
        k = round(s["kept_nothing"] * s["n"])
        out.append(f"kept nothing (empty context, closed-book answer) on {k}/{s['n']} examples")
    if s.get("truncated_examples"):
        stages = ", ".join(f"{k} {v['examples']}" for k, v in (s.get("truncated") or {}).items())
        out.append(f"prompts cut to fit their model on {s['truncated_examples']}/{s['n']} examples ({stages})")
    return "\n".join(out)
