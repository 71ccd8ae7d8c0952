"""The curriculum in verl's default trainer: two classes verl 0.9 loads by path (docs/own-trainer.md).

verl 0.8 removed its curriculum sampler and ``DynamicGenDataset`` (verl#6302), and verl 0.9 runs its v1 trainer by
default (``trainer.use_v1=true``, ``trainer.v1.trainer_mode=sync``). That trainer keeps two public extension points
that load a class by path, and the toolkit plugs one class into each::

    python -m verl.trainer.main_ppo ... data.shuffle=False \\
        data.custom_cls.path=pkg://rag_curriculum.verl.curriculum data.custom_cls.name=CurriculumRLHFDataset \\
        trainer.v1.sampler.custom_sampler.path=pkg://rag_curriculum.verl.curriculum \\
        trainer.v1.sampler.custom_sampler.name=CurriculumReplayBuffer

(:func:`curriculum_overrides` makes these for a shard folder, with the reward; ``recipes/verl/run_grpo.sh`` passes
them.)

**The dataset** (``data.custom_cls``): :class:`CurriculumRLHFDataset` is verl's ``RLHFDataset`` over the shards.
For the training files (``data.train_files``; validation files are read as verl reads them) it

* refuses ``data.shuffle=True`` (verl's default), which would feed the rows through a seeded ``RandomSampler``;
* refuses rows out of curriculum order (``curriculum_index`` not increasing: the shard files listed out of
  manifest order, or files that are not a curriculum's);
* refuses a curriculum that gives no step (fewer rows than ``data.train_batch_size``: verl's loader drops the
  incomplete batch), and says, before the run starts, how many steps it gives and which rows ``drop_last`` leaves;
* says how many rows ``data.filter_overlong_prompts`` dropped (the longest prompts: a curriculum's hardest rows).

**The replay buffer** (``trainer.v1.sampler.custom_sampler``): :class:`CurriculumReplayBuffer` is verl's own
synchronous ``ReplayBuffer``. verl makes it with the trainer, before anything runs: it counts the steps the run
will take (``trainer.total_epochs``, ``trainer.total_training_steps``, the rows of ``data.train_files``), refuses a
run of 0 steps, and says when an epoch after the first restarts the curriculum at its easiest rows, or a step limit
never reaches its hardest (:func:`planned_run`). verl calls its ``sample`` once a step, after the step's rollouts
are scored; it samples as verl's does, then

* reads the rows of the step (``curriculum_index``, ``id``, ``level``, ``hops``) and the rows dropped on the way,
  checks that together they are the next rows of the curriculum (an epoch starts again from the first row), writes
  one JSON line a step to ``curriculum_steps.jsonl`` (in ``trainer.default_local_dir``; ``steps_file`` moves it) and
  refuses a step out of order (``order_policy: warn`` logs it and goes on);
* returns ``curriculum/*`` metrics (``level_mean``, ``index_first`` / ``index_last``, ``in_order``,
  ``dropped_rows`` ...), which verl logs with its own for the step;
* runs verl's DAPO filter (``algorithm.filter_groups``) unchanged: refills take the next rows of the curriculum;
* moves an adaptive curriculum's level: with :class:`~rag_curriculum.verl.adaptive.AdaptiveRLHFDataset` as the
  dataset, every scored group of the step (those DAPO dropped included) is fed to its controller before the next
  step's rows are fetched, and verl's checkpoint of the data loader holds the controller after that update.

Its settings go in ``trainer.v1.sampler.sampler_kwargs`` (``+trainer.v1.sampler.sampler_kwargs.order_policy=warn``,
``...steps_file=PATH``). Where verl's public API stops, and what the buffer does there:

* verl hands a custom sampler neither ``algorithm.filter_groups`` nor the batch sizes ("custom implementations own
  their filtering semantics"): the buffer reads them from the trainer's config (the refill function verl hands it is
  the trainer's method) and computes them as verl's ``_build_replay_buffer`` does for its own buffer;
* the groups DAPO drops are deleted by ``ReplayBuffer._clear_groups`` inside ``sample``: the buffer overrides that
  method (a few lines) to read their rows and scores first;
* only the sync trainer (the default) is supported: the asynchronous ones train rows steps after they were fetched,
  and are refused.

verl is imported only when a class is first used (this module imports without it).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError, CurriculumOrderError
from ..train import STEPS_FILE, check_index_order, read_steps
from .data import VerlRun, hydra_list, reward_path, run_settings, train_files, verl_run, verl_steps

#: The two classes verl loads by path: made on first use (module ``__getattr__``), since they subclass verl's own.
_LAZY = ("CurriculumRLHFDataset", "CurriculumReplayBuffer")

__all__ = [*_LAZY, "curriculum_overrides"]

log = logging.getLogger(__name__)

MODULE = "pkg://rag_curriculum.verl.curriculum"
#: The row fields each step's record keeps, read from verl's trajectories.
ROW_FIELDS = ("curriculum_index", "id", "level", "hops")
ORDER_POLICIES = ("refuse", "warn")


def curriculum_overrides(shards: str | Path, *, val_shards: str | Path | None = None, adaptive: bool = False,
                         reward: str = "compute_score") -> list[str]:
    """The verl Hydra overrides that train ``shards`` in curriculum order in verl's default trainer: the shard files
    in manifest order, ``data.shuffle=False``, the two classes of this module (``adaptive``: the adaptive dataset,
    which needs ``data.dataloader_num_workers=0``) and the toolkit's reward function ``reward``."""
    dataset = ("pkg://rag_curriculum.verl.adaptive", "AdaptiveRLHFDataset") if adaptive else (
        MODULE, "CurriculumRLHFDataset")
    out = [f"data.train_files={hydra_list(train_files(shards))}",
           f"data.val_files={hydra_list(train_files(val_shards if val_shards is not None else shards))}",
           "data.shuffle=False", f"data.custom_cls.path={dataset[0]}", f"data.custom_cls.name={dataset[1]}",
           f"trainer.v1.sampler.custom_sampler.path={MODULE}",
           "trainer.v1.sampler.custom_sampler.name=CurriculumReplayBuffer",
           f"reward.custom_reward_function.path={reward_path()}", f"reward.custom_reward_function.name={reward}"]
    if adaptive:
        out.append("data.dataloader_num_workers=0")
    return out


