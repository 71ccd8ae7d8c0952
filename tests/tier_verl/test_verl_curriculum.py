"""The curriculum in verl 0.9.1's default (v1, sync) trainer: the toolkit's dataset class (``data.custom_cls``) and
replay buffer (``trainer.v1.sampler.custom_sampler``) as verl's own ``PPOTrainerSync`` builds them from the launch
script's config, driven through verl's own step code: ``prepare_step`` (the train loader's next batch, registered
and handed to rollout) and ``replay_buffer.sample`` (verl's sampling, DAPO's filter and its refills through the
trainer's ``_add_prompts_to_generate``).

What a GPU run has and these tests do not: the rollout and TransferQueue. Rollouts are scripted (each session
answers right or wrong, scored by the toolkit's ``compute_score`` as verl's reward loop calls it), and TransferQueue,
which runs as Ray actors, is an in-memory store of the four calls verl's sync path makes of it (``kv_batch_put``,
``kv_list``, ``kv_batch_get``, ``kv_clear``) with its semantics: tags merge, fields are kept per key."""

from __future__ import annotations

import importlib.util
import json
import shlex
from collections import defaultdict

import pytest
from conftest import MUSIQUE_TRAIN

pytestmark = [
    pytest.mark.skipif(getattr(importlib.util.find_spec("verl"), "origin", None) is None,
                       reason="verl is not installed here: run scripts/setup.sh verl and use .venv-verl"),
    # verl 0.9.1 loads a custom sampler with a helper it has itself deprecated (trainer_base.py): not ours to fix
    pytest.mark.filterwarnings("ignore:.*load_extern_type' is deprecated:FutureWarning"),
]

BATCH = 4
N = 2  # rollout.n


class MemoryTQ:
    """TransferQueue's key-value calls, as verl's sync trainer and replay buffer make them, in memory."""

    def __init__(self):
        self.tags: dict[str, dict[str, dict]] = defaultdict(dict)
        self.fields: dict[str, dict[str, dict]] = defaultdict(dict)

    @staticmethod
    def _key(k):
        return str(getattr(k, "data", k))

    def kv_batch_put(self, keys, partition_id, tags=None, fields=None):
        for i, k in enumerate(keys):
            k = self._key(k)
            self.tags[partition_id].setdefault(k, {}).update(tags[i] if tags else {})
            if fields is not None:
                self.fields[partition_id][k] = fields[i]

    def kv_list(self, partition_id=None):
        parts = [partition_id] if partition_id else list(self.tags)
        return {p: {k: dict(t) for k, t in self.tags[p].items()} for p in parts}

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        return {f: [self.fields[partition_id][self._key(k)][f] for k in keys] for f in select_fields}

    def kv_clear(self, keys, partition_id):
        for k in [keys] if isinstance(keys, str) else keys:
            self.tags[partition_id].pop(self._key(k), None)
            self.fields[partition_id].pop(self._key(k), None)


class ScriptedRollout:
    """verl's agent loop manager, scripted: each prompt's ``rollout.n`` sessions answer right when
    ``right(row, session)`` says so, scored by the toolkit's ``compute_score``, and are put into the store as
    ``AgentLoopWorkerTQ`` puts them (``{uid}_{session}_0`` with the prompt's fields, ``rm_scores``, ``extra_fields``;
    then the prompt's status ``finished``)."""

    def __init__(self, tq, n, right):
        self.tq, self.n, self.right = tq, n, right
        self.rows_seen: list[dict] = []

    def generate_sequences(self, batch):
        import torch
        from tensordict import NonTensorData, NonTensorStack

        from rag_curriculum.verl.rewards import compute_score

        for i in range(len(batch)):
            prompt = {}
            for k, v in batch.items():  # as AgentLoopWorkerTQ.generate_sequences reads a row
                if isinstance(v, torch.Tensor):
                    prompt[k] = v[i]
                elif isinstance(v, NonTensorStack):
                    prompt[k] = v[i].data
                elif isinstance(v, NonTensorData):
                    prompt[k] = v.data
            self.rows_seen.append(prompt)
            uid = prompt["uid"]
            for s in range(self.n):
                answer = prompt["reward_model"]["ground_truth"]["answers"][0] if self.right(prompt, s) else "nobody"
                text = f"<reasoning>\nx\n</reasoning>\n<answer>\nFinal answer: {answer}\nSupporting passages: x\n</answer>"
                score = compute_score(prompt["data_source"], text, prompt["reward_model"]["ground_truth"],
                                      prompt["extra_info"])
                fields = {**prompt, "rm_scores": torch.tensor([0.0, float(score["score"])]),
                          "extra_fields": {"reward_extra_info": {k: v for k, v in score.items() if k != "score"}}}
                self.tq.kv_batch_put([f"{uid}_{s}_0"], "train", tags=[{"status": "success",
                                                                        "global_steps": prompt["global_steps"]}],
                                     fields=[fields])
            self.tq.kv_batch_put([uid], "train", tags=[{"status": "finished"}])


