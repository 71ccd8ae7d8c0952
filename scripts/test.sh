#!/usr/bin/env bash
# The tests, offline on a CPU, in tiers, each in its own environment:
#   bash scripts/test.sh           the fast set (the README's test command): `pytest` in .venv, the tests not marked
#                                  slow, one pytest-xdist worker per core, then the docs site built with --strict.
#                                  Builds no engine's environment.
#   bash scripts/test.sh --rest    every other tier: the main suite's slow tests in .venv, then the engine tiers, each
#                                  in its own environment (made in the background while the slow tests run)
#   bash scripts/test.sh --all     both, one after the other: every tier (CI runs `bash .ci/run`: the README's command,
#                                  then --rest; nothing runs twice)
# The tiers:
#   fast  .venv       the fast set and the docs site (`mkdocs build --strict`: a broken link or a page left out fails)
#   slow  .venv       the tests marked slow (real models, trainers, servers, clusters, the docs' walkthroughs), but
#                     not those marked learning
#   main  .venv       fast and slow in one run (the whole suite in one pytest), then the docs site
#   vllm  .venv-vllm  the real vLLM engine (its CPU build): backend, partition and eval CLIs, `vllm serve`
#   verl  .venv-verl  verl 0.9.1's own dataset, sampler, data loader and reward loop on the toolkit's shards
#   core  .venv-core  the core install only (as on a verl node): the reward imports no torch / transformers
#   pyserini .venv-pyserini  pyserini 0.25.0 (Lucene 9.9.1) beside the toolkit's BM25: the Lucene preset's parity
#                     with Search-R1's BM25 retriever; skipped, saying so, where there is no Java (`java` on PATH or
#                     $JAVA_HOME/bin/java; JAVA=CMD names another)
#   retriever .venv-retriever  rag-retriever installed alone (./retriever, no rag-curriculum, no torch): its own tests,
#                     its command line indexing, validating and serving a Search-R1-layout corpus
#   learning .venv      (not in --all; a scheduled job) the tests marked `learning`: a model learning over tens of GRPO
#                     steps, as the docs show it (search-agents.md's search agent)
#   trl-newest, trl-oldest .venv-trl-newest, .venv-trl-oldest  (not in --all; a scheduled job) the trainer's tests
#                     against the newest and the oldest TRL the pin allows: the toolkit's GRPOTrainer overrides two
#                     private TRL methods (train/_trainer.py)
# Each tier has an environment of its own (vLLM's and verl's pins clash with the train extra's), all declared in
# scripts/setup.sh (`bash scripts/setup.sh TIER` makes one); in the main environment the engine tiers' folders are
# not collected (one line says so: tests/conftest.py). The tiers after slow run one after another (LANES=2: in two
# lanes at once, below). TIERS chooses tiers instead, e.g. TIERS="fast core" bash scripts/test.sh.
# While the slow tier's tests run, the engine tiers' environments are made in the background, one after another
# (the installer waits mostly on the network and the disk, the tests on the CPUs); each engine tier waits for its own,
# and a failed setup fails its tier with the setup's output. SETUP_IN_BACKGROUND=0 makes each one just before its tier.
#   bash scripts/test.sh [--rest | --all] [extra pytest arguments for the fast, slow or main tier, e.g. -x]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FAST_TIERS="fast"
REST_TIERS="slow vllm verl core pyserini retriever"
case ${1:-} in
  --rest) DEFAULT_TIERS=$REST_TIERS; shift ;;
  --all) DEFAULT_TIERS="$FAST_TIERS $REST_TIERS"; shift ;;
  *) DEFAULT_TIERS=$FAST_TIERS ;;
