#!/usr/bin/env bash
# The GPU pre-flight of the paper's min-max run (RAG-RL 4.2, appendix B: Qwen2.5-7B-Instruct, 42 prompts x 7
# generations, lr 1e-6, beta 0.01, 800 tokens, vLLM): the run's worst minutes, at its real settings, before its hours.
#
#   INPUT=musique_ans_v1.0_train.jsonl N=5000 bash scripts/gpu_paper_run.sh [OUT]     # OUT: outputs/gpu-paper-run
#
# 1. `curriculum build recipe=musique-min-max tokenizer=MODEL`: the curriculum, every prompt counted in the model's
#    tokenizer (build.log: every level's longest);
# 2. `curriculum train --dry-run` on the layout chosen below: the batch, the prompt lengths against the engine's
#    context, the memory estimate per GPU (one verdict per launcher config), a checkpoint's size and the disk the
#    recipe's checkpoints need (refused when run.output_dir's disk is short) (dry-run.log); where the recipes' 7
#    completions a pass does NOT fit, the per-device batch the estimate offers is used (tight: the 7, measured);
# 3. GRPO on the curriculum's longest prompts first (data.longest_rows: the STEPS x 42 rows whose prompts are longest
#    in the model's tokenizer, in curriculum order: the hardest level's longest rows), at the run's real batch:
#    STEPS - 1 steps, one checkpoint saved (train-save.log), then resumed from it for the last step (train-resume.log);
# 4. the checks (summary.json; exit status 1 when one fails): every step in the ledger (curriculum_steps.jsonl,
#    continued across the resume), the longest rows in curriculum order, the curriculum's longest prompt trained, the
#    checkpoint saved, resumed from and as large as the dry run said (within 25%), and each training GPU's peak
#    memory (torch's max_memory_reserved plus the memory outside its allocator, per training process: the vLLM
#    server's GPU is not one; gpu_memory/rank-N.json) against the estimate: over it, or within 5% of the GPU's
#    memory, fails. summary.json records the peak per process, the estimate and its parts.
#
# Layouts: 8 or more GPUs: the authors' 7 + 1 (recipes/accelerate/zero2-7gpu.yaml, `trl vllm-serve` on GPU 7 with
# --max-model-len 8192); fewer: one GPU (zero2-offload-1gpu.yaml: DeepSpeed ZeRO-2, optimizer on the CPU, ~113 GiB
# of CPU memory for 7B). Needs pip install 'rag-curriculum[train,vllm,deepspeed]'; MODEL a Hub id (network or the
# cache) or a directory; two checkpoints on the disk at once (7B under ZeRO-2: about 227 GiB). Expected time
# (estimated, not measured: no GPU was at hand when this was written): 7 + 1 H100s, about 5 min to start (vLLM
# server, DeepSpeed), 2 to 4 min a step, 2 to 4 min to save or load a 113 GiB checkpoint, twice to start:
# STEPS=3 (default): 25 to 45 min. One 80 GB GPU at 2 completions a pass: 6 to 10 min a step, 40 to 60 min.
#
# SMOKE=1 MODEL=DIR (a tiny model directory): the same four steps on a CPU, at 2 prompts x 2 generations and 16
# tokens without vLLM or DeepSpeed (9 min 21 s with the 100-row sample and STEPS=3, on 2 cores at load 7 to 9:
# docs/training.md); there is no GPU to measure, so PLANTED_PEAK_GIB=X stands in for each training process's peak
# (what the tests check the comparison with).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-outputs/gpu-paper-run}}
INPUT=${INPUT:-../shared/data/musique/musique_ans_v1.0_train.sample100.jsonl}
MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct}
N=${N:-all}                 # questions in the curriculum (the paper: 5,000; the shared sample holds 100)
STEPS=${STEPS:-3}           # steps in all: STEPS - 1 before the checkpoint, 1 after resuming from it
CURRICULUM=${CURRICULUM:-curriculum}
PYTHON=${PYTHON:-python3}
PORT=${PORT:-8000}
if (( STEPS < 2 )); then
  echo "STEPS=$STEPS: the pre-flight needs 2 or more (a checkpoint after STEPS - 1, a step after resuming)" >&2
  exit 2
