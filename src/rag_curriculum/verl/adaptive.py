"""Adaptive curricula on verl 0.9: a dataset class verl loads by path, which renders each row at the level the
controller picks and reads the scored groups back after each step (docs/adaptive.md).

verl 0.9.1 has no curriculum sampler any more (verl#6302); what it keeps is ``data.custom_cls`` (a dataset class
loaded by path) and a way to see each step's scored groups:

* **verl's default trainer** (v1, ``trainer.use_v1=true``): the toolkit's replay buffer
  (:class:`~rag_curriculum.verl.curriculum.CurriculumReplayBuffer`, ``trainer.v1.sampler.custom_sampler``) hands
  every scored group of a step (those DAPO drops included) to :meth:`feed_groups` before the next step's rows are
  fetched::

    python -m verl.trainer.main_ppo ... data.shuffle=false data.dataloader_num_workers=0 \\
        data.custom_cls.path=pkg://rag_curriculum.verl.adaptive data.custom_cls.name=AdaptiveRLHFDataset \\
        trainer.v1.sampler.custom_sampler.path=pkg://rag_curriculum.verl.curriculum \\
        trainer.v1.sampler.custom_sampler.name=CurriculumReplayBuffer \\
        +data.adaptive.controller=target-band +data.adaptive.success=exact_match +data.adaptive.kwargs.target=0.5

* **verl's legacy trainer** (``trainer.use_v1=false``, deprecated): its ``RayPPOTrainer.fit`` calls
  ``train_dataset.on_batch_end(batch=...)`` after each step (marked experimental in verl's source).

Either way:

* the class is the toolkit's :class:`~rag_curriculum.verl.curriculum.CurriculumRLHFDataset` (``data.shuffle=True``
  and rows out of order refused, the steps said before the run) whose rows are rendered at the controller's level;
* the controller lives in the driver's dataset: ``data.dataloader_num_workers=0`` is required (worker processes
  would hold copies that the feedback never reaches), and refused otherwise;
* success is the exact match verl's reward extra info carries as ``acc`` (the toolkit's ``compute_score`` returns
  it), or the sequence score (the summed reward) with ``success=reward``;
* state: the dataset is ``Stateful`` (``state_dict`` / ``load_state_dict``), so verl's checkpoint of the
  ``StatefulDataLoader`` (``data.pt``) holds the controller. The v1 trainer saves it after the step's update, so a
  resumed run continues exactly. The legacy trainer writes that checkpoint *before* it calls ``on_batch_end`` for the
  same step: with ``state_dir`` set, the dataset also writes its state after every update
  (``curriculum_controller-<batch>.json``) and a restored run loads the one that follows the checkpoint; without it a
  resumed legacy run repeats the last step's level decision (one update is lost; a warning says so);
* nothing feeding the controller (the v1 trainer without the toolkit's replay buffer) leaves every row at the
  starting level: after ten batches' rows without an update the dataset says so once.

verl is imported only when the class is first used (this module imports without it).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._plumbing import atomic_write_bytes
from ..curricula.adaptive import LevelRenderer
from ..errors import ConfigError
from ..shards import read_manifest
from ..train.controllers import GroupResult, make_controller
from . import curriculum
from .curriculum import plain

log = logging.getLogger(__name__)

STATE_PATTERN = "curriculum_controller-{batch:06d}.json"
#: Batches' worth of rows rendered without feedback after which the dataset says nothing moves its level.
UNFED_BATCHES = 10


def shards_dir(data_files: Any) -> Path:
    """The shard directory (the one holding ``manifest.json``) of verl's ``data.train_files``."""
    files = [data_files] if isinstance(data_files, str | Path) else list(data_files)
    if not files:
        raise ConfigError("data.train_files is empty")
    for candidate in (Path(files[0]), *Path(files[0]).parents[:2]):
        if (candidate / "manifest.json").is_file():
            return candidate
    raise ConfigError(f"data.train_files[0] = {files[0]}: no manifest.json beside it or two folders up",
                      hint="pass the shard files of a `curriculum build --schedule adaptive` directory")


