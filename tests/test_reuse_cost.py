"""``python -m tools.reuse_cost``: a second reader's cost against its generation time, summed over its runs."""

from __future__ import annotations

import json

from tools.reuse_cost import main, runs, totals

READER = "gemma3-270m-vllm-completion_k3-first_line"


def _run(root, dataset, method, n, wall, load, gen_per_example, bound=False, reader=READER):
    folder = root / "embedded" / reader / dataset / method / "dataset.sample=shuffled,dataset.seed=0"
    folder.mkdir(parents=True)
    summary = {
        "dataset": dataset,
        "method": method,
        "n": n,
        "run": {"wall_s": wall, "load_s": load, "method_bound": bound},
        "batched": {"generate_s": gen_per_example},
        "reused_contexts": 0 if bound else n,
    }
    (folder / "summary.json").write_text(json.dumps(summary))


def test_cost_sums_wall_and_load_over_the_readers_runs_only(tmp_path, capsys):
    _run(tmp_path, "nq", "bm25", 200, wall=100.0, load=20.0, gen_per_example=0.5)
    _run(tmp_path, "nq", "compselect", 200, wall=110.0, load=0.0, gen_per_example=0.5)
    _run(tmp_path, "hotpotqa", "bm25", 100, wall=60.0, load=0.0, gen_per_example=0.5, bound=True)
    _run(tmp_path, "nq", "bm25", 200, wall=999.0, load=0.0, gen_per_example=0.1, reader="another-reader")
    table = totals(runs(tmp_path, READER))
    assert table["nq"]["cost_s"] == 230.0 and table["nq"]["generate_s"] == 200.0
    assert abs(table["nq"]["ratio"] - 1.15) < 1e-9
    assert table["all"]["runs"] == 3 and table["all"]["bound"] == 1 and table["all"]["reused"] == 400
    assert abs(table["all"]["ratio"] - 290 / 250) < 1e-9
    assert main([str(tmp_path), READER]) == 0  # 1.16x is within the 1.2x bar
    out = capsys.readouterr().out
    assert "| all | 3 | 500 | 400 | 0 | 1 | 290 | 250 | 1.16x |" in out and "LM cache" not in out
    assert main([str(tmp_path), READER, "--bar", "1.1"]) == 1


def test_no_run_of_the_reader_is_an_error_line(tmp_path, capsys):
    assert main([str(tmp_path), READER]) == 1
    assert "no finished run" in capsys.readouterr().out


def test_records_with_cached_generations_are_counted_and_flagged(tmp_path, capsys):
    """A batch that replayed generations records seconds it did not spend: the table counts its records and says
    the ratio flatters them."""
    _run(tmp_path, "nq", "compselect", 3, wall=1.0, load=0.0, gen_per_example=1.0)
    folder = next(tmp_path.rglob("summary.json")).parent
    rows = [{"id": "a", "replayed": {"compress_calls": 0, "generate_calls": 2}}, {"id": "b"}, {"id": "c"}]
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert totals(runs(tmp_path, READER))["all"]["cached"] == 1
    assert main([str(tmp_path), READER]) == 0
    assert "1 records took generations from the LM cache" in capsys.readouterr().out
