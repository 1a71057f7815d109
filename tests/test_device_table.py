"""The per-device cost table (``benchmarks.device_table``) on tiny random models: the keys a cost model reads
(those of the GPU reference table) hold positive figures, and the decode calls wrote all their tokens."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


def assert_cost_model_layout(table: dict, engine: str) -> None:
    """What a cost model reads: ``decoders.<shape>.prefill.<n>.median_s``, ``decoders.<shape>.decode_<column>
    .<L>.median_s`` (the engine's column and ``decode_eager``), ``params``, ``weight_bytes``, ``config``;
    ``encoders.<shape>.forward.<B>x<T>.median_s``; and in ``meta`` the device and the settings."""
    assert table["status"] == "done" and table["errors"] == [] and table["skipped"] == []
    meta = table["meta"]
    for key in ("device_name", "threads", "torch", "transformers", "date", "weights", "engine", "repeats", "k"):
        assert meta[key] not in (None, ""), key
    assert meta["engine"] == engine and meta["tiny"] is True and meta["device_type"] == "cpu"
    assert isinstance(meta["amx"], bool) and isinstance(meta["avx512_bf16"], bool)
    (shape, dec), *_ = table["decoders"].items()
    assert shape == "tiny_llama" and dec["engine"] == engine
    assert dec["params"] > 0 and dec["weight_bytes"] == 4 * dec["params"]  # fp32
    assert dec["config"]["hidden_size"] == 64 and dec["config"]["num_hidden_layers"] == 2
    assert set(dec["prefill"]) == {"16", "64"}
    for entry in dec["prefill"].values():
        assert isinstance(entry["median_s"], float) and entry["median_s"] > 0 and entry["new_tokens"] == [1]
        assert entry["min_s"] <= entry["median_s"] and len(entry["runs_s"]) == meta["repeats"]
    column = f"decode_{engine}"
    assert dec["decode_eager_source"] == column and dec["decode_eager"] == dec[column]
    assert set(dec[column]) == {"32"}
    for entry in dec[column].values():
        assert isinstance(entry["median_s"], float) and entry["median_s"] > 0
        assert entry["new_tokens"] == [meta["k"] + 1] and entry["prefill_new_tokens"] == [1]  # no early stop
    enc = table["encoders"]["tiny_bert"]
    assert enc["params"] > 0 and enc["weight_bytes"] > 0 and enc["config"]["hidden_size"] == 64
    assert set(enc["forward"]) == {"4x16", "2x64"}
    assert all(isinstance(e["median_s"], float) and e["median_s"] > 0 for e in enc["forward"].values())


def test_the_tiny_table_has_the_cost_model_layout_on_the_transformers_engine(tmp_path):
    from benchmarks import device_table

    out = tmp_path / "cpu-tiny.json"
    returned = device_table.main(["--tiny", "--out", str(out)])
    written = json.loads(out.read_text())
    assert written["decoders"] == json.loads(json.dumps(returned["decoders"]))
    assert_cost_model_layout(written, "transformers")
    assert not list(tmp_path.glob("*.tmp"))  # written atomically, the temporary file replaced


def test_the_default_file_is_named_after_the_cpu_and_the_engine():
    from benchmarks import device_table

    args = device_table.parse(["--tiny"])
    assert args.out.parent.as_posix() == "leaderboard/data/devices"
    assert args.out.name.startswith("cpu-") and args.out.name.endswith("-transformers-tiny.json")
    assert device_table.parse([]).out.name == f"cpu-{device_table.cpu_slug()}.json"


@pytest.mark.slow
@pytest.mark.vllm
def test_the_tiny_table_runs_on_the_harness_vllm_engine(tmp_path):
    """The vLLM path (in a child process: the engine runs inside the process that starts it)."""
    pytest.importorskip("vllm")
    out = tmp_path / "cpu-tiny-vllm.json"
    cmd = [sys.executable, "-m", "benchmarks.device_table", "--tiny", "--engine", "vllm", "--out", str(out)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    table = json.loads(out.read_text())
    assert_cost_model_layout(table, "vllm")
    assert table["decoders"]["tiny_llama"]["engine_settings"]["engine_kwargs"]["enable_prefix_caching"] is True
