#!/usr/bin/env bash
# Set everything up, then run the whole test suite (CPU only, offline; GPU / vLLM tests skip themselves).
#   bash scripts/test.sh [extra pytest arguments]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/setup.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python -m pytest -q -p no:cacheprovider "$@"
