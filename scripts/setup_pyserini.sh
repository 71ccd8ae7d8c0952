#!/usr/bin/env bash
# Create .venv-pyserini (if missing) for tests/tier_pyserini: pyserini 0.25.0 (Anserini 0.25.0, Lucene 9.9.1) from
# the registry next to rag-curriculum with its `retrieval` extra, so the toolkit's BM25 and pyserini's Lucene run
# side by side on the same corpus:
#   bash scripts/setup_pyserini.sh && .venv-pyserini/bin/python -m pytest -q -p no:cacheprovider tests/tier_pyserini
# Why 0.25.0: it is the newest pyserini whose Anserini jar runs on Java 11 and 17 (class files of Java 11); from
# pyserini 0.35.0 on (Anserini 0.35.0) the jar is built for Java 21 and fails to load on a Java 17 machine. Java
# itself is not installed here: pyserini needs a JRE/JDK 11+ on PATH or in JAVA_HOME at run time (the tier skips,
# saying so, where there is none).
# pyserini's own requirements (spacy, nmslib, lightgbm, ...) are mostly for features the tier does not use, and
# some do not build on every Python, so it is installed with --no-deps, then exactly what
# `from pyserini.search.lucene import LuceneSearcher` imports (its package __init__ imports the dense searchers
# too: torch, transformers, faiss, onnxruntime, openai, tiktoken, pillow): PyTorch pinned first (the CPU build on
# CPU-only machines, as scripts/setup_verl.sh), openai below 2 (pyserini 0.25 makes an OpenAI client with an
# empty key at import, which openai 2+ refuses) and transformers below 5 (the release line pyserini 0.25 was
# written against; and so huggingface-hub below 1, which that line requires, though `datasets` alone would
# take the newest). Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV=${VENV:-.venv-pyserini}
PYSERINI_VERSION=${PYSERINI_VERSION:-0.25.0}
. scripts/_venv.sh  # the environment, pip_install, missing, install_torch

# 1. PyTorch first, pinned: unpinned, pip would pull the multi-GB CUDA build.
install_torch

# 2. pyserini itself (its Anserini fat jar inside), without its dependencies.
mapfile -t todo < <(missing "pyserini==$PYSERINI_VERSION")
(( ${#todo[@]} == 0 )) || pip_install --no-deps "${todo[@]}"

# 3. What `from pyserini.search.lucene import LuceneSearcher` and `pyserini.index.lucene` import; pytest; and
#    rag-curriculum from this checkout, editable, with the retrieval extra (bm25s, numba: its BM25 index). All in
#    one pip call whenever one is missing, so pip resolves them together (datasets, which rag-curriculum needs, and
#    transformers < 5 must agree on huggingface-hub).
reqs=("pyjnius>=1.6" "numpy>=2.0" "pandas>=2.0" "tqdm" "scipy>=1.11" "scikit-learn" "faiss-cpu>=1.8"
      "transformers>=4.6,<5" "huggingface-hub<1.0" "onnxruntime" "openai>=1.0,<2" "tiktoken>=0.4" "pillow"
      "pytest>=8")
mapfile -t todo < <(missing "${reqs[@]}")
if (( ${#todo[@]} > 0 )) || ! "$PY" - "$PWD/src" <<'PY' 2>/dev/null; then
import sys
from pathlib import Path

import bm25s  # noqa: F401
import numba  # noqa: F401
import rag_retriever  # noqa: F401
import rag_curriculum

sys.exit(0 if Path(rag_curriculum.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()) else 1)
PY
  pip_install "${reqs[@]}" -e ./retriever -e ".[retrieval]"  # the retriever first: it resolves offline
fi

if [ -n "$installed" ] && ! "$PY" -c "from pyserini.search.lucene import LuceneSearcher; import rag_retriever, rag_curriculum.retrieval" 2>"$log"; then
  cat "$log" >&2
  echo "error: pyserini does not import in $VENV; remove $VENV and run this again" >&2
  exit 1
fi
