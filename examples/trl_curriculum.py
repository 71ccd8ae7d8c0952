"""Train a curriculum in your own TRL script: the shards of `curriculum build` loaded with `datasets`, the RAG-RL
reward, and `CurriculumGRPOTrainer` in place of TRL's `GRPOTrainer` (the same arguments), which keeps the
curriculum's order whatever `GRPOConfig.shuffle_dataset` says, says before step 1 which rows the run will not reach,
logs `curriculum/*` metrics and checks every step's rows.

    curriculum build --dataset musique --input ../shared/data/musique/musique_ans_v1.0_train.sample100.jsonl \
        --schedule min-max --K 3 --n 12 --out outputs/musique-own-script
    python examples/trl_curriculum.py --shards outputs/musique-own-script --model Qwen/Qwen2.5-0.5B-Instruct

Without --model a tiny random model is made on the spot from the rows' text (offline, seconds): the loop, the
order and the logs are real, the model learns nothing. At the end the script prints the curriculum_index of the
rows each step trained on, and fails if they are not in curriculum order.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from datasets import load_dataset
from trl import GRPOConfig

from rag_curriculum.rewards import RagRlReward
from rag_curriculum.train import CurriculumGRPOTrainer, make_tiny_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True, help="a folder written by `curriculum build`")
    ap.add_argument("--model", help="a model folder, Hub id or .gguf file [default: a tiny random model made here]")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", default="outputs/own-trl-script")
    args = ap.parse_args()

    rows = load_dataset(args.shards, split="train")  # the shards, in curriculum order
    model = args.model
    if model is None:
        texts = [m["content"] for p in rows["prompt"] for m in p] + [a for ans in rows["answers"] for a in ans]
        model = str(make_tiny_model(Path(args.out) / "tiny-model", texts))
    config = GRPOConfig(
        output_dir=args.out, max_steps=args.steps, num_generations=2, per_device_train_batch_size=4,
        max_completion_length=16, learning_rate=1e-5, beta=0.0, logging_steps=1, report_to="none", save_strategy="no",
        use_cpu=True, bf16=False, dataloader_pin_memory=False,
        # shuffle_dataset stays at TRL's default (True): the curriculum trainer keeps the order anyway
    )
    trainer = CurriculumGRPOTrainer(model=model, reward_funcs=[RagRlReward()], args=config, train_dataset=rows,
                                    steps_file=Path(args.out) / "curriculum_steps.jsonl")
    trainer.train()

    trained = [r["curriculum_index"] for r in trainer.recorder.records]
    print("curriculum_index of each step's rows:", trained)
    flat = [i for step in trained for i in step]
    assert flat == list(rows["curriculum_index"][: len(flat)]), "the rows were not trained in curriculum order"
    assert trainer.recorder.out_of_order == 0


if __name__ == "__main__":
    main()