def _adaptive_settings(config: Any, max_K: int) -> tuple[str, Any, Path | None]:
    """``data.adaptive`` of a verl config: what success is (``exact_match`` or ``reward``), the controller (named,
    with its ``kwargs``, seeded by ``seed`` or ``data.seed``) and where its state is written after each update."""
    settings = dict(plain(config.get("adaptive")) or {})
    unknown = set(settings) - {"controller", "success", "kwargs", "seed", "state_dir"}
    if unknown:
        raise ConfigError(f"data.adaptive: unknown key(s) {sorted(unknown)}; known: controller, success, "
                          "kwargs, seed, state_dir")
    success = settings.get("success", "exact_match")
    if success not in ("exact_match", "reward"):
        raise ConfigError(f"data.adaptive.success={success!r}: exact_match or reward")
    seed = settings.get("seed")
    controller = make_controller(
        settings.get("controller") or "target-band", K=max_K,
        seed=int((config.get("seed") or 0) if seed is None else seed), **dict(settings.get("kwargs") or {}))
    return success, controller, Path(settings["state_dir"]) if settings.get("state_dir") else None


def _group_results(nt: Mapping[str, Any], scores: list[float], K: Mapping[str, int]) -> list[GroupResult]:
    """A scored batch's GRPO groups (one per ``uid``: the row, its level, its source's K and its scores)."""
    groups: dict[str, list[Any]] = {}
    for i, uid in enumerate(nt["uid"]):
        info = nt["extra_info"][i]
        key = str(nt["id"][i]) if "id" in nt else f"{info['source']}-{info['id']}"
        entry = groups.setdefault(str(uid), [key, int(info["level"]), K[info["source"]], []])
        entry[3].append(scores[i])
    return [GroupResult(k, lv, max_k, tuple(s)) for k, lv, max_k, s in groups.values()]


def _fed_results(groups: list[Mapping[str, Any]], success: str, K: Mapping[str, int]) -> list[GroupResult]:
    """The groups the toolkit's replay buffer reads from verl's trajectories (``id``, ``extra_info`` and each
    session's ``(reward, acc)``) as GRPO groups."""
    out = []
    for g in groups:
        info = g["extra_info"]
        key = str(g["id"]) if g.get("id") is not None else f"{info['source']}-{info['id']}"
        sessions = list(g["sessions"].values())
        if success == "exact_match":
            if any(acc is None for _, acc in sessions):
                raise ConfigError("the scored trajectories carry no 'acc' (exact match) from the reward",
                                  hint="use the toolkit's compute_score (rag_curriculum/verl/rewards.py) as the "
                                       "reward, or data.adaptive.success=reward")
            scores = tuple(acc for _, acc in sessions)
        else:
            scores = tuple(reward for reward, _ in sessions)
        out.append(GroupResult(key, int(info["level"]), K[info["source"]], scores))
    return out


