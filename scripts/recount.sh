#!/usr/bin/env bash
# Recount the tokens of the headline's Table 2 rows (issue 83): each question's model calls with what they read and
# wrote (harness.lm.meter), exact per question, on the shuffled 200 of each dataset, then gather them for the
# "At the readers' scale" view.
#
#   scripts/recount.sh [nq triviaqa hotpotqa]      (default: all three, in that order; resumable)
#
# Per dataset, two passes of the 13 Table 2 rows under the headline generator, latency pass off:
#   1. batch 8 into results-recount/batched: computes every call and fills the model layer's call cache (about 75
#      minutes a dataset on 2 cores with no cache; minutes where the cache already holds the calls);
#   2. batch 1 into results-recount/batch1: the same prompts replayed from the cache, so that every record holds its
#      own calls (``each``, ``calls``), not a share of its batch's.
# The results roots are their own: a 200-question recount never stands in for the published 800/400/400 runs.
# Then python -m tools.recount results-recount/batch1 --out leaderboard/runs/scale writes the view's file: the cells
# recounted replace their old lines, the other datasets' cells stay.
set -euo pipefail
cd "$(dirname "$0")/.."
TABLE2=naive,full,bm25,bge_reranker,recomp_extr,longllmlingua,selective_context,exit,recomp_abs,refiner,compselect,finefilter,oracle_sentences
SAMPLE=(dataset.sample=shuffled dataset.seed=0 limit=200 latency.samples=0)
for d in "${@:-nq triviaqa hotpotqa}"; do
  for ds in $d; do
    .venv/bin/python -m harness -m "method=$TABLE2" "dataset=$ds" "${SAMPLE[@]}" results_dir=results-recount/batched
    .venv/bin/python -m harness -m "method=$TABLE2" "dataset=$ds" "${SAMPLE[@]}" batch_size=1 \
      results_dir=results-recount/batch1
  done
done
.venv/bin/python -m tools.recount results-recount/batch1 --out leaderboard/runs/scale
