#!/usr/bin/env bash
# RAG-RL GRPO on verl (Ray): the toolkit's shards read in curriculum order (data.shuffle=False, files in manifest
# order) and scored by the toolkit's compute_score (rag_curriculum/verl/rewards.py), with the paper's settings:
# Qwen2.5-7B-Instruct, lr 1e-6 constant, KL 0.01, clip 0.2, 42 prompts x 7 rollouts, 1 epoch, 800 tokens, vLLM, bf16.
#   SHARDS=outputs/musique-min-max bash recipes/verl/run_grpo.sh
#   SHARDS=/nfs/musique-linear OUT=/nfs/verl-run NNODES=2 GPUS_PER_NODE=7 bash recipes/verl/run_grpo.sh trainer.save_freq=10
#   DRY_RUN=1 SHARDS=outputs/musique-min-max bash recipes/verl/run_grpo.sh      # print the command only (offline too)
#   DYNAMIC=1 SHARDS=outputs/musique-min-max bash recipes/verl/run_grpo.sh      # DAPO: verl's filter_groups
# DYNAMIC=1 turns on verl's own dynamic sampling (algorithm.filter_groups, DAPO): groups whose DYNAMIC_METRIC
# (reward: the total, default; acc: exact match) is the same for every rollout are dropped and refilled with the
# next prompts of the dataloader, i.e. the next rows of the curriculum (data.gen_batch_size=1: refills of any size).
# verl's default (v1) trainer loads the toolkit's dataset class (data.custom_cls: CurriculumRLHFDataset, which refuses
# data.shuffle=True and a curriculum that gives no step) and replay buffer (trainer.v1.sampler.custom_sampler:
# CurriculumReplayBuffer, which checks every step's rows against the curriculum, writes them to
# $OUT/curriculum_steps.jsonl, logs curriculum/* metrics, runs verl's DAPO filter and moves an adaptive curriculum's
# level): rag_curriculum.verl.curriculum, docs/own-trainer.md. An adaptive build: add
#   data.custom_cls.path=pkg://rag_curriculum.verl.adaptive data.custom_cls.name=AdaptiveRLHFDataset \
#   data.dataloader_num_workers=0 +data.adaptive.controller=target-band
# Needs verl >= 0.9 (reward.custom_reward_function.*) with vLLM, and rag-curriculum installed on every Ray node.
# Several nodes: `ray start --head --dashboard-host=0.0.0.0` on the head, `ray start --address=HEAD_IP:6379` on
# the others, then run this on the head (or wrap it in `ray job submit --address=http://HEAD_IP:8265 -- ...`).
# Every node reads SHARDS and VAL_SHARDS (verl's TaskRunner, which loads them, may run on any node), MODEL when it is
# a directory (a Hub id: each node's own cache) and writes OUT (each rank its checkpoint shard; resuming reads them
# all), so with NNODES > 1 these must be absolute paths on a filesystem every node mounts: a relative path or one on
# this node's own disk (ext4, xfs, tmpfs, overlay, ...) is refused, unless SHARED_FS=1 says the same files are at
# the same paths on every node. The reward module (REWARD_PY) is each node's own install, at the same path.
# Extra arguments are verl Hydra overrides and win over the ones below; the reward constants default to the paper's
# (gamma_answer 5, gamma_correct 5, gamma_incorrect 2), e.g. +reward.custom_reward_function.reward_kwargs.gamma_format=0.5
# No prompt is truncated: verl 0.9.1 left-truncates a prompt longer than rollout.prompt_length with a warning only (even
# with data.truncation=error), cutting the system prompt and the first passages, and data.filter_overlong_prompts=True
# drops it, silently: the hardest rows of the curriculum go first. So the script counts every prompt's tokens (the
# shards' prompt_tokens when built with `curriculum build --tokenizer MODEL`, else MODEL's tokenizer here), sets
# MAX_PROMPT to the longest unless given, and refuses a curriculum that does not fit, naming the rows and levels.
# DRY_RUN=1 where MODEL's tokenizer cannot be loaded (no network, a Hub id not in the cache) says what it could not
# check and prints the command all the same (data.max_prompt_length=UNCHECKED unless MAX_PROMPT is a number).
# A run of 0 steps is refused: a curriculum with fewer rows than one batch (PROMPTS_PER_STEP, or data.train_batch_size
# given below), trainer.total_epochs=0 or trainer.total_training_steps=0; trainer.total_epochs=2 (or more) is said
# before the run: each epoch restarts the curriculum at its easiest rows.
set -euo pipefail