fi
if [[ -n "${PLANTED_PEAK_GIB:-}" && -z "${SMOKE:-}" ]]; then
  echo "PLANTED_PEAK_GIB stands in for a GPU's measurement in SMOKE=1 only; on GPUs the peak is measured" >&2
  exit 2
fi
mkdir -p "$OUT"
rm -rf "$OUT/train"  # a fresh pre-flight: its checkpoint and ledger are its own
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
prompts=42  # a step's prompts: the paper's 42 (SMOKE: 2)
[[ -n "${SMOKE:-}" ]] && prompts=2

"$CURRICULUM" build recipe=musique-min-max "input=$INPUT" "n=$N" "tokenizer=$MODEL" "out=$OUT/musique-min-max" \
  "batch_prompts=$prompts" overwrite=true --no-progress 2>&1 | tee "$OUT/build.log"

server_pid=""
cleanup() {
  [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null || true
}
trap cleanup EXIT
if [[ -n "${SMOKE:-}" ]]; then
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
rows=$(( STEPS * prompts ))
common=("recipe=rag-rl-min-max" "data.shards=$OUT/musique-min-max" "model.name_or_path=$MODEL"
        "data.longest_rows=$rows" "run.output_dir=$OUT/train" "run.save_final=false" "grpo.save_strategy=steps"
        "grpo.save_steps=$(( STEPS - 1 ))" "grpo.save_total_limit=1")

# The dry run: every check before the first step, the memory estimate per GPU for each launcher config, the
# checkpoint's size and the disk (refused when short).
"$CURRICULUM" train "${common[@]}" "grpo.max_steps=$STEPS" run.resume=null ${extra[@]+"${extra[@]}"} \
  ${dry_extra[@]+"${dry_extra[@]}"} --dry-run 2>&1 | tee "$OUT/dry-run.log"
if [[ -n "$config" ]]; then  # the recipes' 7 a pass, or the per-device batch the estimate offers where 7 does NOT fit
  line=$(grep -F "[$config]" "$OUT/dry-run.log" | head -1 || true)
  if [[ "$line" == *"does NOT fit"* ]]; then
    fits=$(grep -o 'batch.per_device_completions=[0-9]*' <<< "$line" | head -1 || true)
    [[ -n "$fits" ]] && extra+=("$fits") && echo "memory: $fits (the estimate's, for $config)"
  fi
fi

if [[ "$layout" == 7+1 ]]; then
  CUDA_VISIBLE_DEVICES=7 trl vllm-serve --model "$MODEL" --max-model-len 8192 --port "$PORT" > "$OUT/vllm-serve.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 180); do
    curl -sf "http://127.0.0.1:$PORT/health/" > /dev/null 2>&1 && break
    sleep 5
  done
fi

start=$(date +%s)
save_status=0
resume_status=0
# STEPS - 1 steps on the longest rows, then the checkpoint; then the run resumed from it for the last step
"${launch[@]}" "${common[@]}" "grpo.max_steps=$(( STEPS - 1 ))" run.resume=null ${extra[@]+"${extra[@]}"} 2>&1 \
  | tee "$OUT/train-save.log" || save_status=$?
if (( save_status == 0 )); then
  "${launch[@]}" "${common[@]}" "grpo.max_steps=$STEPS" run.resume=last ${extra[@]+"${extra[@]}"} 2>&1 \
    | tee "$OUT/train-resume.log" || resume_status=$?
fi
seconds=$(( $(date +%s) - start ))
cleanup

"$PYTHON" - "$OUT" "$STEPS" "$seconds" "$layout" "$save_status" "$resume_status" "${PLANTED_PEAK_GIB:-}" <<'EOF'
import json
import sys
from pathlib import Path

from rag_curriculum.train import judge_peak, read_peaks

out, steps, seconds, layout = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
save_status, resume_status, planted = int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
train = out / "train"
checks, facts = {}, {"layout": layout, "steps_asked": steps, "train_seconds": seconds,
                     "train_status": {"save": save_status, "resume": resume_status}}
checks["training exited 0 (before and after the resume)"] = save_status == 0 and resume_status == 0
ledger = train / "curriculum_steps.jsonl"
records = [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []
seen = [i for r in records for i in r["curriculum_index"]]
plan_file = train / "train_plan.json"
plan = json.loads(plan_file.read_text()) if plan_file.exists() else {}
chosen = (plan.get("longest_rows") or {}).get("curriculum_index") or []
manifest = json.loads((out / "musique-min-max" / "manifest.json").read_text())
longest = (manifest.get("prompt_tokens") or {}).get("longest") or {}
facts["longest_prompt_by_level"] = (manifest.get("prompt_tokens") or {}).get("max_by_level")
facts["longest_rows"] = {k: v for k, v in (plan.get("longest_rows") or {}).items() if k != "curriculum_index"}
facts["completions_per_step"] = plan.get("completions_per_step")
facts["longest_prompt_checked"] = plan.get("longest_prompt_tokens")
checks["every step in the ledger, across the resume"] = [r.get("step") for r in records] == list(range(1, steps + 1))
checks["the longest rows, in curriculum order"] = bool(seen) and seen == chosen[:len(seen)] and seen == sorted(seen)
checks["no step out of order"] = bool(records) and all(r.get("in_order", True) for r in records)
checks["the curriculum's longest prompt trained"] = (longest.get("curriculum_index") in seen
                                                     and plan.get("longest_prompt_tokens") == longest.get("tokens"))
# the checkpoint: saved before the last step, resumed from, and as large as the dry run said
resumed = (out / "train-resume.log").read_text() if (out / "train-resume.log").exists() else ""
saved_step = steps - 1
checks["the run resumed from its checkpoint"] = (f"checkpoint-{saved_step}" in resumed
                                                  and "resuming from checkpoint" in resumed)
last = train / f"checkpoint-{steps}"
if last.is_dir():
    size = sum(f.stat().st_size for f in last.rglob("*") if f.is_file()) / 1024**3
    said = (plan.get("disk") or {}).get("checkpoint_gib")
    facts["checkpoint_gib"] = {"measured": round(size, 4), "estimated": said}
    checks["the checkpoint as large as estimated (within 25%)"] = bool(said) and abs(size - said) <= 0.25 * said
else:
    checks["the checkpoint as large as estimated (within 25%)"] = False
# each training GPU's peak against the estimate the run recorded
estimate = plan.get("memory_estimate") or {}
facts["estimate"] = estimate
peaks = read_peaks(train)
if planted:
    peaks = [{"rank": 0, "peak_gib": float(planted), "planted": True}]
facts["peak_gib_per_process"] = {str(p["rank"]): p["peak_gib"] for p in peaks}
facts["peaks"] = peaks
if peaks and estimate:
    top = max(p["peak_gib"] for p in peaks)
    judged, line = judge_peak(top, estimate["total_gib"], estimate["gpu_gib"])
    checks.update(judged)
    facts["peak_gib"], facts["peak_verdict"] = top, line
    print(line)
else:
    checks["peak memory measured on every training GPU"] = False
    facts["peak_verdict"] = ("no peak recorded (no CUDA: SMOKE=1 plants one with PLANTED_PEAK_GIB)" if not peaks
                             else "no estimate recorded (the model's config.json was not at hand)")
summary = {"ok": all(checks.values()), "checks": checks, **facts}
(out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
print(json.dumps(summary, indent=2))
sys.exit(0 if summary["ok"] else 1)
EOF