esac
TIERS=${TIERS:-$DEFAULT_TIERS}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# (RAG_CURRICULUM_ALL_TESTS=1, set for the slow and main tiers, runs the slow tests too: a plain `pytest` leaves them
# out, which is the fast tier)
unset RAG_CURRICULUM_ALL_TESTS
# Python writes each module's bytecode the first time a process of the run imports it, whatever the caller's
# PYTHONDONTWRITEBYTECODE says: set, as on CI's machines and this one, every one of the run's hundreds of processes
# compiled torch's, transformers' and TRL's sources anew (importing the three: 12.4 s on one core, 6.3 s from
# bytecode). Compiling every installed module at setup instead (uv --compile-bytecode) cost more than it saved.
unset PYTHONDONTWRITEBYTECODE
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
# progress as "[ 120/3456]" on every line of dots (pytest's count style), so a long tier is never silent
PYTEST=(-m pytest -q -p no:cacheprovider -o console_output_style=count)
# the main tier in WORKERS pytest-xdist processes (default 2; 1: one process), each test file whole on one of them
# (its module fixtures made once; an older measurement: 1597 s against 2102 s in one process, on 2 cores). The files
# are handed out longest first (tests/file_seconds.json, tests/conftest.py), in that order (--no-loadscope-reorder:
# not xdist's most-tests-first), so the longest one, the README walkthrough, no longer starts last and runs alone.
# (xdist gives each worker its next file early: a file of one or two tests has the next one queued behind it.)
WORKERS=${WORKERS:-2}
XDIST=(-n "$WORKERS" --dist loadfile --no-loadscope-reorder)
MAIN_PYTEST=("${PYTEST[@]}")
[ "$WORKERS" = 1 ] || MAIN_PYTEST+=("${XDIST[@]}")
# the vllm and verl tiers in WORKERS processes too: their tests wait mostly on engine starts and on subprocesses
# importing verl, so two at once overlap (an older measurement on 2 cores: vllm 449 s against 703 s, verl 323 s
# against 516 s in one process)
ENGINE_PYTEST=("${PYTEST[@]}")
[ "$WORKERS" = 1 ] || ENGINE_PYTEST+=("${XDIST[@]}")
# the slowest tests named at the end of the tier (where its time went, in CI's output too)
MAIN_PYTEST+=(--durations=25 --durations-min=10)
# the slow tier: the main tier's run, of the tests marked slow only
SLOW_PYTEST=("${MAIN_PYTEST[@]}" -m "slow and not learning")
# the tests marked `learning` (a model learning over tens of GRPO steps, minutes each) run in their own tier
MAIN_PYTEST+=(-m "not learning")
# the fast tier: a plain `pytest`, which is the fast set, spread over the cores (tests/conftest.py); no --durations
# (its tests take under about a second each)
FAST_PYTEST=("${PYTEST[@]}")
# The tests that drive TRL's GRPOTrainer (the trl-newest and trl-oldest tiers run them)
TRAINER_TESTS=(tests/train tests/agents/test_globalrag_grpo.py tests/rewards/test_veritas_train.py
               tests/curricula/test_prompt_lengths.py)
# What each tier runs and how long it took on a 2-core machine, with the load it was measured at
# (docs/development.md): said before the tier starts, with this machine's own last run of the tier when there is
# one (.test-times, written at the end of each tier: its seconds, the load average when it started, the commit).
TIMES=.test-times
about() {
  case $1 in
    fast) echo "the fast set in .venv, one pytest process per core, and the docs site; about 5 min at load 5 (the fast set 113 s measured on 2 cores at load 0.8, 245 s at load 4.8 to 6.4, 1577 s at load 6.3 to 8.9; 4.6 min of CPU, the docs 23 s)" ;;
    slow) echo "the tests marked slow in .venv, in $WORKERS pytest processes, the longest files first; about 13 to 18 min (the main tier's 977 to 1260 s less the fast set's; the README walkthrough 440 to 590 s of it)" ;;
    main) echo "the whole suite and the docs site in .venv, in $WORKERS pytest processes, the longest files first; about 16 to 21 min (977 s measured on 2 cores at load 0.69, 1260 s in another run; its environment made with uv; the README walkthrough 440 to 590 s of it)" ;;
    vllm) echo "the real vLLM engine on the CPU in .venv-vllm, Gemma 3 270M among its models, in $WORKERS pytest processes; about 2 min (101 s measured after the main tier, 93 s in another run; its engines in process)" ;;
    verl) echo "verl's own loaders and reward loop in .venv-verl, in $WORKERS pytest processes; about 1 to 2 min (75 s measured after the main tier, 86 s in another run)" ;;
    core) echo "the core install alone (no rag-retriever) in .venv-core; under a minute (12 s measured)" ;;
    retriever) echo "rag-retriever alone in .venv-retriever, its own tests; under a minute (8 s measured)" ;;
    pyserini) echo "pyserini's Lucene beside the toolkit's BM25 in .venv-pyserini; under a minute (20 s measured; environment made in the background)" ;;
    learning) echo "the tests where a model learns over tens of GRPO steps, in .venv; about 6 to 8 min" ;;
    trl-newest|trl-oldest) echo "the trainer's tests against the ${1#trl-} TRL the pin allows in .venv-$1; about 3 min (150 s measured, environment made)" ;;
    *) echo "?" ;;
  esac
}
# The environments take about 11 GB (.venv 3.2, .venv-vllm 3.6, .venv-pyserini 1.9, .venv-verl 1.6, .venv-core 0.4)
# and pip unpacks wheels in $TMPDIR as it goes: a disk that cannot hold them is said now, not as an OSError later
# (where an engine tier runs: the fast set needs .venv alone).
engines=false
for tier in $TIERS; do case $tier in vllm|verl|core|pyserini|retriever|trl-*) engines=true ;; esac; done
free_gb=$(df -Pk . 2>/dev/null | awk 'NR == 2 {print int($4 / 1048576)}')
if $engines && [ -n "$free_gb" ] && [ "$free_gb" -lt 15 ]; then
  echo "warning: $free_gb GB free on the disk of $(pwd); the test environments need about 11 GB and pip about 4 GB more while it installs (free some, e.g. old outputs/ or other checkouts' .venv*)" >&2