SHARDS=${SHARDS:?set SHARDS to a shard directory written by curriculum build}
VAL_SHARDS=${VAL_SHARDS:-$SHARDS}          # verl builds a validation loader; validation is off below
MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct}
PROMPTS_PER_STEP=${PROMPTS_PER_STEP:-42}   # data.train_batch_size, in prompts
ROLLOUTS=${ROLLOUTS:-7}                    # actor_rollout_ref.rollout.n
NNODES=${NNODES:-1}
GPUS_PER_NODE=${GPUS_PER_NODE:-7}          # 42 x 7 = 294 sequences must split evenly over the GPUs: 7, 14, 21, ...
MAX_PROMPT=${MAX_PROMPT:-auto}             # data.max_prompt_length; auto: the curriculum's longest prompt
MAX_RESPONSE=${MAX_RESPONSE:-800}
NAME=${NAME:-rag-rl-$(basename "$SHARDS")}
OUT=${OUT:-outputs/verl/$NAME}
PYTHON=${PYTHON:-python3}

# verl splits a step's PROMPTS_PER_STEP x ROLLOUTS sequences over every GPU: a layout that does not split is refused
# here, with prompts per step, GPUs per node and node counts that do (each checked the same way).
"$PYTHON" -m rag_curriculum.verl layout --prompts "$PROMPTS_PER_STEP" --rollouts "$ROLLOUTS" --nnodes "$NNODES" \
  --gpus-per-node "$GPUS_PER_NODE" || exit $?

TRAIN_FILES=$("$PYTHON" -m rag_curriculum.verl train-files "$SHARDS")
VAL_FILES=$("$PYTHON" -m rag_curriculum.verl train-files "$VAL_SHARDS")
REWARD_PY=$("$PYTHON" -m rag_curriculum.verl reward-path)
# Across nodes: what every node must see at the same path, checked from here (exit status 2 and the paths).
shared=()
[[ "${SHARED_FS:-}" == 1 ]] && shared=(--shared)
"$PYTHON" -m rag_curriculum.verl shared-paths --nnodes "$NNODES" ${shared[@]+"${shared[@]}"} "SHARDS=$SHARDS" \
  "VAL_SHARDS=$VAL_SHARDS" "MODEL=$MODEL" "OUT=$OUT" --installed "REWARD_PY=$REWARD_PY" || exit $?
# The prompt lengths against data.max_prompt_length, rollout.prompt_length and rollout.max_model_len (also as given
# in the extra overrides): exit status 2 and the rows, levels and setting when a prompt does not fit.
dry=()
[[ -n "${DRY_RUN:-}" ]] && dry=(--dry-run)   # a tokenizer that cannot be loaded: say what is unchecked, go on
MAX_PROMPT=$("$PYTHON" -m rag_curriculum.verl check-lengths "$SHARDS" --model "$MODEL" \
             --prompt-length "$MAX_PROMPT" --response-length "$MAX_RESPONSE" ${dry[@]+"${dry[@]}"} "$@") || exit $?
echo "data.max_prompt_length=$MAX_PROMPT data.max_response_length=$MAX_RESPONSE" >&2
if [[ "$MAX_PROMPT" == UNCHECKED ]]; then
  MAX_TOKENS_PER_GPU=UNCHECKED
else
  MAX_TOKENS_PER_GPU=$(((MAX_PROMPT + MAX_RESPONSE) * 2))
fi
dynamic=()
if [[ -n "${DYNAMIC:-}" ]]; then
  dynamic=(algorithm.filter_groups.enable=True "algorithm.filter_groups.metric=${DYNAMIC_METRIC:-reward}"
           data.gen_batch_size=1)
  echo "dynamic sampling (verl filter_groups on ${DYNAMIC_METRIC:-reward}): refills take the next rows in curriculum" \
       "order; verl discards the surplus groups of the last refill and restarts from the first row when the rows" \
       "run out (set trainer.total_training_steps so they do not)" >&2