@pytest.fixture
def memory_tq(monkeypatch):
    from verl.trainer.ppo.v1 import replay_buffer, trainer_base

    tq = MemoryTQ()
    monkeypatch.setattr(trainer_base, "tq", tq)
    monkeypatch.setattr(replay_buffer, "tq", tq)
    return tq


def _launched(launch, shards, *extra, **env) -> list[str]:
    """The Hydra overrides of the launch script's verl command (its dry run) on ``shards``, with small batches and
    the loader in the main process."""
    res = launch(shards, "data.dataloader_num_workers=0", f"data.train_batch_size={BATCH}",
                 f"actor_rollout_ref.rollout.n={N}", *extra, **env)
    assert res.returncode == 0, res.stderr
    return shlex.split(res.stdout)[3:]


@pytest.fixture(scope="module")
def script_overrides(launch, shards) -> list[str]:
    return _launched(launch, shards)


@pytest.fixture
def v1_config(script_overrides, compose_verl_config, tmp_path):
    """``v1_config(*overrides, base=script_overrides)``: verl's config as the launch script sets it, with more
    overrides and the checkpoint folder in a temporary directory."""
    return lambda *extra, base=script_overrides: compose_verl_config(
        [*base, f"trainer.default_local_dir={tmp_path / 'run'}", *extra])


def _trainer(config, tokenizer, tq, right=lambda row, s: s == 0):
    """verl's own sync trainer on ``config``: its replay buffer built by its ``_build_replay_buffer``, its loaders
    by ``_init_dataloader``, and the scripted rollout as its agent loop manager (what ``init()`` and ``fit()`` set
    up before the first step, without the GPU workers)."""
    import copy

    from verl.trainer.ppo.v1 import PPOTrainerSync

    trainer = PPOTrainerSync(config=copy.deepcopy(config))
    trainer.tokenizer, trainer.processor = tokenizer, None
    trainer._init_dataloader()
    trainer.agent_loop_manager = ScriptedRollout(tq, N, right)
    trainer.global_steps = 1
    return trainer


def _steps(trainer, tq, count):
    """``count`` steps of verl's ``PPOTrainer.step`` up to the update: ``prepare_step`` then
    ``replay_buffer.sample``, then the store cleared as ``fit`` clears it; the metrics of each."""
    out = []
    for _ in range(count):
        trainer.prepare_step()
        batch, metrics = trainer.replay_buffer.sample(global_steps=trainer.global_steps, partition_id="train",
                                                      batch_size=trainer.config.data.train_batch_size)
        tq.kv_clear(keys=batch.keys, partition_id=batch.partition_id)
        out.append(metrics)
        trainer.global_steps += 1
    return out


def test_the_launch_script_loads_the_curriculum_classes_in_verls_default_trainer(v1_config, tokenizer, memory_tq):
    cfg = v1_config()
    assert cfg.trainer.use_v1 is True and cfg.trainer.v1.trainer_mode == "sync"  # verl 0.9's default trainer
    trainer = _trainer(cfg, tokenizer, memory_tq)
    assert type(trainer.replay_buffer).__name__ == "CurriculumReplayBuffer"
    assert type(trainer.train_dataset).__name__ == "CurriculumRLHFDataset"
    assert trainer.replay_buffer.filter_groups_metric is None and trainer.replay_buffer.gen_batch_size == BATCH


