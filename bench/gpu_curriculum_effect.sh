#!/usr/bin/env bash
# The curriculum effect test on one GPU with a 0.5B model (docs/learning.md, "The curriculum's effect,
# pre-registered"): bench/bench_curriculum_effect.py with bench/preregistered/curriculum_effect_gpu.yaml, whose
# predictions are registered as a rule (the profile's, computed in the same session before the first training step).
#
#   bash bench/gpu_curriculum_effect.sh [OUT]      # OUT: where summary.json, predictions.json, effect.png, the log go
#
# Sized to finish in under 10 minutes of one H200 (an estimate; not yet run on one): the warm start of a 0.52B
# model (64 questions, 20 epochs), its profile (64 x 4 levels x 8 samples), 2 arms x 5 seeds x 16 steps of
# 4 prompts x 8 generations, each model scored on 64 x 8 + 64 x 4 + 64 x 4 + 16 x 4 samples. LIMIT_S (default 570)
# stops it; what finished is kept (a run again continues from the finished runs).
#
# On a machine without the toolkit installed (a lent GPU machine with torch and transformers only), give what is
# missing beside the checkout: WHEELS (a folder of wheels: trl, datasets, hydra-core, omegaconf, antlr4, orjson,
# dill, multiprocess, matplotlib's if absent) and RAG_CURRICULUM_SHARED_DATA (a copy of ../shared/data/musique's
# train and dev samples under musique/).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-outputs/curriculum-effect-gpu}}
mkdir -p "$OUT"
RUN=${RUN:-/tmp/curriculum-effect-gpu}
if [ -n "${WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl
  export PYTHONPATH=/tmp/site:$PWD/src:$PWD/retriever/src:$PWD/plumbing/src${PYTHONPATH:+:$PYTHONPATH}
fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
status=0
timeout "${LIMIT_S:-570}" python3 bench/bench_curriculum_effect.py --prereg bench/preregistered/curriculum_effect_gpu.yaml \
  --out "$RUN" 2>&1 | tee "$OUT/log.txt" || status=$?
for f in summary.json predictions.json effect.png; do
  [ -f "$RUN/$f" ] && cp "$RUN/$f" "$OUT/$f"
done
exit $status
