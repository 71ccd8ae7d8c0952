#!/usr/bin/env bash
# A Search-R1 agent trained with GRPO on verl (Ray, vLLM rollouts): verl's multi-turn agent loop (tool_agent) with
# the toolkit's retriever as its search tool (rag_curriculum.verl.tool.SearchTool, calling `curriculum
# serve`), the Search-R1 tag protocol as the tool-call format (multi_turn.format=search-r1), the curriculum's rows
# in curriculum order, and Search-R1's exact-match reward (compute_search_score). Values marked [S] are Search-R1's
# published ones, [T] the toolkit's choices (as in recipes/train/search-r1.yaml).
#   curriculum serve --index indexes/musique-train --port 8000 &            # on a host the workers reach
#   SHARDS=outputs/musique-min-max RETRIEVER=http://HOST:8000 bash recipes/verl/run_search_r1.sh
#   DRY_RUN=1 SHARDS=outputs/musique-min-max bash recipes/verl/run_search_r1.sh     # print the command only
# DIFFICULTY=hard-negatives (or withhold with P=0.3) makes each row's level (or p) shape what its searches return.
# REWARD=search-r1 trains on Search-R1's own reward bit for bit (its qa_em on the prompt and response decoded
# together, special tokens kept: compute_search_r1_score with the toolkit's SearchR1RewardManager), instead of the
# toolkit's strict reading (REWARD=search-em, compute_search_score); docs/search-agents.md, "Coming from Search-R1".
# Extra arguments are verl Hydra overrides and win over the ones below. Writes $OUT/agent.parquet (the rows as
# verl search-agent rows: python -m rag_curriculum.verl agent-data) and $OUT/search_tool.yaml (the tool config).
set -euo pipefail

SHARDS=${SHARDS:?set SHARDS to a shard directory written by curriculum build}
RETRIEVER=${RETRIEVER:-http://127.0.0.1:8000}   # a curriculum serve URL, or an index directory on every node
MODEL=${MODEL:-Qwen/Qwen2.5-3B-Instruct}        # [S] Qwen2.5-3B / -7B
TEMPLATE=${TEMPLATE:-search-r1}                 # [T] search-r1 (VERITAS appendix A) or search-r1-original
TOPK=${TOPK:-3}                                 # [S] retriever topk 3
TURNS=${TURNS:-4}                               # [S] up to 4 turns
DIFFICULTY=${DIFFICULTY:-none}                  # [S] none; [T] hard-negatives | withhold
P=${P:-0.0}
REWARD=${REWARD:-search-em}                     # [T] search-em (strict); [S] search-r1 (Search-R1's qa_em)
PROMPTS_PER_STEP=${PROMPTS_PER_STEP:-512}       # [S] train_batch_size 512
MINI_BATCH=${MINI_BATCH:-256}                   # [S] ppo_mini_batch_size 256
ROLLOUTS=${ROLLOUTS:-5}                         # [S] n_agent 5
STEPS=${STEPS:-1005}                            # [S] total_training_steps 1005
MAX_PROMPT=${MAX_PROMPT:-512}                   # [T] the question in the template (no passages in the prompt)
MAX_RESPONSE=${MAX_RESPONSE:-3500}              # [T] the whole trajectory: 4 turns x 500 + 3 tool answers
NNODES=${NNODES:-1}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
NAME=${NAME:-search-r1-$(basename "$SHARDS")}
OUT=${OUT:-outputs/verl/$NAME}
PYTHON=${PYTHON:-python3}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# verl splits a step's PROMPTS_PER_STEP x ROLLOUTS sequences over every GPU: refused here when they do not split,
# with the layouts that do.
"$PYTHON" -m rag_curriculum.verl layout --prompts "$PROMPTS_PER_STEP" --rollouts "$ROLLOUTS" --nnodes "$NNODES" \
  --gpus-per-node "$GPUS_PER_NODE" || exit $?
# Across nodes: verl reads $OUT/agent.parquet and $OUT/search_tool.yaml, MODEL (a directory) and RETRIEVER (an index
# directory) on every node: absolute paths on a filesystem every node mounts (SHARED_FS=1: copied to the same paths).
shared=()
[[ "${SHARED_FS:-}" == 1 ]] && shared=(--shared)
paths=("MODEL=$MODEL" "OUT=$OUT")
[[ "$RETRIEVER" == http://* || "$RETRIEVER" == https://* ]] || paths+=("RETRIEVER=$RETRIEVER")
"$PYTHON" -m rag_curriculum.verl shared-paths --nnodes "$NNODES" ${shared[@]+"${shared[@]}"} "${paths[@]}" || exit $?
mkdir -p "$OUT"
"$PYTHON" -m rag_curriculum.verl agent-data "$SHARDS" "$OUT/agent.parquet" --template "$TEMPLATE" --overwrite
"$PYTHON" - "$HERE/search_tool.yaml" "$OUT/search_tool.yaml" "$RETRIEVER" "$TOPK" "$DIFFICULTY" "$P" <<'PY'
import sys

import yaml

src, dst, retriever, topk, mode, p = sys.argv[1:]
doc = yaml.safe_load(open(src))
cfg = doc["tools"][0]["config"]
cfg.update(retriever=retriever, topk=int(topk), difficulty={**cfg.get("difficulty", {}), "mode": mode, "p": float(p)})
with open(dst, "w") as f:
    yaml.safe_dump(doc, f, sort_keys=False)
PY
REWARD_PY=$("$PYTHON" -m rag_curriculum.verl reward-path)
case "$REWARD" in
  search-em) reward_args=(reward.custom_reward_function.name=compute_search_score) ;;
  search-r1) reward_args=(
      reward.custom_reward_function.name=compute_search_r1_score
      reward.reward_manager.source=importlib
      reward.reward_manager.name=SearchR1RewardManager
      "reward.reward_manager.module.path=$("$PYTHON" -m rag_curriculum.verl reward-manager-path)") ;;
  *) echo "REWARD=$REWARD: search-em or search-r1" >&2; exit 2 ;;