def test_each_step_trains_the_next_rows_and_says_so(v1_config, shard_rows, tokenizer, memory_tq):
    cfg = v1_config()
    trainer = _trainer(cfg, tokenizer, memory_tq)
    metrics = _steps(trainer, memory_tq, 3)
    records = trainer.replay_buffer.records
    want = [r["curriculum_index"] for r in shard_rows]
    assert [r["curriculum_index"] for r in records] == [want[0:4], want[4:8], want[8:12]]
    assert all(r["in_order"] and r["dropped"] == [] for r in records)
    # the metrics verl logs with the step's own
    assert metrics[0]["curriculum/in_order"] == 1.0 and metrics[0]["curriculum/level_mean"] == 1.0
    assert metrics[2]["curriculum/index_first"] == want[8] and metrics[2]["curriculum/index_last"] == want[11]
    # one JSON line a step in the checkpoint folder
    lines = (trainer.replay_buffer.steps_file).read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3]
    assert str(trainer.replay_buffer.steps_file.parent) == str(cfg.trainer.default_local_dir)


def test_dapo_drops_the_groups_that_teach_nothing_and_refills_in_curriculum_order(v1_config, tokenizer, memory_tq):
    """verl's filter_groups on acc (what DYNAMIC=1 DYNAMIC_METRIC=acc sets): rows with an even curriculum_index are
    answered right by every session (zero variance, dropped), the others right once; the trained rows of each step
    are the informative ones, and trained plus dropped are the next rows of the curriculum."""
    cfg = v1_config("algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=acc",
                    "data.gen_batch_size=1")
    trainer = _trainer(cfg, tokenizer, memory_tq, right=lambda row, s: row["curriculum_index"] % 2 == 0 or s == 0)
    assert trainer.replay_buffer.filter_groups_metric == "acc" and trainer.replay_buffer.gen_batch_size == 1
    metrics = _steps(trainer, memory_tq, 2)
    records = trainer.replay_buffer.records
    seen = [int(r["curriculum_index"]) for r in trainer.agent_loop_manager.rows_seen]
    assert seen == list(range(len(seen)))  # verl fetched the rows in curriculum order (refills included)
    for rec in records:
        assert rec["in_order"] and len(rec["curriculum_index"]) == BATCH
        assert all(i % 2 == 1 for i in rec["curriculum_index"]) and all(i % 2 == 0 for i in rec["dropped"] if
                                                                          i is not None)
    fetched = sorted(records[0]["curriculum_index"] + [i for i in records[0]["dropped"] if i is not None])
    assert fetched == list(range(records[0]["next_position"]))  # step 1: the first rows, trained or dropped
    assert records[1]["first_position"] == records[0]["next_position"]
    assert metrics[0]["training/filter_groups/evicted_samples"] >= 1  # verl's own DAPO counters, unchanged
    assert metrics[0]["curriculum/dropped_rows"] == len(records[0]["dropped"])


def test_data_shuffle_a_batch_too_large_and_rows_out_of_order_are_refused(v1_config, tokenizer, memory_tq):
    from omegaconf import open_dict

    from rag_curriculum.errors import ConfigError, CurriculumOrderError

    with pytest.raises(ConfigError, match="data.shuffle=True would shuffle the curriculum"):
        _trainer(v1_config("data.shuffle=True"), tokenizer, memory_tq)
    with pytest.raises(ConfigError, match=r"has 100 rows, fewer than one batch of data.train_batch_size=101"):
        _trainer(v1_config("data.train_batch_size=101"), tokenizer, memory_tq)
    cfg = v1_config()
    with open_dict(cfg):
        cfg.data.train_files = list(reversed(list(cfg.data.train_files)))  # the shard files out of manifest order
    with pytest.raises(CurriculumOrderError, match="curriculum_index is not increasing"):
        _trainer(cfg, tokenizer, memory_tq)

    # verl's own dataset with shuffle on and the toolkit's replay buffer: the first step is refused
    cfg = v1_config("data.shuffle=True", "data.seed=0", "data.custom_cls.path=null")
    trainer = _trainer(cfg, tokenizer, memory_tq)
    assert type(trainer.train_dataset).__name__ == "RLHFDataset"
    with pytest.raises(CurriculumOrderError, match="step 1 fetched curriculum_index .* not in curriculum order"):
        _steps(trainer, memory_tq, 1)


