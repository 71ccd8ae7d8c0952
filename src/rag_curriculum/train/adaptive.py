"""Adaptive curricula on TRL: the level of each generation batch follows the model (docs/adaptive.md).

:class:`AdaptiveHook` sits in the toolkit's ``GRPOTrainer`` subclass (``train/_trainer.py``, ``trainer.adaptive``):

1. before a training generation batch is generated, each row (TRL's sampler gives every prompt
   ``num_generations`` times, in curriculum order) is rendered at the level the controller picks for it, by the
   builder's renderer (:class:`~rag_curriculum.curricula.adaptive.LevelRenderer`): prompt, passages, labels and
   reward columns, exactly as a fixed build of that level. TRL's grouping, its accumulation and the rows' order
   are untouched, only their content changes;
2. once TRL has scored the completions (all processes gathered), each group's success (exact match, or the
   weighted total reward) goes to the controller (:func:`feed_back`), which moves the level for the next batch;
3. ``curriculum/level_target``, ``curriculum/level_mean`` and ``curriculum/success`` are logged per step, one
   line per batch goes to ``curriculum_levels.jsonl``, the controller's state into every checkpoint
   (``curriculum_controller.json``; restored on resume, so a resumed run draws the same levels), and after the run
   ``curriculum_levels.png`` plots level and success against step.

torch, transformers and TRL are imported inside the functions only.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._plots import plot_adaptive_levels
from .._plumbing import read_jsonl_latest, read_state, write_state
from ..curricula.adaptive import LevelRenderer
from ..errors import ConfigError
from ..rewards import completion_text, get_parser, row_gold, score_completion
from ._informative import resolve_profile
from ._rewards import total_rewards
from .controllers import Controller, GroupResult, make_controller, resolve_controller

log = logging.getLogger(__name__)

STATE_FILE = "curriculum_controller.json"
LEVELS_FILE = "curriculum_levels.jsonl"
PLOT_FILE = "curriculum_levels.png"


class AdaptiveHook:
    """Renders the rows of each batch at the controller's levels and feeds the scored batch back to it."""

    def __init__(self, controller: Controller, renderer: Any, *, success: str = "exact_match",
                 num_generations: int, levels_file: Path | None = None) -> None:
        self.controller = controller
        self.renderer = renderer
        self.success = success
        self.num_generations = num_generations
        self.levels_file = levels_file
        self.pending: list[tuple[str, int, int]] | None = None  # (id, level, K) of this process's rows
        self.target_shown = controller.target()
        self.records: list[dict[str, Any]] = []
        self._parsers: dict[str, Any] = {}

    # --- before generation ---------------------------------------------------------------------------------
    def render(self, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The rows of a generation batch (this process's share), each at the level its question is given."""
        keys = [(str(r["id"]), self.renderer.K_of(r)) for r in rows]
        levels = self.controller.levels(keys)
        self.target_shown = self.controller.target()
        self.pending = [(k, lv, K) for (k, K), lv in zip(keys, levels, strict=True)]
        return self.renderer.render(rows, levels)

    # --- after scoring ---------------------------------------------------------------------------------------
    def scores(self, rows: Sequence[Mapping[str, Any]], completions: Sequence[Any], totals: Sequence[float]
               ) -> list[float]:
        """This process's per-completion success: exact match by the one scorer, or the total reward."""
        if self.success == "reward":
            return [float(t) for t in totals]
        out = []
        for row, completion in zip(rows, completions, strict=True):
            template = row.get("template") or "rag-rl"
            parse = self._parsers.get(template) or self._parsers.setdefault(template, get_parser(template))
            out.append(score_completion(completion_text(completion), row_gold(row),
                                        parse=parse).exact_match)
        return out

    def update(self, entries: Sequence[tuple[str, int, int]], scores: Sequence[float], *, step: int) -> dict[str, float]:
        """Feed a scored batch (all processes, sampler order: each prompt's completions consecutive) to the
        controller; returns the metrics to log."""
        g = self.num_generations
        if len(entries) != len(scores) or len(entries) % g:
            raise ConfigError(f"a scored batch of {len(scores)} completions for {len(entries)} rows does not split "
                              f"into groups of num_generations={g}")
        results = []
        for i in range(0, len(entries), g):
            group = entries[i:i + g]
            key, level, K = group[0]
            if any(e[0] != key for e in group):
                raise ConfigError(f"completions {i}..{i + g - 1} are not one prompt's group ({[e[0] for e in group]}):"
                                  " TRL's sampler no longer repeats each prompt num_generations times in a row")
            results.append(GroupResult(key, level, K, tuple(float(s) for s in scores[i:i + g])))
        target = self.target_shown
        success = self.controller.update(results)
        level_mean = sum(r.level for r in results) / len(results)
        record = {"step": step, "batch": self.controller.batch, "level_target": target, "level_mean": level_mean,
                  "success": success, "next_target": self.controller.target(),
                  "levels": dict(sorted(_count(r.level for r in results).items()))}
        self.records.append(record)
        if self.levels_file is not None:
            with open(self.levels_file, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")
        return {"curriculum/level_target": target, "curriculum/level_mean": level_mean,
                "curriculum/success": success}

    # --- checkpoints -----------------------------------------------------------------------------------------
    def save(self, checkpoint: Path) -> None:
        write_state(checkpoint / STATE_FILE, self.controller.state_dict())

    def load(self, checkpoint: Path) -> bool:
        state = read_state(checkpoint / STATE_FILE)
        if state is None:
            log.warning("%s has no %s: the curriculum controller starts afresh (the levels of the run being "
                        "resumed are not continued)", checkpoint, STATE_FILE)
            return False
        self.controller.load_state_dict(state)
        self.target_shown = self.controller.target()
        return True


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[str(v)] = out.get(str(v), 0) + 1
    return out


def make_hook(cfg: Any, manifest: Mapping[str, Any], *, num_generations: int, seed: int,
              levels_file: Path | None) -> AdaptiveHook:
    """The hook of a run whose ``adaptive.controller`` is set, on adaptive shards (refused otherwise)."""
    renderer = LevelRenderer(manifest, where=f"data.shards={cfg.data.shards}")
    a = cfg.adaptive
    cls = resolve_controller(a.controller)
    settings = dict(a.kwargs or {})
    extra: dict[str, Any] = {}
    if getattr(cls, "needs_profile", False):  # the profile the informative check follows, resolved alike
        for given in ("profile", "group_size"):  # the run's own
            if given in settings:
                raise ConfigError(f"adaptive.kwargs.{given}: not a setting of the {a.controller!r} controller",
                                  hint="the profile is data.profile=DIR (or the shards' own); the group size is "
                                       "grpo.num_generations")
        profile, _ = resolve_profile(getattr(cfg.data, "profile", None), cfg.data.shards, manifest)
        if profile is None:
            raise ConfigError(f"adaptive.controller={a.controller}: needs a level profile, and data.shards="
                              f"{cfg.data.shards} were built without one", hint="give data.profile=DIR (curriculum "
                              "train --profile DIR), or build the shards with --profile")
        extra = {"profile": profile, "group_size": num_generations}
    success = a.success
    if getattr(cls, "feed", None) == "reward":
        if getattr(a, "from_pass_rates", False):
            raise ConfigError(f"adaptive.from_pass_rates with adaptive.controller={a.controller}: it reads the "
                              "training reward, not pass rates", hint="drop adaptive.from_pass_rates (the level "
                              "profile already starts it where the model is)")
        success = "reward"
    controller = make_controller(a.controller, K=renderer.max_K, seed=seed if a.seed is None else a.seed,
                                 **extra, **settings)
    return AdaptiveHook(controller, renderer, success=success, num_generations=num_generations,
                        levels_file=levels_file)


def read_levels(path: str | Path) -> list[dict[str, Any]]:
    """The records of ``curriculum_levels.jsonl``; for a batch written twice (a resumed run), the last one."""
    return read_jsonl_latest(path, "batch")


#: Level (target and mean shown) and success against step, as a PNG: drawn by the toolkit's plotting module.
plot_levels = plot_adaptive_levels


def feed_back(trainer: Any, hook: Any, rewards_per_func: Any, inputs: Sequence[Mapping[str, Any]],
              prompts: Sequence[Any], completions: Sequence[Any]) -> dict[str, float]:
    """Once TRL has scored a training generation batch (``rewards_per_func``: every process's completions, process
    order), this process's success per completion goes to ``hook`` (an :class:`AdaptiveHook` or a search agent's
    :class:`~rag_curriculum.train._agent_adaptive.SearchCurriculumHook`), gathered with the rows' keys from every
    process, and the controller moves; returns the metrics to log (none when the batch was not rendered by it)."""
    if hook.pending is None:
        return {}
    import torch

    n = len(prompts)
    start = trainer.accelerator.process_index * n
    totals = total_rewards(rewards_per_func, trainer.reward_weights)  # NaN: unscored by every function, skipped
    local = hook.scores(inputs, completions, totals[start:start + n].tolist())
    entries = hook.pending
    hook.pending = None
    if trainer.accelerator.num_processes > 1:
        from accelerate.utils import gather, gather_object

        entries = gather_object(list(entries))
        scores = gather(torch.tensor(local, dtype=torch.float32, device=rewards_per_func.device)).tolist()
    else:
        scores = local
    return hook.update(entries, scores, step=trainer.state.global_step + 1)