def plain(value: Any) -> Any:
    """An OmegaConf node as plain Python (anything else as it is)."""
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(value):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover - verl brings omegaconf
        pass
    return value


def _files(value: Any) -> list[str]:
    value = plain(value)
    return [str(value)] if isinstance(value, str | Path) else [str(v) for v in value or []]


def _py(value: Any) -> Any:
    """A field as verl's TransferQueue hands it back (NonTensorData, a 0-d tensor, a numpy scalar) as plain Python."""
    value = getattr(value, "data", value)
    if hasattr(value, "numel") and value.numel() == 1:
        return value.item()
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        return value.item()
    return value


def _levels(values: Iterable[Any]) -> str:
    shown = sorted({v for v in values if v is not None})
    return f"level{'s' if len(shown) > 1 else ''} {', '.join(map(str, shown))}"


# --- the dataset ---------------------------------------------------------------------------------------------------
def _make_dataset_class() -> type:
    from verl.utils.dataset.rl_dataset import RLHFDataset

    class CurriculumRLHFDataset(RLHFDataset):
        """verl's ``RLHFDataset`` over a curriculum's shards, checked (see the module doc)."""

        def __init__(self, data_files, tokenizer, config, processor=None, max_samples: int = -1):
            # verl builds its validation set with the same class: the checks are for the training files
            self.is_train = _files(data_files) == _files(config.get("train_files"))
            if self.is_train and config.get("shuffle", True):
                raise ConfigError(
                    "data.shuffle=True would shuffle the curriculum: verl's trainer then draws the rows with a "
                    "seeded RandomSampler, not in curriculum order",
                    hint="set data.shuffle=False (verl then reads the rows in order, with a SequentialSampler)")
            self.filtered_rows: list[int] = []
            super().__init__(data_files=data_files, tokenizer=tokenizer, config=config, processor=processor,
                             max_samples=max_samples)
            names = self.dataframe.column_names
            self.curriculum_index = list(self.dataframe["curriculum_index"]) if "curriculum_index" in names else None
            if self.is_train:
                self._check(config)

        def _check(self, config) -> None:
            where = f"data.train_files ({len(self.data_files)} file{'s' if len(self.data_files) != 1 else ''})"
            if self.curriculum_index is None:
                raise ConfigError(f"{where}: no curriculum_index column, so not a curriculum's shards",
                                  hint="pass the shard files of `curriculum build` (python -m rag_curriculum.verl "
                                       "train-files DIR prints them in order)")
            issue = check_index_order(self.curriculum_index)
            if issue is not None and issue.severity == "error":
                raise CurriculumOrderError(f"{where}: {issue.message}",
                                           hint="list the shard files in manifest order (python -m "
                                                "rag_curriculum.verl train-files DIR prints them)")
            batch = int(config.get("train_batch_size"))
            steps, tail = verl_steps(len(self), batch, where=where)
            levels = list(self.dataframe["level"]) if "level" in self.dataframe.column_names else []
            message = (f"curriculum: {len(self)} rows in {where}, {steps} step{'s' if steps != 1 else ''} an epoch "
                       f"of data.train_batch_size={batch}")
            if tail:
                log.warning("%s; verl's drop_last leaves the last %d rows untrained in every epoch (curriculum_index "
                            "%s..%s, %s)", message, tail, self.curriculum_index[-tail], self.curriculum_index[-1],
                            _levels(levels[-tail:]))
            else:
                log.info("%s; every row is reached", message)

        def maybe_filter_out_long_prompts(self, dataframe=None):
            out = super().maybe_filter_out_long_prompts(dataframe)
            if dataframe is not None and len(out) < len(dataframe) and "curriculum_index" in dataframe.column_names:
                kept = set(out["curriculum_index"])
                rows = [(i, lv) for i, lv in zip(dataframe["curriculum_index"], dataframe["level"], strict=True)
                        if i not in kept]
                self.filtered_rows = [i for i, _ in rows]
                log.warning("filter_overlong_prompts dropped %d of %d rows over max_prompt_length=%s (%s; from "
                            "curriculum_index %s): set it False, the length: `rag_curriculum.verl lengths`",
                            len(rows), len(dataframe), self.max_prompt_length, _levels(lv for _, lv in rows),
                            ", ".join(str(i) for i, _ in rows[:5]))
            return out

    return CurriculumRLHFDataset