def _make_class() -> type:
    class AdaptiveRLHFDataset(curriculum.CurriculumRLHFDataset):  # (verl is imported here, on first use)
        """verl's ``RLHFDataset`` over adaptive shards: each row at its controller level (see the module doc)."""

        def __init__(self, data_files, tokenizer, config, processor=None, max_samples: int = -1):
            workers = config.get("dataloader_num_workers", 0)
            if workers:
                raise ConfigError(
                    f"data.dataloader_num_workers={workers}: the adaptive curriculum's controller lives in the "
                    "dataset of the driver process, which worker processes only copy",
                    hint="set data.dataloader_num_workers=0")
            super().__init__(data_files=data_files, tokenizer=tokenizer, config=config, processor=processor,
                             max_samples=max_samples)
            directory = shards_dir(data_files)
            self.renderer = LevelRenderer(read_manifest(directory), where=str(directory))
            self.success, self.controller, self.state_dir = _adaptive_settings(config, self.renderer.max_K)
            self.records: list[dict[str, Any]] = []
            self.after_update = False  # fed by the v1 trainer's buffer: verl checkpoints after the update
            self._unfed, self._said_unfed = 0, False
            self._unfed_limit = UNFED_BATCHES * int(config.get("train_batch_size") or 1)

        def __getitem__(self, item):
            self._unfed += 1
            if self.is_train and self._unfed > self._unfed_limit and not self._said_unfed:
                self._said_unfed = True
                log.warning("adaptive curriculum: %d rows rendered, no scores fed back, every row at level %s: set "
                            "trainer.v1.sampler.custom_sampler (docs/adaptive.md)", self._unfed,
                            self.controller.target())
            row = self.dataframe[item]
            level = self.controller.levels([(str(row["id"]), self.renderer.K_of(row))])[0]
            rendered = self.renderer.render([row], [level])[0]
            out = super().__getitem__(item)
            out.update({k: v for k, v in rendered.items() if k in out})
            out["raw_prompt"] = self._build_messages(dict(rendered), key=self.prompt_key)
            return out

        def on_batch_end(self, batch) -> None:
            """verl's legacy trainer calls this after each training step with the scored batch: one group per
            ``uid``."""
            nt = batch.non_tensor_batch
            if self.success == "exact_match":
                if "acc" not in nt:
                    raise ConfigError("the scored batch has no 'acc' (exact match) from the reward",
                                      hint="use the toolkit's compute_score (rag_curriculum/verl/rewards.py) as the reward, or "
                                           "data.adaptive.success=reward")
                scores = [float(x) for x in nt["acc"]]
            else:
                scores = batch.batch["token_level_scores"].sum(-1).tolist()
            self._update(_group_results(nt, scores, self.renderer.K))

        def feed_groups(self, groups: list[Mapping[str, Any]]) -> dict[str, Any]:
            """The toolkit's replay buffer (verl's v1 trainer) calls this once a step with every scored group of
            the step; the update, as recorded."""
            self.after_update = True
            return self._update(_fed_results(groups, self.success, self.renderer.K))

        def _update(self, results: list[GroupResult]) -> dict[str, Any]:
            self._unfed = 0
            target = self.controller.target()
            success = self.controller.update(results)
            record = {"batch": self.controller.batch, "level_target": target, "success": success,
                      "level_mean": sum(r.level for r in results) / len(results) if results else float("nan"),
                      "next_target": self.controller.target()}
            self.records.append(record)
            if self.state_dir is not None:
                self.state_dir.mkdir(parents=True, exist_ok=True)
                path = self.state_dir / STATE_PATTERN.format(batch=self.controller.batch)
                atomic_write_bytes(path, json.dumps(self.controller.state_dict(), sort_keys=True).encode())
            return record

        # torchdata's Stateful protocol: verl's StatefulDataLoader checkpoint (data.pt) carries it
        def state_dict(self) -> dict[str, Any]:
            return {"controller": self.controller.state_dict(), "after_update": self.after_update}

        def load_state_dict(self, state: Mapping[str, Any]) -> None:
            saved = dict(state["controller"])
            if state.get("after_update"):  # the v1 trainer checkpointed after the step's update: exact as it is
                self.after_update = True
                self.controller.load_state_dict(saved)
                return
            following = None
            if self.state_dir is not None:
                following = self.state_dir / STATE_PATTERN.format(batch=int(saved["batch"]) + 1)
            if following is not None and following.is_file():
                saved = json.loads(following.read_text(encoding="utf-8"))
            else:
                log.warning("adaptive curriculum: resuming from the controller state verl checkpointed before the "
                            "step's own update (set data.adaptive.state_dir to continue exactly)")
            self.controller.load_state_dict(saved)

    return AdaptiveRLHFDataset


_CLASS: type | None = None


def __getattr__(name: str) -> Any:
    global _CLASS
    if name == "AdaptiveRLHFDataset":
        if _CLASS is None:
            _CLASS = _make_class()
        return _CLASS
    raise AttributeError(name)