fi
setups=$(mktemp -d "${TMPDIR:-/tmp}/rag-curriculum-setups.XXXXXX")
chain=""
trap '[ -z "$chain" ] || { pkill -P "$chain" 2>/dev/null; kill "$chain" 2>/dev/null; } || true; rm -rf "$setups"' EXIT
# Java for pyserini: $JAVA_HOME/bin/java, else `java` on PATH (JAVA=CMD: another command)
have_java() {
  if [ -n "${JAVA:-}" ]; then command -v "$JAVA" >/dev/null; return; fi
  [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ] && return 0
  command -v java >/dev/null
}
engine_setups() {  # never two pip installs of this tree at once: after the main tier's, one after another
  for t in vllm verl core pyserini retriever; do
    [ "$t" != pyserini ] || have_java || continue  # its tier is skipped: no environment to make
    case " $TIERS " in *" $t "*)
      rc=0
      bash scripts/setup.sh "$t" >"$setups/$t.log" 2>&1 || rc=$?
      echo "$rc" >"$setups/$t.rc" ;;
    esac
  done
}
setup() {  # setup TIER: wait for its environment made in the background, or make it now
  if [ -n "$chain" ]; then
    while [ ! -f "$setups/$1.rc" ]; do sleep 2; done
    cat "$setups/$1.log"
    if [ "$(cat "$setups/$1.rc")" != 0 ]; then echo "error: the $1 tier's setup failed (its output is above)" >&2; return 1; fi
    return 0
  fi
  bash scripts/setup.sh "$1"
}
# After the main tier, the other tiers run one after another (LANES=1, the default), or in two lanes at once
# (LANES=2: the vLLM tier in one, the others one after another in the other). Two at once finish later, not
# sooner: on 2 cores, in one measurement each, the vllm and verl tiers took 156 s and 150 s alone (271 s and 234 s of
# CPU), 354 s and 347 s beside each other. A tier in a lane prints its output whole when it ends (two would interleave), and a line every
# minute names the tiers still running.
LANES=${LANES:-1}
[ "${SETUP_IN_BACKGROUND:-1}" != 0 ] || LANES=1  # (each lane's setup would be a pip install of this tree at once)
run_tier() {  # TIER N [pytest arguments for the main tier]: announce it, set it up, run it, record its time
  local tier=$1 n=$2 start=$SECONDS last here load
  shift 2
  last=$(grep "^$tier " "$TIMES" 2>/dev/null | tail -1 || true)
  here=${last:+; last run here: $(echo "$last" | awk '{printf "%s s at load %s (%s)", $2, $3, $4}')}
  load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?")
  echo "== tier $tier ($n of $n_tiers): $(about "$tier")$here"
  # (every step is checked with `|| return`: a function called as `run_tier ... || rc=$?` runs without set -e)
  case $tier in
    fast)
      bash scripts/setup.sh || return
      (. .venv/bin/activate && python "${FAST_PYTEST[@]}" "$@" && bash scripts/docs.sh) || return ;;
    slow)
      bash scripts/setup.sh || return
      if [ "${SETUP_IN_BACKGROUND:-1}" != 0 ] && [ -z "$chain" ]; then engine_setups & chain=$!; fi
      (. .venv/bin/activate && RAG_CURRICULUM_ALL_TESTS=1 python "${SLOW_PYTEST[@]}" "$@") || return ;;
    main)
      bash scripts/setup.sh || return
      if [ "${SETUP_IN_BACKGROUND:-1}" != 0 ] && [ -z "$chain" ]; then engine_setups & chain=$!; fi
      (. .venv/bin/activate && RAG_CURRICULUM_ALL_TESTS=1 python "${MAIN_PYTEST[@]}" "$@" && bash scripts/docs.sh) \
        || return ;;
    vllm) setup vllm && .venv-vllm/bin/python "${ENGINE_PYTEST[@]}" tests/tier_vllm || return ;;
    verl) setup verl && .venv-verl/bin/python "${ENGINE_PYTEST[@]}" tests/tier_verl || return ;;
    core) setup core && .venv-core/bin/python "${PYTEST[@]}" tests/tier_core || return ;;
    pyserini)
      if ! have_java; then
        echo "tier pyserini: skipped: no Java here (pyserini runs Lucene in a JVM: install a JDK or JRE, 11 or later, or set JAVA_HOME)"
        return 0
      fi
      setup pyserini && .venv-pyserini/bin/python "${PYTEST[@]}" tests/tier_pyserini || return ;;
    learning)
      bash scripts/setup.sh && (. .venv/bin/activate && python "${PYTEST[@]}" -m learning tests) || return ;;
    retriever) setup retriever && .venv-retriever/bin/python "${PYTEST[@]}" retriever/tests || return ;;
    trl-newest|trl-oldest)
      bash scripts/setup.sh "$tier" && ".venv-$tier/bin/python" "${PYTEST[@]}" "${TRAINER_TESTS[@]}" || return ;;
    *) echo "error: unknown tier '$tier' (fast, slow, main, vllm, verl, core, pyserini, retriever, learning, trl-newest, trl-oldest)" >&2; return 2 ;;
  esac
  echo "tier $tier: passed in $((SECONDS - start)) s (setup included; load $load when it started)"
  echo "$tier $((SECONDS - start)) $load $(git rev-parse --short HEAD 2>/dev/null || echo '-')" >> "$TIMES"
}
n_tiers=$(echo $TIERS | wc -w); i=0
declare -a laned=() lane1=() lane2=() failed=()
for tier in $TIERS; do  # the main tier (and the opt-in ones) here, one after another, as they run
  i=$((i + 1))
  case $tier in
    vllm|verl|core|pyserini|retriever)
      if [ "$LANES" = 1 ]; then  # a failed tier is said, and the others still run
        run_tier "$tier" "$i" || { failed+=("$tier"); echo "tier $tier: FAILED (its output is above)"; }
        continue
      fi
      laned+=("$tier:$i")
      if [ "$tier" = vllm ]; then lane1+=("$tier:$i"); else lane2+=("$tier:$i"); fi ;;
    fast|slow|main) run_tier "$tier" "$i" "$@" || exit ;;
    *) run_tier "$tier" "$i" || exit ;;
  esac
