#!/usr/bin/env bash
# The leaderboard snapshot on a representative sample: every method variant of conf/method x nq, triviaqa,
# hotpotqa, on the first 200 questions of a seeded permutation of each split (dataset.sample=shuffled
# dataset.seed=0), into the results root results-snapshot, one run after another in one Hydra multirun (one
# process: the generator loads once). Resumable: re-running skips the examples already recorded.
#
#   scripts/snapshot.sh [baselines|trained|all|table2] [extra Hydra overrides...]    (default: all)
#
# baselines: the variants that need no trained artifact; trained: those that load models trained here
# (CompSelect and its ablations, FineFilter, the CSM surrogates, EXIT). Every variant of conf/method is
# in exactly one group (tests/test_configs.py checks). table2: the rows of the papers' Table 2 on every question of
# each shipped test split (limit=null: NQ 800, TriviaQA 400, HotpotQA 400); their folders are the 200-question
# runs', so on one machine it resumes after them. shard=i/n splits it over machines (harness.shards; the last
# shard merges); a shard does not skip what its run folder already holds, so shard a fresh RESULTS root.
# RESULTS=<dir> changes the results root, DRY_RUN=1 prints the command instead of running it. Then:
# python -m leaderboard archive results-snapshot leaderboard/runs, and
# python -m leaderboard publish leaderboard/runs leaderboard/snapshot.
set -euo pipefail
cd "$(dirname "$0")/.."

BASELINES=(
  naive full top1 oracle_sentences
  bm25 bm25_sentences_rate0.25 bm25_sentences_top1
  bge_reranker bge_reranker_sentences_rate0.25 bge_reranker_sentences_top1 bge_reranker_v2_m3
  recomp_extr recomp_abs refiner
  longllmlingua longllmlingua_rate0.55
  selective_context selective_context_ratio0.68
  ci_oracle ci_oracle_sentences
  edc2 edc2_no_escape
  bm25_sentences_budget bge_reranker_sentences_budget recomp_extr_budget longllmlingua_budget
  selective_context_budget
)
TRAINED=(
  compselect compselect_direct compselect_no_extractor compselect_no_reranker compselect_no_truncator
  compselect_random_truncation
  finefilter
  csm csm_e2e csm_sentences
  exit exit_budget
)

TABLE2=(
  naive full bm25 bge_reranker recomp_extr recomp_abs longllmlingua selective_context exit refiner
  compselect finefilter oracle_sentences
)

group=${1:-all}
limit=200
[ $# -gt 0 ] && shift
case "$group" in
  baselines) methods=("${BASELINES[@]}") ;;
  trained) methods=("${TRAINED[@]}") ;;
  all) methods=("${BASELINES[@]}" "${TRAINED[@]}") ;;
  table2) methods=("${TABLE2[@]}"); limit=null ;;
  *) echo "usage: $0 [baselines|trained|all|table2] [hydra overrides...]" >&2; exit 2 ;;
esac

# generator=a,b first: Hydra's sweep runs the first list outermost, so each generator's runs come together and a
# generator switch (which closes the previous one's engines: harness.runner.release_generators) happens once
readers=() rest=()
for a in "$@"; do
  case "$a" in generator=*) readers+=("$a") ;; *) rest+=("$a") ;; esac
done
cmd=(
  "${PYTHON:-.venv/bin/python}" -m harness -m
  ${readers[@]+"${readers[@]}"}
  "method=$(IFS=,; echo "${methods[*]}")"
  dataset=nq,triviaqa,hotpotqa dataset.sample=shuffled dataset.seed=0 "limit=$limit"
  "results_dir=${RESULTS:-results-snapshot}"
  ${rest[@]+"${rest[@]}"}
)
if [ -n "${DRY_RUN:-}" ]; then
  echo "${cmd[*]}"
else
  exec "${cmd[@]}"
fi