# --- the replay buffer ---------------------------------------------------------------------------------------------
def filter_settings(config: Any) -> dict[str, Any]:
    """What verl's ``PPOTrainer._build_replay_buffer`` gives its own sync ``ReplayBuffer`` (and not a custom one):
    the DAPO metric (``algorithm.filter_groups``), the batch sizes, the in-flight bound and the failed-group refill."""
    fg = config.algorithm.get("filter_groups", None)
    metric = None
    if fg is not None and fg.get("enable", False):
        metric = fg.get("metric", None)
        if not metric:
            raise ConfigError("algorithm.filter_groups.metric must be set when group filtering is enabled")
        rm = config.reward.reward_model
        if rm.enable and not rm.enable_resource_pool:
            raise ConfigError("algorithm.filter_groups needs the reward at sampling time: a colocated reward model "
                              "scores only after sampling",
                              hint="use a rule-based reward, or reward.reward_model.enable_resource_pool=True")
        metric = str(metric)
    refill_failed = bool(config.trainer.v1.sampler.get("sync_refill_failed_groups", False))
    batch = int(config.data.train_batch_size)
    gen = 1 if metric is not None or refill_failed else int(config.data.get("gen_batch_size", None) or batch)
    return {"filter_groups_metric": metric, "sync_refill_failed_groups": refill_failed, "train_batch_size": batch,
            "gen_batch_size": gen,
            "max_inflight_gen_batches": int(fg.get("max_inflight_gen_batches", 1)) if metric is not None else 1}


