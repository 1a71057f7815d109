#!/usr/bin/env bash
# Compressors at size (issue 94): every language-model compressor on Qwen2.5-Coder-0.5B (backbone=qwen05b),
# contexts made once and read by the headline reader (SmolLM2) and by the 0.5B reader. Every step resumes where it
# stopped (re-run it).
#
#   scripts/backbone.sh probe      # the prompted and scoring methods on the first 20 shuffled *train* questions of
#                                  # each dataset, on both backbones (research/backbone/probe.py reads them)
#   scripts/backbone.sh compress   # the LM compressors on backbone=qwen05b, the shuffled 200, read by SmolLM2
#   scripts/backbone.sh read05b    # the 0.5B reads every context `compress` made (harness.reuse: no compressor runs)
#   scripts/backbone.sh time       # compress seconds of both backbones in one pass on one machine (tools.latency_pass,
#                                  # N=20 questions a dataset), written to the archive's latency folder
#
# ROWS=a,b,... those methods only; DATASETS=nq,... those datasets only; DRY_RUN=1 prints each command.
set -euo pipefail
cd "$(dirname "$0")/.."

PROMPTED=recomp_abs,refiner,edc2,compselect_direct,longllmlingua,selective_context
# edc2_no_escape: EDC2 without its escape line, chosen on train questions (research/backbone/README.md)
LM_ROWS=compselect,finefilter,$PROMPTED,edc2_no_escape
PY=${PYTHON:-.venv/bin/python}
DATASETS=${DATASETS:-nq,triviaqa,hotpotqa}

run() {
  if [ -n "${DRY_RUN:-}" ]; then echo "$*"; else "$@"; fi
}

case "${1:-}" in
  probe)
    for backbone in backbone=qwen05b ""; do
      run "$PY" -m harness -m $backbone "method=${ROWS:-$PROMPTED}" "dataset=$DATASETS" dataset.split=train \
        dataset.sample=shuffled dataset.seed=0 limit=20 latency.samples=0 results_dir=results-backbone-probe
    done
    ;;
  compress)
    run "$PY" -m harness -m backbone=qwen05b "method=${ROWS:-$LM_ROWS}" "dataset=$DATASETS" limit=200 \
      dataset.sample=shuffled dataset.seed=0 latency.samples=0 results_dir=results-backbone
    ;;
  read05b)
    run "$PY" -m harness -m generator=qwen25_05b_vllm backbone=qwen05b "method=${ROWS:-$LM_ROWS}" "dataset=$DATASETS" \
      limit=200 dataset.sample=shuffled dataset.seed=0 latency.samples=0 results_dir=results-backbone
    ;;
  time)
    variants=full
    IFS=, read -ra methods <<<"${ROWS:-$LM_ROWS}"
    for m in "${methods[@]}"; do variants+=",$m,$m[backbone=qwen05b]"; done
    run "$PY" -m tools.latency_pass --variants "$variants" --datasets "$DATASETS" --n "${N:-20}" \
      --out "leaderboard/runs/latency/latency-pass-backbone-$(date +%Y%m%d).jsonl"
    ;;
  *) echo "usage: $0 probe|compress|read05b|time" >&2; exit 2 ;;
esac
