"""Trained artifacts checked against their manifest before they load (``check_artifact``).

A method's trained folder (a LoRA adapter, a CSM head) sits in or beside a ``manifest.json`` that its training
command wrote. Two manifest layouts name the files' SHA-256:

- ``files``: ``{path relative to the manifest's folder: sha256}`` (CSM heads; EXIT's classifier);
- ``artifacts``: ``{sub-folder: sha256 of its adapter_model.safetensors}`` (CompSelect's adapters and reranker).

Only the files a manifest lists are checked: CompSelect's manifest hashes each stage's weights but not its
``adapter_config.json``, so that file is not checked. A folder with no manifest in it or its parent (an adapter
trained to a folder of one's own) is not checked at all, and says so in the log. A listed file that is missing,
unreadable or whose hash differs raises one ``ArtifactError`` line naming the file, the expected and the found
hash and the command that re-makes it; a folder that is not there at all raises one too.

``trained_through`` reads which generator's replies trained an artifact (labels, likelihoods), where its manifest
names one; a method records it in ``describe()`` and ``warn_if_trained_elsewhere`` says so when the run's generator
is another (the leaderboard marks such rows).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from harness.validate import ConfigError

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"


class ArtifactError(ConfigError):
    """A trained artifact missing, unreadable or not the one its manifest names (one line, no traceback)."""


def _manifest(folder: Path) -> Path | None:
    for candidate in (folder / MANIFEST, folder.parent / MANIFEST):
        if candidate.is_file():
            return candidate
    return None


def trained_through(folder: str | Path) -> str | None:
    """The generator whose replies trained the artifact in ``folder``, as its manifest (in it or its parent) names
    it: ``generator.name`` (CSM heads) or ``config.generator.name`` (CompSelect's stages); None where it names none."""
    found = _manifest(Path(folder))
    try:
        manifest = json.loads(found.read_text()) if found else {}
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict):
        return None
    config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    for generator in (manifest.get("generator"), config.get("generator")):
        if isinstance(generator, dict) and isinstance(generator.get("name"), str):
            return generator["name"]
    return None


def warn_if_trained_elsewhere(method: str, folder: str | Path, generator: object, remake: str) -> None:
    """One warning line when the artifact in ``folder`` was trained through another generator than ``generator``
    (the run's): it learned that generator's replies, prompt included."""
    through, serving = trained_through(folder), getattr(generator, "name", None)
    if through and serving and through != serving:
        log.warning(
            "%s: %s was trained through generator %r, not this run's %r (retrain: %s)",
            method,
            folder,
            through,
            serving,
            remake,
        )


def expected_hashes(folder: str | Path) -> dict[Path, str]:
    """The files under ``folder`` its manifest (in it or in its parent) lists, with their SHA-256; empty when
    there is no manifest or it lists none of them."""
    folder = Path(folder)
    found = _manifest(folder)
    if found is None:
        return {}
    try:
        data = json.loads(found.read_text())
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{found}: unreadable manifest ({type(e).__name__}: {e})") from None
    root = found.parent
    listed: dict[Path, str] = {}
    for rel, digest in (data.get("files") or {}).items():
        if isinstance(digest, str):
            listed[root / rel] = digest
    for sub, digest in (data.get("artifacts") or {}).items():
        if isinstance(digest, str):
            listed[root / sub / "adapter_model.safetensors"] = digest
    target = folder.resolve()
    return {p: d for p, d in listed.items() if p.resolve().is_relative_to(target)}


def switch_of(folder: Path) -> str:
    """`` backbone=<switch>`` for an artifact of a switched backbone (``artifacts/<profile>-<switch>/...``, where
    ``conf/backbone/<switch>.yaml`` exists): it is trained with the same switch. Kept here, not in the methods,
    because a method package's code is part of its contexts' key (``harness.reuse.source_digest``)."""
    from harness.provenance import REPO_ROOT

    for part in folder.parts:
        switch = part.partition("-")[2]
        if switch and (REPO_ROOT / "conf" / "backbone" / f"{switch}.yaml").is_file():
            return f" backbone={switch}"
    return ""


def check_artifact(folder: str | Path, remake: str) -> None:
    """Check ``folder``'s files against its manifest's SHA-256 (see the module docstring); ``remake`` is the
    command that trains them again. Raises ``ArtifactError`` on the first missing, unreadable or changed file."""
    from harness.lm.models import file_sha256

    folder = Path(folder)
    if not folder.exists():
        raise ArtifactError(f"{folder}: trained artifact not found; re-make it with `{remake}{switch_of(folder)}`")
    hashes = expected_hashes(folder)
    if not hashes:
        log.info("%s: no manifest lists its files; not checked", folder)
    for path, expected in sorted(hashes.items()):
        try:
            found = file_sha256(path)
        except OSError as e:
            found = f"unreadable ({type(e).__name__}: {e.strerror or e})"
        if found != expected:
            raise ArtifactError(
                f"{path}: SHA-256 does not match its manifest: expected {expected}, found {found}; "
                f"re-make it with `{remake}`"
            )
