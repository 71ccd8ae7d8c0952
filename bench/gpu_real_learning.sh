#!/usr/bin/env bash
# Gemma 3 270M, GRPO on the rows it answers sometimes, against a learning-rate-0 control, on one GPU, in one run of
# at most 10 minutes (docs/learning.md, "Gemma 3 270M with GRPO"):
#
#   bash bench/gpu_real_learning.sh [OUT]          # OUT: where summary.json, learning.png and the log go
#
# The run: the GGUF converted once; a warm start on the answer format (32 rows, 2 epochs); `curriculum partition`
# of the 100 HotpotQA train rows at level 1 with 8 samples each, keeping its learnable/ bucket (0 < correct < 8);
# 100 GRPO steps of 2 prompts x 8 generations on those rows, float32, the RAG-RL reward; the held-out HotpotQA
# validation rows (100 x 4 samples) scored before and after, and the trained model paired against the control on
# the same questions and sampling seed. Citation F1 is named in advance as the primary metric (RAG-RL's citation
# reward is what a short run moves first).
#
# On a machine without the toolkit installed (a lent GPU machine with torch and transformers only), give what is
# missing beside the checkout: GEMMA_PARTS (the .gguf file split into parts, concatenated in name order), WHEELS (a
# folder of wheels: trl, datasets, hydra-core, omegaconf, antlr4, orjson, gguf, dill, multiprocess) and
# RAG_CURRICULUM_SHARED_DATA (a copy of ../shared/data/hotpotqa's two files under hotpotqa/).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-outputs/real-learning-gpu-learnable}}
mkdir -p "$OUT"
RUN=${RUN:-/tmp/real-learning-gpu-learnable}
if [ -n "${WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl
  export PYTHONPATH=/tmp/site:$PWD/src:$PWD/retriever/src${PYTHONPATH:+:$PYTHONPATH}
fi
MODEL=()
if [ -n "${GEMMA_PARTS:-}" ]; then
  cat "$GEMMA_PARTS"/g* > /tmp/gemma-3-270m-q4_k_m.gguf
  MODEL=(--model /tmp/gemma-3-270m-q4_k_m.gguf)
fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
status=0
timeout "${LIMIT_S:-540}" python3 bench/bench_real_learning.py "${MODEL[@]}" --warm-start 32 --learnable 8 \
  --seeds 1 --steps 100 --prompts 2 --generations 8 --lr 3e-5 --train-rows 100 --eval-rows 100 --eval-samples 4 \
  --eval-batch 64 --check-steps 1 --override grpo.use_cpu=false --override grpo.bf16=false \
  --override batch.per_device_completions=16 --out "$RUN" 2>&1 | tee "$OUT/log.txt" || status=$?
for f in summary.json learning.png learnable-partition/partition.json run-grpo-seed0/curriculum_steps.jsonl; do
  [ -f "$RUN/$f" ] && cp "$RUN/$f" "$OUT/$(basename "$f")"
done
exit $status
