"""The verl recipe: the launch script reads the toolkit's shards in curriculum order with data.shuffle=False and
scores with the toolkit's compute_score (verl itself is not installed here: the command is checked, not run). Its
prompt-length checks are tested in tests/curricula/test_prompt_lengths.py; here the shards carry prompt_tokens counted with the tiny
model's tokenizer, which is the MODEL the script is given."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN

from rag_curriculum.verl.data import hydra_list, reward_path, train_files

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "recipes" / "verl" / "run_grpo.sh"


@pytest.fixture(scope="module")
def model(tiny_model_dir) -> Path:
    return tiny_model_dir


@pytest.fixture(scope="module")
def shards(tmp_path_factory, model) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("verl") / "musique-linear"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=50)], schedule="linear",
                                 out=str(out), seed=0, rows_per_shard=20, tokenizer=str(model)))
    return out


def _run(shards: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "SHARDS": str(shards), "DRY_RUN": "1", "PYTHON": sys.executable, **env}
    full.pop("MAX_PROMPT", None)
    full.setdefault("MODEL", json.loads((shards / "manifest.json").read_text())["prompt_tokens"]["tokenizer"])
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=full, cwd=ROOT)


@pytest.mark.slow
def test_train_files_in_curriculum_order(shards):
    import pyarrow.parquet as pq

    files = train_files(shards)
    assert [Path(f).name for f in files] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    index = [i for f in files for i in pq.read_table(f, columns=["curriculum_index"]).column(0).to_pylist()]
    assert index == list(range(50))
    assert hydra_list(files).startswith("['/") and hydra_list(files).count(",") == 2


def test_compute_score_file_is_the_toolkits():
    from rag_curriculum.verl.rewards import compute_score

    assert Path(reward_path()) == Path(sys.modules[compute_score.__module__].__file__)


@pytest.mark.slow
def test_launch_command(shards):
    res = _run(shards, "trainer.save_freq=5")
    assert res.returncode == 0, res.stderr
    args = shlex.split(res.stdout)
    assert args[1:3] == ["-m", "verl.trainer.main_ppo"]
    opts = dict(a.split("=", 1) for a in args[3:])
    assert opts["data.shuffle"] == "False"
    assert opts["data.train_files"] == hydra_list(train_files(shards))
    assert opts["reward.custom_reward_function.path"] == reward_path()
    assert opts["reward.custom_reward_function.name"] == "compute_score"
    assert opts["data.train_batch_size"] == "42" and opts["actor_rollout_ref.rollout.n"] == "7"
    assert opts["actor_rollout_ref.actor.kl_loss_coef"] == "0.01"
    # verl's actor config carries clip_ratio_low / clip_ratio_high (0.2 each) and the loss reads them before
    # clip_ratio, so the clipping is set there; AdamW's weight decay defaults to 0.01 in verl but 0.0 in TRL's
    # GRPOConfig (the TRL recipes): set to 0.0 so both paths train the same way.
    assert opts["actor_rollout_ref.actor.clip_ratio_low"] == opts["actor_rollout_ref.actor.clip_ratio_high"] == "0.2"
    assert opts["actor_rollout_ref.actor.optim.weight_decay"] == "0.0"
    assert opts["actor_rollout_ref.actor.loss_agg_mode"] == "seq-mean-token-mean"  # TRL's loss_type=grpo
    # one PPO update per step over the whole batch (on-policy, like TRL's one optimiser step per generation)
    assert opts["actor_rollout_ref.actor.ppo_mini_batch_size"] == opts["data.train_batch_size"]
    assert opts["actor_rollout_ref.actor.ppo_epochs"] == "1"
    assert opts["actor_rollout_ref.actor.optim.lr"] == "1e-6"
    assert opts["data.max_response_length"] == "800" and opts["trainer.total_epochs"] == "1"
    # no prompt is truncated or dropped: the prompt limit is the longest prompt, and no overlong filter
    longest = json.loads((shards / "manifest.json").read_text())["prompt_tokens"]["longest"]["tokens"]
    assert opts["data.max_prompt_length"] == str(longest)
    assert opts["data.filter_overlong_prompts"] == "False" and opts["data.truncation"] == "error"
    assert args[-1] == "trainer.save_freq=5"  # extra overrides come last and win
    assert "50 rows, 1 steps; the last 8 rows are dropped" in res.stderr


@pytest.mark.slow
def test_launch_refuses_a_batch_verl_cannot_split(shards):
    res = _run(shards, GPUS_PER_NODE="8")
    assert res.returncode == 2 and "294 sequences a step do not split over 8 GPUs" in res.stderr
    assert _run(shards, GPUS_PER_NODE="8", PROMPTS_PER_STEP="48").returncode == 0


@pytest.mark.slow
def test_dry_run_offline_says_what_it_could_not_check_and_prints_the_command(shards, tmp_path):
    """A Hub model id with no network (and nothing cached): the prompt lengths need its tokenizer, so the dry run
    says they are unchecked and prints the command all the same; the run itself refuses."""
    offline = {"MODEL": "Qwen/Qwen2.5-7B-Instruct", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    res = _run(shards, **offline)
    assert res.returncode == 0, res.stderr
    assert "not checked: whether the prompts fit the run's limits" in res.stderr
    assert "Qwen/Qwen2.5-7B-Instruct's tokenizer, which could not be loaded here" in res.stderr
    opts = dict(a.split("=", 1) for a in shlex.split(res.stdout)[3:])
    assert opts["actor_rollout_ref.model.path"] == "Qwen/Qwen2.5-7B-Instruct"
    assert opts["data.max_prompt_length"] == "UNCHECKED" == opts["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"]
    assert "50 rows, 1 steps; the last 8 rows are dropped" in res.stderr  # what needs no tokenizer is still said
    res = _run(shards, "data.max_prompt_length=6144", **offline)  # (or MAX_PROMPT=6144)
    opts = dict(a.split("=", 1) for a in shlex.split(res.stdout)[3:-1])
    assert res.returncode == 0 and opts["data.max_prompt_length"] == "6144"
    assert opts["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == str((6144 + 800) * 2)
    assert "keeps data.max_prompt_length=6144 unchecked" in res.stderr
    res = _run(shards, DRY_RUN="", **offline)  # the run itself: nothing is launched unchecked
    assert res.returncode == 2 and "could not load a tokenizer" in res.stderr and res.stdout == ""


@pytest.mark.slow
def test_a_curriculum_that_gives_no_step_is_refused_with_the_numbers(shards):
    res = _run(shards, PROMPTS_PER_STEP="63")  # 50 rows: verl's drop_last would leave 0 steps
    assert res.returncode == 2 and res.stdout == ""
    assert "has 50 rows, fewer than one batch of data.train_batch_size=63 prompts" in res.stderr
    assert "so the run would train 0 steps" in res.stderr and "set data.train_batch_size to at most 50" in res.stderr
    res = _run(shards, "data.train_batch_size=51")  # an override of the batch counts too
    assert res.returncode == 2 and "data.train_batch_size=51 prompts" in res.stderr
    assert _run(shards, "data.train_batch_size=50").returncode == 0


@pytest.mark.slow
def test_the_steps_read_every_override_the_launch_script_passes(shards):
    """`steps` (and the dry run, which calls it with the same overrides) counts the run as verl's trainer will run
    it: trainer.total_epochs and trainer.total_training_steps among the overrides, not one epoch always."""
    from rag_curriculum.verl.data import main

    def steps(*args):
        res = subprocess.run([sys.executable, "-m", "rag_curriculum.verl", "steps", str(shards), *args],
                             capture_output=True, text=True, cwd=ROOT)
        return res.returncode, res.stdout.strip(), res.stderr

    assert main(["steps", str(shards), "--train-batch-size", "10"]) == 0
    rc, out, err = steps("--train-batch-size", "10", "trainer.total_epochs=2")
    assert (rc, out) == (0, "10")  # 5 steps an epoch, two epochs
    assert "the run: 10 steps (trainer.total_epochs=2" in err
    assert "each epoch restarts the curriculum at its easiest rows" in err and "at step 6" in err
    rc, out, err = steps("--train-batch-size", "10", "trainer.total_training_steps=2")
    assert (rc, out) == (0, "2")
    assert "the run stops after 2 of the curriculum's 5 steps" in err
    assert "the first 20 of 50 rows, the easiest; the last 30 are never trained (curriculum_index 20..49" in err
    rc, out, err = steps("--train-batch-size", "10", "trainer.total_training_steps=9")  # one epoch caps it
    assert (rc, out) == (0, "5") and "trainer.total_training_steps=9 is more than the 5 steps" in err
    rc, out, err = steps("--train-batch-size", "10", "trainer.total_training_steps=null", "+trainer.total_epochs=1")
    assert (rc, out) == (0, "5") and "note:" not in err  # one pass: nothing to say
    for setting in ("trainer.total_training_steps=0", "trainer.total_epochs=0"):
        rc, out, err = steps("--train-batch-size", "10", setting)
        assert (rc, out) == (2, ""), setting
        assert f"error: {setting}: verl's trainer would train 0 steps" in err and "Nothing was run" in err
        assert "for one pass over the curriculum (5 steps of 10 prompts)" in err
    for setting in ("trainer.total_epochs=two", "data.train_batch_size=null"):  # one line, not a traceback
        rc, out, err = steps("--train-batch-size", "10", setting)
        assert (rc, out) == (2, "") and err.startswith(f"error: {setting.split('=')[0]}") and "Traceback" not in err


@pytest.mark.slow
def test_the_dry_run_refuses_a_run_of_no_steps_and_says_the_epochs_before_it(shards):
    res = _run(shards, "trainer.total_training_steps=0")
    assert res.returncode == 2 and res.stdout == ""
    assert "trainer.total_training_steps=0: verl's trainer would train 0 steps" in res.stderr
    res = _run(shards, "trainer.total_epochs=0")
    assert res.returncode == 2 and "trainer.total_epochs=0: verl's trainer would train 0 steps" in res.stderr
    res = _run(shards, "trainer.total_epochs=3", PROMPTS_PER_STEP="14", GPUS_PER_NODE="7")
    assert res.returncode == 0, res.stderr
    assert "the run: 9 steps (trainer.total_epochs=3" in res.stderr  # 50 rows: 3 steps of 14, three times
    assert "at step 4, step 7" in res.stderr and "from easy to hard 3 times" in res.stderr
    opts = dict(a.split("=", 1) for a in shlex.split(res.stdout)[3:])
    assert opts["trainer.total_epochs"] == "3"  # the command verl runs has what was counted
    res = _run(shards)  # the script's own trainer.total_epochs=1: one pass, said as such
    assert res.returncode == 0 and "the run: 1 step (trainer.total_epochs=1" in res.stderr


@pytest.mark.slow
def test_curriculum_verl_runs_the_same_commands_as_the_module(shards):
    """`curriculum verl COMMAND` (a subcommand with its own --help) answers as `python -m rag_curriculum.verl
    COMMAND` does: the same stdout, stderr and exit status, the launch script's overrides passed through."""
    curriculum = str(Path(sys.executable).with_name("curriculum"))
    seen = {}
    for args in (["train-files", str(shards)], ["reward-path"],
                 ["steps", str(shards), "--train-batch-size", "10", "trainer.total_epochs=2"],
                 ["steps", str(shards), "--train-batch-size", "10", "trainer.total_epochs=0"],
                 ["check-lengths", str(shards), "--response-length", "8"]):
        ours = subprocess.run([curriculum, "verl", *args], capture_output=True, text=True, cwd=ROOT)
        module = subprocess.run([sys.executable, "-m", "rag_curriculum.verl", *args], capture_output=True, text=True,
                                cwd=ROOT)
        assert (ours.returncode, ours.stdout, ours.stderr) == (module.returncode, module.stdout, module.stderr), args
        seen[" ".join(args[2:]) or args[0]] = (ours.returncode, ours.stdout.strip())
    assert seen["--train-batch-size 10 trainer.total_epochs=2"] == (0, "10")  # 5 steps an epoch, two epochs
    assert seen["--train-batch-size 10 trainer.total_epochs=0"][0] == 2  # a run of no steps, refused
    assert seen["--response-length 8"][0] == 2  # check-lengths without --prompt-length: a usage error
    help_ = subprocess.run([curriculum, "verl", "--help"], capture_output=True, text=True, env={
        **os.environ, "COLUMNS": "100"})
    assert help_.returncode == 0
    for command in ("train-files", "reward-path", "reward-manager-path", "lengths", "check-lengths", "steps",
                    "agent-data"):
        assert command in help_.stdout
