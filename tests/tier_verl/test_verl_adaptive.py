"""verl 0.9.1 loads the toolkit's adaptive dataset class by path (``data.custom_cls``): rows come out rendered at
the controller's level, the legacy trainer's ``on_batch_end(batch=...)`` moves the level, and verl's
``StatefulDataLoader`` checkpoint carries the controller (with ``state_dir``, exactly past verl's save-before-
update order)."""

from __future__ import annotations

import copy
import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import MUSIQUE_TRAIN

pytestmark = pytest.mark.skipif(getattr(importlib.util.find_spec("verl"), "origin", None) is None,
                                reason="verl is not installed here: run scripts/setup.sh verl and use .venv-verl")

K = 3
PROMPTS = 2
N = 2  # rollout.n


@pytest.fixture(scope="module")
def adaptive_shards(tmp_path_factory, shared_data, tiny_model_dir):
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("verl-adaptive") / "musique-adaptive"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=8)], schedule="adaptive",
                                 K=K, out=str(out), seed=0, tokenizer=str(tiny_model_dir)))
    return out


@pytest.fixture(scope="module")
def adaptive_config(launch, compose_verl_config, adaptive_shards):
    """The launch script's verl config on the adaptive shards with the toolkit's dataset class (one dry run)."""
    import shlex

    res = launch(adaptive_shards, "data.dataloader_num_workers=0", f"data.train_batch_size={PROMPTS}",
                 "data.custom_cls.path=pkg://rag_curriculum.verl.adaptive",
                 "data.custom_cls.name=AdaptiveRLHFDataset", "+data.adaptive.controller=target-band",
                 "+data.adaptive.success=exact_match", "+data.adaptive.state_dir=null")
    assert res.returncode == 0, res.stderr
    return compose_verl_config(shlex.split(res.stdout)[3:])


def _config(base, **data):
    from omegaconf import open_dict

    cfg = copy.deepcopy(base)
    with open_dict(cfg):
        for key, value in data.items():
            node, _, leaf = key.rpartition(".")
            (cfg.data if not node else cfg.data[node])[leaf] = value
    return cfg


def _loader(cfg, tokenizer):
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    trainer = SimpleNamespace(config=copy.deepcopy(cfg), tokenizer=tokenizer, processor=None,
                              trainer_mode=cfg.trainer.v1.trainer_mode, parameter_sync_step=1)
    PPOTrainer._init_dataloader(trainer)
    return trainer.train_dataset, trainer.train_dataloader


def _scored(batch, acc):
    """What verl's legacy trainer hands on_batch_end: the batch repeated rollout.n times (interleaved) with a uid per
    prompt, its non-tensor columns, and the reward's extra info (``acc``: the toolkit's exact match)."""
    n = len(batch["id"])
    rep = lambda xs: np.array([x for x in xs for _ in range(N)], dtype=object)  # noqa: E731
    return SimpleNamespace(batch={}, non_tensor_batch={
        "uid": rep([f"u{i}" for i in range(n)]), "id": rep(batch["id"]), "extra_info": rep(batch["extra_info"]),
        "acc": np.array([acc] * (n * N), dtype=float)})


def test_rows_follow_the_controller_and_resume(adaptive_config, adaptive_shards, tokenizer, tmp_path):
    from rag_curriculum.curricula.adaptive import LevelRenderer
    from rag_curriculum.shards import read_manifest, read_rows

    cfg = _config(adaptive_config, **{"adaptive.state_dir": str(tmp_path / "state")})
    dataset, loader = _loader(cfg, tokenizer)
    assert type(dataset).__name__ == "AdaptiveRLHFDataset"
    rows = read_rows(adaptive_shards)
    renderer = LevelRenderer(read_manifest(adaptive_shards))
    it = iter(loader)
    first = next(it)
    assert list(first["level"]) == [1, 1] and list(first["curriculum_index"]) == [0, 1]
    # the prompt verl's rollout gets is the row rendered at the level; so are the reward's ground truth and labels
    want = renderer.render(rows[:2], [1, 1])
    assert [list(p) for p in first["raw_prompt"]] == [w["prompt"] for w in want]
    assert [r["ground_truth"] for r in first["reward_model"]] == [w["reward_model"]["ground_truth"] for w in want]
    dataset.on_batch_end(batch=_scored(first, 1.0))  # all right: T 1 -> 1.76
    second = next(it)
    assert list(second["level"]) == [2, 2]
    state = loader.state_dict()  # verl checkpoints here, before it calls on_batch_end for this step
    dataset.on_batch_end(batch=_scored(second, 1.0))  # T -> 2.52
    third = next(it)
    assert list(third["level"]) == [3, 3]

    resumed_dataset, resumed = _loader(cfg, tokenizer)
    resumed.load_state_dict(state)
    assert [list(b["level"]) for b in resumed][:1] == [[3, 3]]  # the update after the checkpoint is not lost
    assert resumed_dataset.controller.batch == 2

    # without state_dir the resumed run falls one update behind (and says so)
    cfg2 = _config(adaptive_config, **{"adaptive.state_dir": str(tmp_path / "other-state")})
    _, again = _loader(cfg2, tokenizer)
    again.load_state_dict(state)
    assert [list(b["level"]) for b in again][:1] == [[2, 2]]


def test_worker_processes_refused(adaptive_config, tokenizer):
    from rag_curriculum.errors import ConfigError

    cfg = _config(adaptive_config, dataloader_num_workers=2)
    with pytest.raises(ConfigError, match="dataloader_num_workers=2"):
        _loader(cfg, tokenizer)