def test_a_run_of_no_steps_is_refused_and_a_second_epoch_said_before_it(v1_config, shard_rows, tokenizer,
                                                                        memory_tq, caplog):
    """verl's trainer builds the replay buffer before anything runs: trainer.total_training_steps=0 or
    trainer.total_epochs=0 (verl would train nothing and end as if done) is refused there; trainer.total_epochs=2 is
    said there, and verl's own loader then restarts at the curriculum's first rows at step 3 (8 rows, 4 a step),
    which the buffer records as in order (the epoch's restart), not as rows out of order."""
    import logging

    from rag_curriculum.errors import ConfigError

    for setting in ("trainer.total_training_steps=0", "trainer.total_epochs=0"):
        with pytest.raises(ConfigError, match=f"{setting}: verl's trainer would train 0 steps"):
            _trainer(v1_config(setting), tokenizer, memory_tq)
    with caplog.at_level(logging.WARNING, logger="rag_curriculum"):
        trainer = _trainer(v1_config("trainer.total_epochs=2", "data.train_max_samples=8"), tokenizer, memory_tq)
    assert "the run trains 4 steps, 2 epochs of 2: each epoch restarts the curriculum at its easiest rows " \
           "(verl's loader reads from the first row again at step 3)" in caplog.text
    assert trainer.total_training_steps == 4 and trainer.replay_buffer.run.steps == 4  # verl's count, and ours
    _steps(trainer, memory_tq, 4)
    want = [r["curriculum_index"] for r in shard_rows]
    records = trainer.replay_buffer.records
    assert [r["curriculum_index"] for r in records] == [want[0:4], want[4:8], want[0:4], want[4:8]]
    assert all(r["in_order"] for r in records) and records[2]["first_position"] == 0


@pytest.fixture(scope="module")
def adaptive_shards(tmp_path_factory, tiny_model_dir):
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("verl-v1-adaptive") / "musique-adaptive"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=16)], schedule="adaptive",
                                 K=3, out=str(out), seed=0, tokenizer=str(tiny_model_dir)))
    return out


def test_adaptive_levels_move_in_verls_default_trainer_and_resume_exactly(launch, v1_config, adaptive_shards,
                                                                          tokenizer, memory_tq):
    """Every group answered right: target-band's T goes 1 -> 1.76 -> 2.52 -> ..., so the rows verl fetches for
    steps 1, 2, 3 are rendered at levels 1, 2, 3; a loader restored from verl's checkpoint after step 2 (saved
    after the step's update) gives level 3 again."""
    cfg = v1_config("data.custom_cls.path=pkg://rag_curriculum.verl.adaptive",
                    "data.custom_cls.name=AdaptiveRLHFDataset", "+data.adaptive.controller=target-band",
                    "+data.adaptive.success=exact_match", base=_launched(launch, adaptive_shards))
    trainer = _trainer(cfg, tokenizer, memory_tq, right=lambda row, s: True)
    metrics = _steps(trainer, memory_tq, 2)
    assert [m["curriculum/level_mean"] for m in metrics] == [1.0, 2.0]
    assert [round(m["curriculum/next_target"], 2) for m in metrics] == [1.76, 2.52]
    state = trainer.train_dataloader.state_dict()  # what verl saves in data.pt after step 2
    metrics += _steps(trainer, memory_tq, 1)
    assert metrics[2]["curriculum/level_mean"] == 3.0

    resumed = _trainer(cfg, tokenizer, memory_tq, right=lambda row, s: True)
    resumed.train_dataloader.load_state_dict(state)  # the dataset's state is restored when the loader starts
    assert [int(x) for x in resumed._next_train_batch()["level"]] == [3] * BATCH
    assert resumed.train_dataset.controller.batch == 2
