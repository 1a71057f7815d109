#!/usr/bin/env bash
# Readers at size (issue 93): the Qwen2.5-Coder readers read the headline block's own contexts; no compressor runs
# for them. One results root (RESULTS, default results-readers) holds every step, so each read finds the remade
# contexts there by their context key (harness/reuse.py). Every step resumes where it stopped (re-run it).
#
#   scripts/readers.sh remake      # the 13 Table 2 rows + top1 under the headline generator (SmolLM2), shuffled 200
#   scripts/readers.sh backfill    # their texts and context keys into leaderboard/runs (backfill-contexts)
#   scripts/readers.sh read05b     # Qwen2.5-Coder-0.5B-Instruct reads every remade context
#   scripts/readers.sh clone05b    # from a fresh clone, no results root: the 0.5B reads the archive's own contexts of
#                                  # ROWS (default compselect) on DATASETS (default nq), the shuffled 200; no
#                                  # compressor model loads (summary.json: run.method_bound false)
#   scripts/readers.sh read15b     # the 1.5B (bash scripts/install.sh --qwen15b): the issue's minimum rows first,
#                                  # NQ 200, TriviaQA and HotpotQA 100; LIMIT=200 for the shuffled 200 of each;
#                                  # the archive's contexts (export-contexts, contexts=), so it runs from a fresh clone
#
# ROWS=a,b,... (remake, read05b) runs those rows only, in that order (the sweep runs each row's datasets before the
# next row's); DATASETS=nq,... those datasets only.
# DRY_RUN=1 prints each command instead of running it. Then archive the Qwen blocks only (the remade SmolLM2 runs
# are newer than the archived full-n headline runs and would replace them with 200-question ones):
#   python -m leaderboard archive RESULTS leaderboard/runs --generators <the Qwen blocks' names>
set -euo pipefail
cd "$(dirname "$0")/.."

TABLE2=naive,full,top1,bm25,bge_reranker,recomp_extr,recomp_abs,longllmlingua,selective_context,exit,refiner,compselect,finefilter,oracle_sentences
MINIMUM=naive,full,top1,bm25,bge_reranker,recomp_extr,refiner,compselect,finefilter,exit,oracle_sentences
given=${RESULTS:-}
RESULTS=${RESULTS:-results-readers}
PY=${PYTHON:-.venv/bin/python}
sample=(dataset.sample=shuffled dataset.seed=0 latency.samples=0 "results_dir=$RESULTS")

run() {
  if [ -n "${DRY_RUN:-}" ]; then echo "$*"; else "$@"; fi
}

# from_archive GENERATOR ROWS DATASETS LIMIT FILE: export the archive's own contexts of ROWS to FILE, then GENERATOR
# reads them (contexts=FILE: no compressor binds)
from_archive() {
  run "$PY" -m leaderboard export-contexts leaderboard/runs "$5" --variants "$2" --datasets "$3" --limit "$4"
  run "$PY" -m harness -m "generator=$1" "method=$2" "dataset=$3" "limit=$4" "contexts=$5" "${sample[@]}"
}

case "${1:-}" in
  remake) run "$PY" -m harness -m "method=${ROWS:-$TABLE2}" "dataset=${DATASETS:-nq,triviaqa,hotpotqa}" limit=200 "${sample[@]}" ;;
  backfill) run "$PY" -m leaderboard backfill-contexts "$RESULTS" leaderboard/runs ;;
  read05b)
    run "$PY" -m harness -m generator=qwen25_05b_vllm "method=${ROWS:-$TABLE2}" "dataset=${DATASETS:-nq,triviaqa,hotpotqa}" limit=200 \
      "${sample[@]}"
    ;;
  clone05b)
    RESULTS=${given:-results-clone}  # a root of its own: its runs must find no remade contexts to reuse
    sample=(dataset.sample=shuffled dataset.seed=0 latency.samples=0 "results_dir=$RESULTS")
    mkdir -p "$RESULTS"
    from_archive qwen25_05b_vllm "${ROWS:-compselect}" "${DATASETS:-nq}" 200 \
      "$(cd "$RESULTS" && pwd)/contexts-archive.jsonl.gz"
    ;;
  read15b)  # the archive's own contexts (every Table 2 row's are in its store): no compressor on any machine
    mkdir -p "$RESULTS"
    root="$(cd "$RESULTS" && pwd)"
    for part in "nq ${LIMIT:-200}" "triviaqa,hotpotqa ${LIMIT:-100}"; do
      read -r sets n <<<"$part"
      from_archive qwen25_15b_vllm "${ROWS:-$MINIMUM}" "$sets" "$n" "$root/contexts-15b-${sets//,/-}.jsonl.gz"
    done
    ;;
  *) echo "usage: $0 remake|backfill|read05b|clone05b|read15b" >&2; exit 2 ;;
esac
