#!/usr/bin/env bash
# Set everything up, then run the main job: the paper's MuSiQue min-max curriculum (K = 20), built from a
# MuSiQue train file (default: the real sample in ../shared/data; pass your musique_ans_v1.0_train.jsonl).
#   bash scripts/quickstart.sh [PATH/TO/musique_ans_v1.0_train.jsonl] [N]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/setup.sh main  # makes .venv and leaves it activated
INPUT=${1:-../shared/data/musique/musique_ans_v1.0_train.sample100.jsonl}
N=${2:-all}
curriculum build --dataset musique --input "$INPUT" --schedule min-max --K 20 --n "$N" \
  --batch-prompts 42 --tail trim --out outputs/musique-min-max --overwrite   # every row fits a 42-prompt step
curriculum validate outputs/musique-min-max
cat <<'NEXT'

Built and validated outputs/musique-min-max: the paper's MuSiQue min-max curriculum. Next:
  source .venv/bin/activate
  curriculum inspect outputs/musique-min-max            # its levels, index ranges, distractors and hops
  curriculum train recipe=rag-rl-min-max --dry-run      # check the paper's training run against it (no GPU needed)
  curriculum train recipe=rag-rl-min-max                # the paper's run, on GPUs (docs/training.md)
Every stage on a CPU in minutes (a tiny model: build, partition, train, eval): README.md, "Every stage on a CPU".
NEXT
