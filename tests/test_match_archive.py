"""``python -m tools.match_archive``: a re-made run is checked against the archived one, example by example, on
real archived records."""

from __future__ import annotations

import json
import shutil

from harness.provenance import REPO_ROOT
from tools.match_archive import main, match

HEADLINE = "embedded/smollm2-135m-instruct-vllm-documents_first-unlabelled"
RUN = f"{HEADLINE}/nq/bm25/dataset.sample=shuffled,dataset.seed=0"
ARCHIVE = REPO_ROOT / "leaderboard" / "runs"


def _remade(tmp_path, edit=None):
    """A results root holding a copy of the archived bm25 NQ run's first 5 records, with ``context`` text that
    hashes as the archive's does only where the text is the original (here: a changed one for the edited)."""
    dest = tmp_path / "results" / RUN
    dest.mkdir(parents=True)
    rows = [json.loads(line) for line in (ARCHIVE / RUN / "predictions.jsonl").read_text().splitlines()[:5]]
    if edit:
        edit(rows)
    (dest / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path / "results"


def test_an_unchanged_copy_matches_and_a_changed_prediction_or_context_is_counted(tmp_path, capsys):
    assert match(_remade(tmp_path / "a"), ARCHIVE) == [{"run": RUN, "n": 5, "same_context": 5, "same_prediction": 5}]

    def edit(rows):
        rows[0]["prediction"] += " (changed)"
        rows[1].pop("context_sha1")
        rows[1]["context"] = "another context"

    root = _remade(tmp_path / "b", edit)
    assert match(root, ARCHIVE) == [{"run": RUN, "n": 5, "same_context": 4, "same_prediction": 4}]
    assert main([str(root)]) == 1
    assert "5 shared, same context 4, same prediction 4" in capsys.readouterr().out


def test_a_second_readers_run_is_matched_with_the_first_readers_contexts(tmp_path):
    root = _remade(tmp_path)
    shutil.move(root / HEADLINE, root / "embedded" / "another-reader")
    rows = match(root, ARCHIVE, generator=HEADLINE.split("/")[1])
    assert rows == [
        {
            "run": RUN.replace(HEADLINE.split("/")[1], "another-reader"),
            "n": 5,
            "same_context": 5,
            "same_prediction": None,
        }
    ]