esac

cmd=(
  "$PYTHON" -m verl.trainer.main_ppo
  algorithm.adv_estimator=grpo
  algorithm.use_kl_in_reward=False
  "data.train_files=['$OUT/agent.parquet']"
  "data.val_files=['$OUT/agent.parquet']"
  data.shuffle=False
  data.prompt_key=prompt
  data.reward_fn_key=data_source
  data.return_raw_chat=True
  data.train_batch_size="$PROMPTS_PER_STEP"
  data.max_prompt_length="$MAX_PROMPT"
  data.max_response_length="$MAX_RESPONSE"
  data.filter_overlong_prompts=False
  data.truncation=error
  actor_rollout_ref.model.path="$MODEL"
  actor_rollout_ref.model.use_remove_padding=True
  actor_rollout_ref.model.enable_gradient_checkpointing=True
  actor_rollout_ref.actor.optim.lr=1e-6
  actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.285
  actor_rollout_ref.actor.ppo_mini_batch_size="$MINI_BATCH"
  actor_rollout_ref.actor.use_dynamic_bsz=True
  actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$(((MAX_PROMPT + MAX_RESPONSE) * 2))
  actor_rollout_ref.actor.use_kl_loss=True
  actor_rollout_ref.actor.kl_loss_coef=0.001
  actor_rollout_ref.actor.kl_loss_type=low_var_kl
  actor_rollout_ref.actor.clip_ratio=0.2
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.n="$ROLLOUTS"
  actor_rollout_ref.rollout.temperature=1.0
  actor_rollout_ref.rollout.prompt_length="$MAX_PROMPT"
  actor_rollout_ref.rollout.response_length="$MAX_RESPONSE"
  actor_rollout_ref.rollout.multi_turn.enable=True
  actor_rollout_ref.rollout.multi_turn.format=search-r1
  "actor_rollout_ref.rollout.multi_turn.tool_config_path=$OUT/search_tool.yaml"
  actor_rollout_ref.rollout.multi_turn.max_assistant_turns="$TURNS"
  actor_rollout_ref.rollout.multi_turn.max_tool_response_length=100000
  actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent
  "reward.custom_reward_function.path=$REWARD_PY"
  "${reward_args[@]}"
  trainer.total_training_steps="$STEPS"
  trainer.nnodes="$NNODES"
  trainer.n_gpus_per_node="$GPUS_PER_NODE"
  trainer.project_name=rag-curriculum
  trainer.experiment_name="$NAME"
  trainer.default_local_dir="$OUT"
  trainer.test_freq=-1
  trainer.val_before_train=False
  "$@"
)
if [ "${DRY_RUN:-0}" = 1 ]; then
  printf '%q ' "${cmd[@]}"; echo
  exit 0
fi
exec "${cmd[@]}"