def planned_run(config: Any) -> VerlRun | None:
    """The steps verl's trainer will run (:func:`~rag_curriculum.verl.data.verl_run`), from its config and the row
    counts of ``data.train_files`` (read from the Parquet footers), said before the run: the epochs that restart
    the curriculum at its easiest rows, the rows a step limit never reaches. A run of 0 steps
    (``trainer.total_epochs`` or ``trainer.total_training_steps`` below 1) is refused. A curriculum with fewer rows
    than one batch is left to the dataset, which refuses it naming its files; files that cannot be read here
    (not local) are counted by the dataset only, and the settings alone are checked."""
    import pyarrow.parquet as pq

    settings = run_settings(config)
    batch = int(config.data.train_batch_size)
    try:
        rows = sum(pq.read_metadata(f).num_rows for f in _files(config.data.get("train_files")))
    except (OSError, ValueError):
        rows = None
    if settings["max_samples"] is not None and rows is not None and 0 < settings["max_samples"] < rows:
        rows = settings["max_samples"]
    if rows is None or rows < batch:
        verl_run(batch, batch, **{**settings, "max_samples": None})  # the settings' own 0 steps, refused
        return None
    run = verl_run(rows, batch, **settings, where="data.train_files")
    for note in run.notes():
        log.warning("curriculum: %s", note)
    return run


