#!/usr/bin/env bash
# The paper's min-max run (RAG-RL 4.2, appendix B: Qwen2.5-7B-Instruct, 42 prompts x 7 generations, lr 1e-6, beta
# 0.01, 800 tokens, vLLM) for a few steps on the GPUs at hand, at the real settings, and checked:
#
#   INPUT=musique_ans_v1.0_train.jsonl N=5000 bash scripts/gpu_paper_run.sh [OUT]     # OUT: outputs/gpu-paper-run
#
# 1. `curriculum build recipe=musique-min-max tokenizer=MODEL`: the curriculum, every level's longest prompt in the
#    model's tokenizer (build.log);
# 2. `curriculum train --dry-run` on the layout chosen below: the batch, the prompt lengths against the engine's
#    context and the memory estimate per GPU (dry-run.log); where the recipes' 7 completions a pass would not fit,
#    the per-device batch the estimate offers is used;
# 3. GRPO for STEPS optimiser steps (train.log), GPU memory sampled every 2 s (gpu_memory.csv);
# 4. the checks (summary.json; exit status 1 when one fails): every step's rows in curriculum order from the first
#    row (curriculum_steps.jsonl, the ledger), the longest prompt the run checked equal to the build's, and the
#    peak memory per GPU beside the estimate.
#
# Layouts: 8 or more GPUs: the authors' 7 + 1 (recipes/accelerate/zero2-7gpu.yaml, `trl vllm-serve` on GPU 7 with
# --max-model-len 8192); fewer: one GPU (zero2-offload-1gpu.yaml: DeepSpeed ZeRO-2, optimizer on the CPU, ~115 GB of
# CPU memory for 7B). Needs the [train] extra, vLLM, DeepSpeed and accelerate; MODEL a Hub id (network or the cache)
# or a directory. Expected time (estimated, not measured: no GPU was at hand when this was written): 7 + 1 H100s,
# about 5 min to start (vLLM server, DeepSpeed) + 2 to 4 min a step; one 80 GB GPU at 2 completions a pass, about 5
# min to start + 6 to 10 min a step. STEPS=3 (default): 15 to 35 min.
#
# SMOKE=1 MODEL=DIR (a tiny model directory): the same four steps on a CPU, at 2 prompts x 2 generations and 16
# tokens without vLLM or DeepSpeed, in about a minute: what the tests run, so the script is known to work.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-outputs/gpu-paper-run}}
INPUT=${INPUT:-../shared/data/musique/musique_ans_v1.0_train.sample100.jsonl}
MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct}
N=${N:-all}                 # questions in the curriculum (the paper: 5,000; the shared sample holds 100)
STEPS=${STEPS:-3}
CURRICULUM=${CURRICULUM:-curriculum}
PYTHON=${PYTHON:-python3}
PORT=${PORT:-8000}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false

"$CURRICULUM" build recipe=musique-min-max "input=$INPUT" "n=$N" "tokenizer=$MODEL" "out=$OUT/musique-min-max" \
  overwrite=true --no-progress 2>&1 | tee "$OUT/build.log"

common=("recipe=rag-rl-min-max" "data.shards=$OUT/musique-min-max" "model.name_or_path=$MODEL"
        "grpo.max_steps=$STEPS" "run.output_dir=$OUT/train" "run.resume=null" "run.save_final=false"
        "grpo.save_strategy=no")