done
said_next() {  # after the README's command: what it left out, and how to run it
  [ "$TIERS" = "$FAST_TIERS" ] || return 0
  echo "the fast set passed; every other tier (the slow tests, vLLM, verl, the core install, pyserini, the retriever; about 20 to 25 min on 2 cores, and 11 GB of environments): bash scripts/test.sh --rest (CI: bash .ci/run runs both)"
}
if (( ${#laned[@]} == 0 )); then
  if (( ${#failed[@]} > 0 )); then echo "error: tiers failed: ${failed[*]}" >&2; exit 1; fi
  said_next
  exit 0
fi
# the environments made one after another in the background, if the main tier has not begun that already
if [ -z "$chain" ]; then engine_setups & chain=$!; fi
lanes=$(mktemp -d "${TMPDIR:-/tmp}/rag-curriculum-lanes.XXXXXX")
lane() {  # TIER:N ...: one after another, each one's output and exit status into $lanes
  local t rc
  for t in "$@"; do
    rc=0
    run_tier "${t%%:*}" "${t##*:}" >"$lanes/${t%%:*}.log" 2>&1 || rc=$?
    echo "$rc" >"$lanes/${t%%:*}.rc"
  done
}
(( ${#lane1[@]} == 0 )) || lane "${lane1[@]}" &
(( ${#lane2[@]} == 0 )) || lane "${lane2[@]}" &
echo "== tiers ${laned[*]%%:*} (the rest): in $LANES lanes at once, each printed whole when it ends"
pending=("${laned[@]%%:*}"); began=$SECONDS; said=$SECONDS
while (( ${#pending[@]} > 0 )); do
  left=()
  for t in "${pending[@]}"; do
    if [ -f "$lanes/$t.rc" ]; then
      cat "$lanes/$t.log"
      [ "$(cat "$lanes/$t.rc")" = 0 ] || { failed+=("$t"); echo "tier $t: FAILED (its output is above)"; }
    else
      left+=("$t")
    fi
  done
  pending=("${left[@]}")
  if (( ${#pending[@]} > 0 && SECONDS - said >= 60 )); then
    echo "   still running after $((SECONDS - began)) s: ${pending[*]}"; said=$SECONDS
  fi
  (( ${#pending[@]} == 0 )) || sleep 2
done
wait
rm -rf "$lanes"
if (( ${#failed[@]} > 0 )); then echo "error: tiers failed: ${failed[*]}" >&2; exit 1; fi
