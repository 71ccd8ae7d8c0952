#!/usr/bin/env bash
# Set everything up, then run every test tier (CPU only, offline):
#   main  .venv       the whole suite (tests/ and the doctests), with the train extra (TRL, transformers), then the
#                     docs site built with `mkdocs build --strict` (a broken link or a page left out fails)
#   vllm  .venv-vllm  the real vLLM engine (its CPU build): backend, partition and eval CLIs, `vllm serve`
#   verl  .venv-verl  verl 0.9.1's own dataset, sampler, data loader and reward loop on the toolkit's shards
#   core  .venv-core  the core install only (as on a verl node): the reward imports no torch / transformers
#   notrain .venv-notrain  (not by default) the main suite without the train extra: what needs torch skips
# Each tier has an environment of its own (vLLM's and verl's pins clash with the train extra's); the engine tiers
# skip themselves in the main environment. Choose tiers with TIERS, e.g. TIERS="main core" bash scripts/test.sh.
#   bash scripts/test.sh [extra pytest arguments for the main tier, e.g. tests/curricula -x]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
TIERS=${TIERS:-main vllm verl core}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
PYTEST=(-m pytest -q -p no:cacheprovider)
for tier in $TIERS; do
  start=$SECONDS
  case $tier in
    main) (. scripts/setup.sh && python "${PYTEST[@]}" "$@" && bash scripts/docs.sh) ;;
    vllm) bash scripts/setup_vllm.sh && .venv-vllm/bin/python "${PYTEST[@]}" tests/tier_vllm ;;
    verl) bash scripts/setup_verl.sh && .venv-verl/bin/python "${PYTEST[@]}" tests/tier_verl ;;
    core) bash scripts/setup_core.sh && .venv-core/bin/python "${PYTEST[@]}" tests/tier_core ;;
    notrain) bash scripts/setup_notrain.sh && .venv-notrain/bin/python "${PYTEST[@]}" tests \
      --ignore=tests/tier_vllm --ignore=tests/tier_verl --ignore=tests/tier_core "$@" ;;
    *) echo "error: unknown tier '$tier' (main, vllm, verl, core, notrain)" >&2; exit 2 ;;
  esac
  echo "tier $tier: passed in $((SECONDS - start)) s (setup included)"
done
