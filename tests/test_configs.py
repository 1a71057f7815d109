"""The config tree and the scripts that walk it: every method variant of conf/method is in exactly one group of
scripts/snapshot.sh, and the script runs each group on the shuffled sample."""

from __future__ import annotations

import fnmatch
import re
import subprocess

import pytest

from harness.provenance import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "snapshot.sh"
TRAINED = ("compselect*", "finefilter", "csm*", "exit*")  # the variants that load models trained here


def variants() -> set[str]:
    return {p.stem for p in (REPO_ROOT / "conf" / "method").glob("*.yaml")}


def groups() -> dict[str, list[str]]:
    """The script's bash arrays ``NAME=( ... )``, comments left out."""
    text = SCRIPT.read_text()
    found = re.findall(r"^([A-Z0-9_]+)=\((.*?)\)", text, flags=re.M | re.S)
    return {name: re.sub(r"#.*", "", body).split() for name, body in found}


def dry_run(*args: str) -> tuple[int, str]:
    done = subprocess.run(
        ["bash", str(SCRIPT), *args], env={"DRY_RUN": "1", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True
    )
    return done.returncode, done.stdout + done.stderr


def test_every_method_variant_is_in_exactly_one_snapshot_group():
    g = groups()
    assert set(g) == {"BASELINES", "TRAINED", "TABLE2"}
    listed = g["BASELINES"] + g["TRAINED"]
    assert sorted(listed) == sorted(variants())  # each once: no variant missing, none twice, none unknown
    trained = lambda v: any(fnmatch.fnmatchcase(v, p) for p in TRAINED)  # noqa: E731
    assert all(trained(v) for v in g["TRAINED"]) and not any(trained(v) for v in g["BASELINES"])


@pytest.mark.parametrize("group", ["baselines", "trained", "all"])
def test_snapshot_script_runs_each_group_on_the_shuffled_sample_of_every_dataset(group):
    rc, out = dry_run(group, "generator.threads=2")
    assert rc == 0, out
    args = out.split()
    assert args[1:4] == ["-m", "harness", "-m"]
    methods = next(a for a in args if a.startswith("method=")).removeprefix("method=").split(",")
    g = groups()
    want = {"baselines": g["BASELINES"], "trained": g["TRAINED"], "all": g["BASELINES"] + g["TRAINED"]}[group]
    assert methods == want
    for a in ("dataset=nq,triviaqa,hotpotqa", "dataset.sample=shuffled", "dataset.seed=0", "limit=200"):
        assert a in args
    assert "results_dir=results-snapshot" in args and args[-1] == "generator.threads=2"


# issue 50: the papers' Table 2 rows, on every shipped test question
TABLE2_ROWS = {"naive", "full", "bm25", "bge_reranker", "recomp_extr", "recomp_abs", "longllmlingua"}
TABLE2_ROWS |= {"selective_context", "exit", "refiner", "compselect", "finefilter", "oracle_sentences"}


def test_snapshot_script_runs_table2_rows_on_every_question_into_the_snapshot_folders():
    rc, out = dry_run("table2", "shard=1/4")
    assert rc == 0, out
    args = out.split()
    methods = next(a for a in args if a.startswith("method=")).removeprefix("method=").split(",")
    assert set(methods) == TABLE2_ROWS and len(methods) == len(TABLE2_ROWS) and variants() >= TABLE2_ROWS
    for a in ("dataset=nq,triviaqa,hotpotqa", "dataset.sample=shuffled", "dataset.seed=0", "limit=null"):
        assert a in args  # the 200-question runs' sample and folders, every question of it
    assert "limit=200" not in args and "results_dir=results-snapshot" in args and args[-1] == "shard=1/4"


def test_snapshot_script_refuses_an_unknown_group():
    rc, out = dry_run("everything")
    assert rc == 2 and "usage" in out
