"""Train a curriculum with verl's default trainer (verl 0.9, v1) from your own script: the shards of `curriculum
build` in order, the RAG-RL reward, and the toolkit's dataset class and replay buffer plugged into verl's own
extension points (data.custom_cls, trainer.v1.sampler.custom_sampler), which keep the curriculum's order, refuse
what would undo it, record every step's rows and log curriculum/* metrics.

    curriculum build --dataset musique --input ../shared/data/musique/musique_ans_v1.0_train.sample100.jsonl \
        --schedule min-max --K 3 --n 12 --out outputs/musique-own-script
    python examples/verl_curriculum.py --shards outputs/musique-own-script --model Qwen/Qwen2.5-0.5B-Instruct
    python examples/verl_curriculum.py --shards outputs/musique-own-script --model MODEL_DIR --check  # no GPU needed

MODEL (MODEL_DIR) is a Hub id or a local model folder: --check loads only its tokenizer, so a local folder (or a
Hub id already in the cache, with HF_HUB_OFFLINE=1) runs it offline.

Extra arguments are verl Hydra overrides (they win), e.g. trainer.n_gpus_per_node=8 algorithm.filter_groups.enable=True
algorithm.filter_groups.metric=acc (DAPO's dynamic sampling; refills take the next rows of the curriculum).

The script composes verl's own config (verl/trainer/config/ppo_trainer.yaml, as `python -m verl.trainer.main_ppo`
does) with rag_curriculum.verl.curriculum.curriculum_overrides(shards) and a small GRPO setup, then:

* with --check: builds verl's trainer and its train data loader (what the trainer's init() does first, before any
  GPU worker starts) and prints the curriculum_index of the rows verl would give each step;
* without: runs verl (Ray, vLLM, GPUs; as main_ppo runs it) and then reads the rows each step trained on from
  curriculum_steps.jsonl, which the toolkit's replay buffer writes in trainer.default_local_dir.

Either way it fails (one line, exit status 1) if the rows are not in curriculum order, refuses a run of 0 steps
(trainer.total_training_steps=0, trainer.total_epochs=0, fewer rows than one batch), and says each step at which
verl's loader restarts the curriculum at its easiest rows (trainer.total_epochs=2 or more).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from rag_curriculum.errors import ConfigError, CurriculumError, CurriculumOrderError
from rag_curriculum.shards import shard_files
from rag_curriculum.train import read_steps
from rag_curriculum.verl.curriculum import STEPS_FILE, curriculum_overrides


def verl_config(overrides: list[str]):
    """verl's own ppo_trainer config with these overrides (Hydra refuses a key verl's schema lacks)."""
    import verl
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True, help="a folder written by `curriculum build`")
    ap.add_argument("--model", required=True, help="a model folder or Hub id (its tokenizer is loaded either way)")
    ap.add_argument("--prompts-per-step", type=int, default=4, help="data.train_batch_size")
    ap.add_argument("--max-prompt-length", type=int, default=4096)
    ap.add_argument("--out", default="outputs/own-verl-script", help="trainer.default_local_dir")
    ap.add_argument("--check", action="store_true", help="build verl's data path only and print each step's rows")
    args, extra = ap.parse_known_args()
    # the toolkit's lines (the steps the curriculum gives, the rows verl's drop_last leaves) on stderr
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("rag_curriculum").setLevel(logging.INFO)

    out = Path(args.out).resolve()  # the replay buffer runs in a Ray actor: an absolute path
    config = verl_config([
        *curriculum_overrides(args.shards),  # the shard files in order, data.shuffle=False, the classes, the reward
        "algorithm.adv_estimator=grpo", f"data.train_batch_size={args.prompts_per_step}",
        f"data.max_prompt_length={args.max_prompt_length}", "data.max_response_length=256",
        "data.filter_overlong_prompts=False", f"actor_rollout_ref.model.path={args.model}",
        "actor_rollout_ref.actor.optim.lr=1e-6", f"actor_rollout_ref.actor.ppo_mini_batch_size={args.prompts_per_step}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "actor_rollout_ref.rollout.gpu_memory_utilization=0.4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1", "trainer.n_gpus_per_node=1", "trainer.nnodes=1",
        "trainer.total_epochs=1", "trainer.val_before_train=False", "trainer.test_freq=-1", "trainer.save_freq=-1",
        "trainer.logger=[console]", f"trainer.default_local_dir={out}", *extra])
    order = pa.concat_tables([pq.read_table(f, columns=["curriculum_index"]) for f in shard_files(args.shards)])
    order = order.column(0).to_pylist()

    try:
        steps, gen_batch = check(config) if args.check else run(config, out)
        verify(steps, order, gen_batch)
    except CurriculumError as e:  # what the toolkit refuses, in one line (no traceback)
        sys.exit(f"error: {e}" + (f"\n  hint: {e.hint}" if e.hint else ""))


def check(config) -> tuple[list[list[int]], int]:
    """verl's trainer and train loader built from ``config`` (what its init() does first, before any worker or
    GPU): the rows its loader gives each step of the run, and its loader's batch (data.gen_batch_size)."""
    from verl.trainer.ppo.v1 import get_trainer_cls

    trainer = get_trainer_cls(config.trainer.v1.trainer_mode)(config=config)  # its replay buffer: the toolkit's
    trainer._init_tokenizer()
    trainer._init_dataloader()
    # the steps fit() runs: while the epoch is below trainer.total_epochs and the step at most total_training_steps
    total = min(trainer.total_training_steps, trainer.steps_per_epoch * config.trainer.total_epochs)
    if total < 1:  # the toolkit's replay buffer refuses this first; a buffer of your own may not
        raise ConfigError(f"verl's trainer would run 0 steps (trainer.total_training_steps={total})")
    trainer.global_steps = 1
    steps = [[int(i) for i in trainer._next_train_batch()["curriculum_index"]]
             for _ in range(total)]  # what prepare_step() fetches for each step
    print(f"{type(trainer.train_dataset).__name__} and {type(trainer.replay_buffer).__name__} loaded by verl")
    return steps, int(trainer.config.data.get("gen_batch_size") or config.data.train_batch_size)


