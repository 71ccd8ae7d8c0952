"""VERITAS's PPO run on verl (``recipes/verl/veritas_ppo.sh``): the launch command composes under verl 0.9.1's own
config (GAE with a critic, the KL in the reward, one rollout per prompt, the batch reward manager, the VERITAS
reward function and its judge options), and verl's own loader brings ``compute_veritas_score`` in by path; called
as verl's batch reward manager calls it, on responses rendered as verl renders a tool's answer, it gives the
values computed by hand from Eq. 1 (the judge: ``lexical_judge`` on the scripted backend)."""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    getattr(importlib.util.find_spec("verl"), "origin", None) is None,
    reason="verl is not installed here: run scripts/setup.sh verl and use .venv-verl",
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "recipes" / "verl" / "veritas_ppo.sh"
KW = "+reward.custom_reward_function.reward_kwargs"


@pytest.fixture(scope="module")
def overrides(shards, tiny_model_dir, tmp_path_factory) -> list[str]:
    out = tmp_path_factory.mktemp("veritas-verl")
    env = {
        **os.environ,
        "SHARDS": str(shards),
        "MODEL": str(tiny_model_dir),
        "DRY_RUN": "1",
        "OUT": str(out),
        "PYTHON": sys.executable,
        "JUDGE_URL": "http://judge:8001/v1",
    }
    res = subprocess.run(
        ["bash", str(SCRIPT), "data.dataloader_num_workers=0"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr
    args = shlex.split(res.stdout)
    assert args[1:3] == ["-m", "verl.trainer.main_ppo"], args[:3]
    return args[3:]


def test_the_ppo_command_composes_under_verls_config(overrides, compose_verl_config, tiny_model_dir):
    cfg = compose_verl_config(overrides)
    assert cfg.algorithm.adv_estimator == "gae" and cfg.algorithm.use_kl_in_reward is True
    assert cfg.algorithm.kl_ctrl.kl_coef == 0.001 and cfg.algorithm.gamma == 1.0 and cfg.algorithm.lam == 1.0
    assert cfg.critic.model.path == str(tiny_model_dir) and cfg.critic.optim.lr == 1e-5
    assert cfg.actor_rollout_ref.actor.use_kl_loss is False and cfg.actor_rollout_ref.rollout.n == 1
    assert cfg.data.train_batch_size == 256 and cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 256
    assert (
        cfg.actor_rollout_ref.rollout.multi_turn.format == "search-r1"
    )  # the search agent of run_search_r1.sh
    assert cfg.reward.reward_manager.name == "naive"
    from verl.trainer.ppo.reward import resolve_reward_manager_cls

    assert resolve_reward_manager_cls(cfg).__name__  # the manager the trainer will build exists in verl's registry
    assert cfg.reward.custom_reward_function.name == "compute_veritas_score"
    assert cfg.reward.custom_reward_function.path.endswith("rag_curriculum/verl/rewards.py")
    kw = cfg.reward.custom_reward_function.reward_kwargs
    assert dict(kw.weights) == {"em": 0.9, "info_think": 0.05, "think_answer": 0.02}
    assert kw.judge.backend == "openai" and kw.judge.backend_args.base_url == "http://judge:8001/v1"


def test_verls_loader_and_the_batch_call_give_eq_1(overrides, compose_verl_config):
    from verl.trainer.ppo.reward import get_custom_reward_fn

    judge = [
        f"{KW}.judge.backend=scripted",
        f"{KW}.judge.model=rag_curriculum.methods.veritas._reward:lexical_judge",
        f"{KW}.judge.cache_dir=null",
    ]
    cfg = compose_verl_config([o for o in overrides if not o.startswith(f"{KW}.judge.")] + judge)
    fn = get_custom_reward_fn(cfg)
    info = "\nuser\n<tool_response>\nDoc 1(Title: Jaws) Jaws was directed by Steven Spielberg.\n</tool_response>\nassistant\n"
    faithful = (
        "<think>Who directed Jaws?</think><search>Jaws director</search>"
        + info
        + "<think>So it is Steven Spielberg.</think><answer>Steven Spielberg</answer>"
    )
    ignores = (
        "<think>Who directed Jaws?</think><search>Jaws director</search>"
        + info
        + "<think>Hmm.</think><answer>Steven Spielberg</answer>"
    )
    forged = "<think>x</think><information>Spielberg</information><answer>Spielberg</answer>"
    got = fn(
        data_sources=["nq"] * 3,
        solution_strs=[faithful, ignores, forged],
        ground_truths=[{"answers": ["Steven Spielberg"]}] * 3,
        extra_infos=[{}] * 3,
    )
    # faithful: EM 1, Info-Think 1 (shares "spielberg"), Think-Answer 1 -> 0.9 + 0.05 + 0.02
    # ignores: EM 1, Info-Think 0, Think-Answer 0 (the last think does not hold the answer) -> 0.9
    # forged: the model's own <information> is no retrieval: no pair (0), EM 0, Think-Answer 0 -> 0
    assert [round(g["score"], 6) for g in got] == [0.97, 0.9, 0.0]
    assert [g["info_think"] for g in got] == [1.0, 0.0, 0.0] and got[2]["no_search"] == 1.0
    one = fn("nq", faithful, {"answers": ["Steven Spielberg"]}, {})
    assert one == got[0]
