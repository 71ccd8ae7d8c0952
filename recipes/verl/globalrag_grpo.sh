#!/usr/bin/env bash
# GlobalRAG's GRPO run on verl's multi-turn search agent (recipes/verl/run_search_r1.sh: verl's tool_agent loop, the
# toolkit's retriever as the search tool, the curriculum's rows in order) with GlobalRAG's prompt (Figure 7) and its
# reward R(t) = w_t (0.1 R_form + 0.5 R_str + 0.5 R_sem + 0.5 R_step) + R_answ (rag_curriculum/verl/rewards.py,
# compute_globalrag_score). docs/globalrag.md. Values marked [G] are the paper's (appendix E.4), [T] the toolkit's
# choices. The same run on TRL is recipes/train/globalrag.yaml.
#   curriculum serve --index indexes/musique-train --port 8000 &    # the retriever, reachable from every worker
#   curriculum globalrag plans --dataset musique \
#       --input PATH/TO/musique_ans_v1.0_train.jsonl --out plans/musique-train.jsonl
#   SHARDS=outputs/musique-min-max PLANS=plans/musique-train.jsonl RETRIEVER=http://HOST:8000 \
#       bash recipes/verl/globalrag_grpo.sh
#   DRY_RUN=1 SHARDS=outputs/musique-min-max PLANS=plans/musique-train.jsonl bash recipes/verl/globalrag_grpo.sh
# The step t of w_t: verl does not pass its global step to reward functions; the reward derives it from the row's
# curriculum index and prompts_per_step (rows in order, validation off; when resuming, STEP_OFFSET=the steps of the
# epochs already done: compute_globalrag_score's docstring). Extra arguments are verl Hydra overrides and win over
# the ones below (and over run_search_r1.sh's), e.g. +reward.custom_reward_function.reward_kwargs.schedule=constant.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}
export MODEL=${MODEL:-Qwen/Qwen2.5-3B-Instruct}      # [G] Qwen2.5-3B / 7B, base and instruct
export TEMPLATE=${TEMPLATE:-globalrag}               # [G] Figure 7 verbatim; globalrag-released: the authors' prompt
export TOPK=${TOPK:-3}                               # [G] top-3 retrieval
export TURNS=${TURNS:-4}                             # [G] action budget 4
export PROMPTS_PER_STEP=${PROMPTS_PER_STEP:-256}     # [G] batch size 256
export MINI_BATCH=${MINI_BATCH:-256}                 # [T] one update per batch (the paper gives no mini-batch)
export ROLLOUTS=${ROLLOUTS:-5}                       # [G] 5 responses per prompt
export STEPS=${STEPS:-200}                           # [G] 200 steps
export MAX_RESPONSE=${MAX_RESPONSE:-3500}            # [T] the whole trajectory (4 turns and 3 tool answers)
export NAME=${NAME:-globalrag-grpo-$(basename "${SHARDS:?set SHARDS to a shard directory written by curriculum build}")}
PLANS=${PLANS:?set PLANS to a plan file (curriculum globalrag plans)}
EMBEDDER=${EMBEDDER:-intfloat/e5-base}               # [G] E5-base; [T] its "query: " prefix (the globalrag extra)
EMBED_DEVICE=${EMBED_DEVICE:-cpu}                    # [T] the reward workers are CPU actors
T=${T:-50}                                           # [G] appendix E.4
STEP_OFFSET=${STEP_OFFSET:-0}
REWARD_PY=$("$PYTHON" -m rag_curriculum.verl reward-path)
KW=+reward.custom_reward_function.reward_kwargs

exec bash "$HERE/run_search_r1.sh" \
  algorithm.adv_estimator=grpo \
  actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.use_kl_loss=True \
  actor_rollout_ref.actor.kl_loss_coef=0.001 \
  actor_rollout_ref.actor.kl_loss_type=low_var_kl \
  actor_rollout_ref.actor.clip_ratio=0.2 \
  actor_rollout_ref.actor.clip_ratio_low=0.2 \
  actor_rollout_ref.actor.clip_ratio_high=0.2 \
  actor_rollout_ref.rollout.temperature=1.0 \
  actor_rollout_ref.rollout.top_p=1.0 \
  trainer.save_freq=10 \
  reward.reward_manager.name=naive \
  "reward.custom_reward_function.path=$REWARD_PY" \
  reward.custom_reward_function.name=compute_globalrag_score \
  "$KW.plans=$PLANS" "$KW.prompts_per_step=$PROMPTS_PER_STEP" "$KW.step_offset=$STEP_OFFSET" \
  "$KW.alpha=0.1" "$KW.lam=0.5" "$KW.gamma=0.5" "$KW.delta=0.5" \
  "$KW.T=$T" "$KW.midpoint_ratio=0.9" "$KW.temperature=10.0" "$KW.schedule=sigmoid" \
  "$KW.embedder=$EMBEDDER" "$KW.prefix='query: '" "$KW.device=$EMBED_DEVICE" "$KW.tie_break=similarity" \
  "$@"