fi

# The steps verl's trainer runs: the curriculum's steps an epoch (data.train_batch_size) and the rows its drop_last
# leaves, and the run's steps (trainer.total_epochs, trainer.total_training_steps), all read from the overrides
# given below as verl will (the extra ones win), said on stderr before anything runs: an epoch after the first
# restarts at the curriculum's easiest rows, a step limit short of one epoch never reaches its hardest. A run of 0
# steps (too few rows for a batch, trainer.total_epochs=0, trainer.total_training_steps=0) is refused (exit status 2).
"$PYTHON" -m rag_curriculum.verl steps "$SHARDS" --train-batch-size "$PROMPTS_PER_STEP" trainer.total_epochs=1 \
  ${dynamic[@]+"${dynamic[@]}"} "$@" >/dev/null || exit $?

cmd=(
  "$PYTHON" -m verl.trainer.main_ppo
  algorithm.adv_estimator=grpo
  algorithm.norm_adv_by_std_in_grpo=True
  algorithm.use_kl_in_reward=False
  "data.train_files=$TRAIN_FILES"
  "data.val_files=$VAL_FILES"
  data.shuffle=False
  data.prompt_key=prompt
  data.reward_fn_key=data_source
  data.train_batch_size="$PROMPTS_PER_STEP"
  data.max_prompt_length="$MAX_PROMPT"
  data.max_response_length="$MAX_RESPONSE"
  data.filter_overlong_prompts=False
  data.truncation=error
  data.custom_cls.path=pkg://rag_curriculum.verl.curriculum
  data.custom_cls.name=CurriculumRLHFDataset
  trainer.v1.sampler.custom_sampler.path=pkg://rag_curriculum.verl.curriculum
  trainer.v1.sampler.custom_sampler.name=CurriculumReplayBuffer
  actor_rollout_ref.model.path="$MODEL"
  actor_rollout_ref.model.use_remove_padding=True
  actor_rollout_ref.model.enable_gradient_checkpointing=True
  actor_rollout_ref.actor.optim.lr=1e-6
  actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.0
  actor_rollout_ref.actor.ppo_mini_batch_size="$PROMPTS_PER_STEP"
  actor_rollout_ref.actor.ppo_epochs=1
  actor_rollout_ref.actor.use_dynamic_bsz=True
  actor_rollout_ref.actor.ppo_max_token_len_per_gpu="$MAX_TOKENS_PER_GPU"
  actor_rollout_ref.actor.use_kl_loss=True
  actor_rollout_ref.actor.kl_loss_coef=0.01
  actor_rollout_ref.actor.kl_loss_type=low_var_kl
  actor_rollout_ref.actor.clip_ratio=0.2
  actor_rollout_ref.actor.clip_ratio_low=0.2     # verl's loss reads these before clip_ratio (both default 0.2)
  actor_rollout_ref.actor.clip_ratio_high=0.2
  actor_rollout_ref.actor.optim.weight_decay=0.0 # verl defaults to 0.01; TRL's GRPOConfig (the TRL recipes) to 0
  actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
  actor_rollout_ref.actor.entropy_coeff=0
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.n="$ROLLOUTS"
  actor_rollout_ref.rollout.temperature=1.0
  actor_rollout_ref.rollout.tensor_model_parallel_size=1
  actor_rollout_ref.rollout.gpu_memory_utilization=0.5
  actor_rollout_ref.rollout.max_num_batched_tokens=8192
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8
  reward.custom_reward_function.path="$REWARD_PY"
  reward.custom_reward_function.name=compute_score
  trainer.total_epochs=1
  trainer.n_gpus_per_node="$GPUS_PER_NODE"
  trainer.nnodes="$NNODES"
  trainer.val_before_train=False
  trainer.test_freq=-1
  trainer.save_freq=20
  trainer.resume_mode=auto
  trainer.default_local_dir="$OUT"
  trainer.project_name=rag-curriculum
  trainer.experiment_name="$NAME"
  'trainer.logger=["console"]'
  ${dynamic[@]+"${dynamic[@]}"}
  "$@"
)

if [[ -n "${DRY_RUN:-}" ]]; then
  printf '%q ' "${cmd[@]}"
  echo
  exit 0
fi
exec "${cmd[@]}"
