#!/usr/bin/env bash
# VERITAS's own run: PPO with GAE on verl's multi-turn search agent (recipes/verl/run_search_r1.sh: verl's
# tool_agent loop, the toolkit's retriever as the search tool, Search-R1's tags, the curriculum's rows in order),
# rewarded by VERITAS's Eq. 1, R = 0.9 EM + 0.05 Info-Think + 0.02 Think-Answer (rag_curriculum/verl/rewards.py,
# compute_veritas_score, batched: one judge request for a whole batch's pairs). docs/veritas.md.
# Values marked [V] are the paper's (section 5.1, appendix C), [S] Search-R1's train_ppo.sh (PeterGriffinJin/
# Search-R1 at 19efcf7), [T] the toolkit's choices. The GRPO alternative on TRL is recipes/train/veritas.yaml.
#   vllm serve PATH/TO/veritas-rm --port 8001 &                     # the Info-Think judge (the distilled RM)
#   curriculum serve --index indexes/musique-train --port 8000 &    # the retriever, reachable from every worker
#   SHARDS=outputs/musique-min-max RETRIEVER=http://HOST:8000 JUDGE_URL=http://HOST:8001/v1 \
#       bash recipes/verl/veritas_ppo.sh
#   DRY_RUN=1 SHARDS=outputs/musique-min-max bash recipes/verl/veritas_ppo.sh     # print the command only
# Extra arguments are verl Hydra overrides and win over the ones below (and over run_search_r1.sh's), e.g.
#   +reward.custom_reward_function.reward_kwargs.judge.votes=3 +reward.custom_reward_function.reward_kwargs.judge.temperature=0.7
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}
export MODEL=${MODEL:-Qwen/Qwen2.5-7B}               # [V] Qwen2.5-7B-Base
export PROMPTS_PER_STEP=${PROMPTS_PER_STEP:-256}     # [V] batch size 256 (the paper; Search-R1's PPO: 512 prompts)
export MINI_BATCH=${MINI_BATCH:-256}                 # [S] ppo_mini_batch_size 256
export ROLLOUTS=${ROLLOUTS:-1}                       # [S] PPO: n_agent 1 (one trajectory per prompt; GAE, a critic)
export NAME=${NAME:-veritas-ppo-$(basename "${SHARDS:?set SHARDS to a shard directory written by curriculum build}")}
JUDGE_URL=${JUDGE_URL:-http://127.0.0.1:8001/v1}     # [T] an OpenAI-compatible server: vllm serve of the RM, or an API
JUDGE_MODEL=${JUDGE_MODEL:-veritas-rm}               # [V] the LoRA-tuned Qwen2.5-14B-Instruct reward model
CACHE=${CACHE:-outputs/judge-cache/veritas}          # [T] verdicts keyed on content (shared by every reward worker)
REWARD_PY=$("$PYTHON" -m rag_curriculum.verl reward-path)
KW=+reward.custom_reward_function.reward_kwargs

exec bash "$HERE/run_search_r1.sh" \
  algorithm.adv_estimator=gae \
  algorithm.gamma=1.0 \
  algorithm.lam=1.0 \
  algorithm.use_kl_in_reward=True \
  algorithm.kl_ctrl.kl_coef=0.001 \
  actor_rollout_ref.actor.use_kl_loss=False \
  actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.95 \
  critic.model.path="$MODEL" \
  critic.model.use_remove_padding=True \
  critic.model.enable_gradient_checkpointing=True \
  critic.optim.lr=1e-5 \
  critic.optim.lr_warmup_steps_ratio=0.05 \
  critic.ppo_mini_batch_size="$MINI_BATCH" \
  critic.use_dynamic_bsz=True \
  trainer.critic_warmup=0 \
  reward.reward_manager.name=naive \
  "reward.custom_reward_function.path=$REWARD_PY" \
  reward.custom_reward_function.name=compute_veritas_score \
  "$KW.weights.em=0.9" "$KW.weights.info_think=0.05" "$KW.weights.think_answer=0.02" \
  "$KW.think_answer_scope=last_think" "$KW.aggregate=mean" "$KW.no_search_value=0.0" \
  "$KW.judge_failure_value=0.0" "$KW.missing_value=0.0" \
  "$KW.judge.backend=openai" "$KW.judge.model=$JUDGE_MODEL" "$KW.judge.backend_args.base_url=$JUDGE_URL" \
  "$KW.judge.backend_args.api_key=EMPTY" "$KW.judge.cache_dir=$CACHE" "$KW.judge.max_tokens=16" \
  "$@"