def run(config, out: Path) -> tuple[list[list[int]], int]:
    """verl's run (Ray, vLLM, GPUs; as main_ppo runs it), then the rows each step fetched (trained and dropped),
    read from the replay buffer's curriculum_steps.jsonl."""
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    run_ppo(config, task_runner_class=TaskRunnerV1)
    records = read_steps(out / STEPS_FILE)
    late = [r["step"] for r in records if not r["in_order"]]
    if late:
        raise CurriculumOrderError(f"steps {late} were out of curriculum order (see {out / STEPS_FILE})")
    fg = config.algorithm.get("filter_groups", None)
    dynamic = bool(fg is not None and fg.get("enable", False))
    gen = 1 if dynamic else int(config.data.get("gen_batch_size") or config.data.train_batch_size)
    return [sorted(r["curriculum_index"] + [i for i in r["dropped"] if i is not None]) for r in records], gen


def verify(steps: list[list[int]], order: list[int], gen_batch: int) -> None:
    """The rows of each step are the curriculum's next rows. verl's loader drops the incomplete last batch and,
    when it runs out (an epoch after the first, trainer.total_epochs > 1), starts again at the first row: each
    restart is said, since the curriculum then goes from easy to hard again."""
    print("curriculum_index of each step's rows:", steps)
    usable = len(order) - len(order) % gen_batch
    k = 0
    for number, rows in enumerate(steps, 1):
        want = [order[(k + j) % usable] for j in range(len(rows))]
        if k and k % usable == 0 or (k // usable) != ((k + len(rows) - 1) // usable):
            print(f"step {number} restarts the curriculum at its easiest rows (curriculum_index {order[0]}): epoch "
                  f"{(k + len(rows) - 1) // usable + 1} of the rows, from easy to hard again")
        if rows != want:
            raise CurriculumOrderError(f"step {number} got curriculum_index {rows} where the curriculum has {want}: "
                                       "the rows were not given in curriculum order")
        k += len(rows)

if __name__ == "__main__":
    main()