server_pid=""
monitor_pid=""
cleanup() {
  [[ -n "$monitor_pid" ]] && kill "$monitor_pid" 2>/dev/null || true
  [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null || true
}
trap cleanup EXIT
if [[ -n "${SMOKE:-}" ]]; then
  gpus=0
  layout=smoke
  launch=("$CURRICULUM" train)
  extra=(grpo.use_vllm=false grpo.bf16=false grpo.use_cpu=true model.dtype=float32 batch.prompts_per_step=2
         batch.per_device_completions=2 grpo.num_generations=2 grpo.max_completion_length=16
         grpo.activation_checkpointing=false grpo.dataloader_pin_memory=false)
  dry_extra=()
  config=""
else
  gpus=$(nvidia-smi -L | wc -l)
  if (( gpus >= 8 )); then
    layout=7+1
    config=zero2-7gpu.yaml
    export CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6
    extra=(grpo.vllm_mode=server "grpo.vllm_server_base_url=http://127.0.0.1:$PORT")
    dry_extra=(batch.num_processes=7)
  else
    layout=1
    config=zero2-offload-1gpu.yaml
    export CUDA_VISIBLE_DEVICES=0
    extra=()
    dry_extra=()
  fi
  launch=(accelerate launch --config_file "recipes/accelerate/$config" -m rag_curriculum.train)
fi

# The dry run: every check before the first step, and the memory estimate per GPU for each launcher config.
"$CURRICULUM" train "${common[@]}" ${extra[@]+"${extra[@]}"} ${dry_extra[@]+"${dry_extra[@]}"} --dry-run \
  2>&1 | tee "$OUT/dry-run.log"
if [[ -n "$config" ]]; then  # the recipes' 7 a pass, or the per-device batch the estimate says fits this GPU
  fits=$(grep -F "[$config]" "$OUT/dry-run.log" | grep -o 'batch.per_device_completions=[0-9]*' | head -1 || true)
  [[ -n "$fits" ]] && extra+=("$fits") && echo "memory: $fits (the estimate's, for $config)"
fi

if [[ "$layout" == 7+1 ]]; then
  CUDA_VISIBLE_DEVICES=7 trl vllm-serve --model "$MODEL" --max-model-len 8192 --port "$PORT" > "$OUT/vllm-serve.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 180); do
    curl -sf "http://127.0.0.1:$PORT/health/" > /dev/null 2>&1 && break
    sleep 5
  done
fi
if (( gpus > 0 )); then
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 2000 > "$OUT/gpu_memory.csv" &
  monitor_pid=$!
fi

start=$(date +%s)
status=0
"${launch[@]}" "${common[@]}" ${extra[@]+"${extra[@]}"} 2>&1 | tee "$OUT/train.log" || status=$?
seconds=$(( $(date +%s) - start ))
cleanup

"$PYTHON" - "$OUT" "$STEPS" "$seconds" "$layout" "$status" "${config:-}" <<'EOF'
import json
import re
import sys
from pathlib import Path

out, steps, seconds, layout, status, config = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:]
checks, facts = {}, {"layout": layout, "steps_asked": steps, "train_seconds": seconds, "train_status": int(status)}
ledger = out / "train" / "curriculum_steps.jsonl"
records = [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []
seen = [i for r in records for i in r["curriculum_index"]]
checks["every step in the ledger"] = len(records) == steps
checks["rows in curriculum order from the first"] = bool(seen) and seen == list(range(len(seen)))
checks["no step out of order"] = bool(records) and all(r.get("in_order", True) for r in records)
manifest = json.loads((out / "musique-min-max" / "manifest.json").read_text())
plan_file = out / "train" / "train_plan.json"
plan = json.loads(plan_file.read_text()) if plan_file.exists() else {}
built = (manifest.get("prompt_tokens") or {}).get("longest", {}).get("tokens")
facts["longest_prompt_by_level"] = (manifest.get("prompt_tokens") or {}).get("max_by_level")
facts["longest_prompt_checked"] = plan.get("longest_prompt_tokens")
checks["the run checked the longest prompt"] = built is not None and plan.get("longest_prompt_tokens") == built
dry = (out / "dry-run.log").read_text()
line = next((x for x in dry.splitlines() if config and f"[{config}]" in x), "")
estimate = re.search(r"(\d+) GB per GPU", line)
facts["estimate_gb_per_gpu"] = int(estimate.group(1)) if estimate else None
memory = out / "gpu_memory.csv"
if memory.exists():
    used = [int(x.split(",")[1]) for x in memory.read_text().splitlines() if x.count(",") == 1]
    facts["peak_gb_per_gpu"] = round(max(used) / 1024, 1) if used else None
    checks["peak memory measured"] = bool(used)
checks["training exited 0"] = int(status) == 0
summary = {"ok": all(checks.values()), "checks": checks, **facts}
(out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
print(json.dumps(summary, indent=2))
sys.exit(0 if summary["ok"] else 1)
EOF