def _make_buffer_class() -> type:
    from verl.trainer.ppo.v1 import replay_buffer as rb

    class CurriculumReplayBuffer(rb.ReplayBuffer):
        """verl's sync ``ReplayBuffer`` that checks, records and logs each step's rows and feeds an adaptive
        curriculum (see the module doc)."""

        def __init__(self, trainer_mode, trainer_config, max_off_policy_threshold, max_off_policy_strategy,
                     sampler_kwargs, poll_interval: float = 2.0, refill_fn=None):
            trainer = getattr(refill_fn, "__self__", None)
            config = getattr(trainer, "config", None)
            if config is None:
                raise ConfigError("CurriculumReplayBuffer is made by verl's v1 trainer, which hands it the trainer's "
                                  "refill function: this one got none",
                                  hint="load it through trainer.v1.sampler.custom_sampler.{path,name}")
            if trainer_mode != "sync":
                raise ConfigError(f"trainer.v1.trainer_mode={trainer_mode}: the curriculum's replay buffer runs "
                                  "under verl's sync trainer (its default) only; the asynchronous trainers train "
                                  "rows steps after they were fetched",
                                  hint="set trainer.v1.trainer_mode=sync")
            settings = dict(plain(sampler_kwargs) or {})
            unknown = set(settings) - {"order_policy", "steps_file"}
            if unknown:
                raise ConfigError(f"trainer.v1.sampler.sampler_kwargs: unknown key(s) {sorted(unknown)}; known: "
                                  "order_policy, steps_file")
            self.order_policy = settings.get("order_policy", "refuse")
            if self.order_policy not in ORDER_POLICIES:
                raise ConfigError(f"trainer.v1.sampler.sampler_kwargs.order_policy={self.order_policy!r}: "
                                  f"{' or '.join(ORDER_POLICIES)}")
            super().__init__(trainer_mode=trainer_mode, trainer_config=trainer_config,
                             max_off_policy_threshold=max_off_policy_threshold,
                             max_off_policy_strategy=max_off_policy_strategy, sampler_kwargs=sampler_kwargs,
                             poll_interval=poll_interval, refill_fn=refill_fn, **filter_settings(config))
            self.trainer = trainer
            self.run = planned_run(config)
            steps_file = settings.get("steps_file", Path(str(config.trainer.default_local_dir)) / STEPS_FILE)
            self.steps_file = Path(steps_file) if steps_file else None
            self.records: list[dict[str, Any]] = []
            self._dropped: dict[str, dict[str, Any]] = {}  # groups verl cleared since the last sample
            self._unknown = 0  # cleared groups without a trajectory (failed rollouts): their rows are unknown
            self._order: tuple[list[Any], dict[Any, int], int] | None = None  # index, positions, usable rows
            self._start: int | None = None  # position of the next row the trainer fetches

        # -- reading verl's trajectories --------------------------------------------------------------------------
        def _groups(self, keys: Sequence[str], partition_id: str) -> dict[str, dict[str, Any]]:
            """The GRPO groups (by ``uid``) of these trajectory keys: the row's fields and each session's reward
            (the summed ``rm_scores``) and exact match (the reward's ``acc``, when it gives one)."""
            keys = list(keys)
            if not keys:
                return {}
            fields = [*ROW_FIELDS, "extra_info", "rm_scores", "extra_fields"]
            data = rb.tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=fields)
            columns = {f: list(data[f]) for f in fields}
            groups: dict[str, dict[str, Any]] = {}
            for i, key in enumerate(keys):
                uid, session = key.split("_")[:2]
                group = groups.setdefault(uid, {"uid": uid, **{f: _py(columns[f][i]) for f in ROW_FIELDS},
                                                "extra_info": _py(columns["extra_info"][i]), "sessions": {}})
                extra = _py(columns["extra_fields"][i])
                info = extra.get("reward_extra_info", {}) if isinstance(extra, Mapping) else {}
                acc = info.get("acc")
                group["sessions"][session] = (float(getattr(columns["rm_scores"][i], "data",
                                                            columns["rm_scores"][i]).sum()),
                                              None if acc is None else float(acc))
            return groups

        def _clear_groups(self, partition_id: str, uids: set[str]) -> None:
            # verl deletes the groups DAPO dropped (and the surplus, and failed groups) here: read them first
            if partition_id == "train" and uids:
                keys = [k for k in self.partitions[partition_id] if k.split("_")[0] in uids]
                found = self._groups(keys, partition_id)
                self._dropped.update(found)
                self._unknown += len(set(uids) - set(found))
            super()._clear_groups(partition_id, uids)

        # -- each step ---------------------------------------------------------------------------------------------
        def sample(self, global_steps: int, partition_id: str, batch_size: int):
            batch, metrics = super().sample(global_steps=global_steps, partition_id=partition_id,
                                            batch_size=batch_size)
            if partition_id != "train":
                return batch, metrics
            trained = list(self._groups(batch.keys, partition_id).values())
            dropped = [g for uid, g in self._dropped.items() if uid not in {t["uid"] for t in trained}]
            unknown, self._dropped, self._unknown = self._unknown, {}, 0
            metrics.update(self._step(global_steps, trained, dropped, unknown))
            return batch, metrics

        def _plan(self, step: int) -> tuple[list[Any], dict[Any, int], int]:
            if self._order is None:
                dataset = getattr(self.trainer, "train_dataset", None)
                index = getattr(dataset, "curriculum_index", None)
                if index is None and dataset is not None and "curriculum_index" in dataset.dataframe.column_names:
                    index = list(dataset.dataframe["curriculum_index"])
                index = list(index or [])
                usable = len(index) - len(index) % self.gen_batch_size
                self._order = (index, {v: i for i, v in enumerate(index)}, usable)
                self._start = self._resume_position(step)
            return self._order

        def _resume_position(self, step: int) -> int:
            """Where the trainer's next fetch starts: row 0, or after the last step recorded before ``step``."""
            if step <= 1 or self.steps_file is None or not self.steps_file.is_file():
                return 0
            before = [r for r in read_steps(self.steps_file) if r["step"] < step]
            return int(before[-1].get("next_position", 0)) if before else 0

        def _step(self, step: int, trained: list[dict], dropped: list[dict], unknown: int) -> dict[str, float]:
            index, positions, usable = self._plan(step)
            start = self._start or 0
            fetched = len(trained) + len(dropped) + unknown

            def rel(g: Mapping[str, Any]) -> int | None:
                p = positions.get(g.get("curriculum_index"))
                return None if p is None or p >= usable else (p - start) % usable

            trained.sort(key=lambda g: (rel(g) is None, rel(g) or 0))
            seen = [rel(g) for g in trained + dropped]
            in_order = bool(usable) and None not in seen and len(set(seen)) == len(seen) and \
                max(seen, default=-1) < fetched
            self._start = (start + fetched) % usable if usable else 0
            rows = [{f: g.get(f) for f in ROW_FIELDS} for g in trained]
            record: dict[str, Any] = {
                "step": step, "curriculum_index": [r["curriculum_index"] for r in rows],
                "dropped": sorted((g.get("curriculum_index") for g in dropped), key=_order_key) + [None] * unknown,
                "in_order": in_order, "first_position": start, "next_position": self._start,
                "levels": dict(sorted(Counter(str(r["level"]) for r in rows).items()))}
            metrics = {"curriculum/rows": float(len(rows)), "curriculum/dropped_rows": float(len(dropped) + unknown),
                       "curriculum/in_order": float(in_order)}
            for col in ("level", "hops"):
                values = [r[col] for r in rows if r.get(col) is not None]
                if values:
                    metrics.update({f"curriculum/{col}_mean": sum(values) / len(values),
                                    f"curriculum/{col}_min": float(min(values)),
                                    f"curriculum/{col}_max": float(max(values))})
            if rows:
                metrics["curriculum/index_first"] = float(rows[0]["curriculum_index"])
                metrics["curriculum/index_last"] = float(rows[-1]["curriculum_index"])
            record.update({k.split("/", 1)[1]: v for k, v in metrics.items() if k.endswith(("_mean", "_min", "_max"))})
            feed = getattr(getattr(self.trainer, "train_dataset", None), "feed_groups", None)
            if feed is not None:  # an adaptive curriculum: every scored group of the step moves the level
                update = feed(trained + dropped)
                record["adaptive"] = update
                metrics.update({f"curriculum/{k}": float(update[k]) for k in ("level_target", "success",
                                                                               "next_target")})
            self.records.append(record)
            if self.steps_file is not None:
                self.steps_file.parent.mkdir(parents=True, exist_ok=True)
                with open(self.steps_file, "a", encoding="utf-8") as f:
                    f.write(json.dumps(record, sort_keys=True, default=str) + "\n")
            if not in_order:
                want = [index[(start + k) % usable] for k in range(min(fetched, usable))] if usable else []
                got = sorted((g.get("curriculum_index") for g in trained + dropped), key=_order_key)
                problem = (f"step {step} fetched curriculum_index {_short(got)} (trained and dropped) where the "
                           f"curriculum has {_short(want)}: the rows are not in curriculum order")
                if self.order_policy == "refuse":
                    raise CurriculumOrderError(problem, hint="set data.shuffle=False and list the shard files in "
                                               "manifest order; +trainer.v1.sampler.sampler_kwargs.order_policy=warn "
                                               "goes on with a warning")
                log.warning("CURRICULUM ORDER LOST: %s", problem)
            return metrics

    return CurriculumReplayBuffer


def _order_key(value: Any) -> tuple[bool, Any]:
    return value is None, value if value is not None else 0


def _short(values: Sequence[Any], n: int = 8) -> str:
    return str(list(values)) if len(values) <= n else f"[{', '.join(map(str, values[:n]))}, ...]"


_CLASSES: dict[str, type] = {}
_MAKERS = dict(zip(_LAZY, (_make_dataset_class, _make_buffer_class), strict=True))


def __getattr__(name: str) -> Any:
    if name in _MAKERS:
        if name not in _CLASSES:
            _CLASSES[name] = _MAKERS[name]()
        return _CLASSES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
