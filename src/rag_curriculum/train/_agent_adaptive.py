"""A search agent's difficulty moved during training: an adaptive controller (``target-band``, ``mastery``) drives
the level of each row's searches, or the probability ``p`` that their gold passages are withheld; or ZeroSearch's
schedule moves ``p`` over the run's steps (docs/search-agents.md, "Difficulty a searching model feels").

:class:`SearchCurriculumHook` has the interface of :class:`~rag_curriculum.train.adaptive.AdaptiveHook` and sits in
the same trainer (``train/_trainer.py``, ``trainer.adaptive``), so TRL's grouping, the gathering across
processes, the checkpoints and the resume are the closed-context curriculum's:

1. before a training generation batch is generated, each row gets the controller's level for it (per question for
   ``mastery``, the batch's target for ``target-band``): with ``agent.difficulty=hard-negatives`` the row's
   ``level`` column is set to it, so the search environment puts RAG-RL's ``d = min(max(l + 2 - j, 0), k)`` of the
   row's distractors above its gold (the row's level 1..K of its source, K from the shards' manifest); with
   ``withhold`` the row's ``search_p`` column is set to :func:`level_to_p` of it (``p_start`` at level 1, ``p_end``
   at the top level ``agent.p_levels``, linear between). With ``agent.p_schedule=zerosearch`` and no controller
   every row gets ZeroSearch's ``p(t)`` (:func:`~rag_curriculum.agents._difficulty.noise_probability`), ``t`` the
   optimiser steps done, ``T`` the run's. Both training routes read these columns: the tag protocol's rollout
   (:class:`~rag_curriculum.train.SearchRollout`) and TRL's tool loop, whose ``reset(**row)`` gets the row;
2. once TRL has scored the completions, each group's success (Search-R1's exact match of the answer the
   trajectory gave, :class:`~rag_curriculum.methods.search_r1.SearchEmReward`; or the weighted total reward) goes to the
   controller;
3. one line per batch goes to ``curriculum_levels.jsonl``: the closed-context keys (``level_target``,
   ``level_mean``, ``success``, ``levels``) plus ``mode`` and ``rows``, the level and ``p`` of every row (one entry
   per prompt, in batch order), and with ``withhold`` ``p_target`` / ``p_mean``; the controller's state goes into
   every checkpoint (a resumed run continues with it), and ``curriculum_levels.png`` plots level or p and success
   against step.

>>> level_to_p(1, 6, 0.0, 0.5), level_to_p(3, 6, 0.0, 0.5), level_to_p(6, 6, 0.0, 0.5)
(0.0, 0.2, 0.5)
>>> p_to_level(0.2, 6, 0.0, 0.5)
3.0
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._plumbing import read_state, write_state
from ..agents import P_COLUMN, noise_probability
from ..errors import ConfigError
from ..rewards import get_reward, row_gold
from .adaptive import PLOT_FILE, STATE_FILE, _count, plot_levels, read_levels
from .controllers import Controller, GroupResult, batch_success, make_controller

log = logging.getLogger(__name__)

__all__ = ["SearchCurriculumHook", "level_to_p", "make_search_hook", "p_to_level", "uses_search_curriculum"]


def level_to_p(level: float, levels: int, p_start: float, p_end: float) -> float:
    """The withholding probability of controller level ``level`` (1..``levels``): linear from ``p_start`` at
    level 1 to ``p_end`` at level ``levels`` (rounded to 12 places, so equal levels give equal bytes)."""
    if levels < 2:
        raise ConfigError(f"agent.p_levels={levels}; must be >= 2")
    x = min(max(float(level), 1.0), float(levels))
    return round(p_start + (x - 1.0) / (levels - 1) * (p_end - p_start), 12)


def p_to_level(p: float, levels: int, p_start: float, p_end: float) -> float:
    """The inverse of :func:`level_to_p` (the continuous level that shows ``p``; 1 when ``p_start == p_end``)."""
    if p_end == p_start:
        return 1.0
    return round(1.0 + (p - p_start) / (p_end - p_start) * (levels - 1), 12)


def uses_search_curriculum(cfg: Any) -> bool:
    """Whether a training config's search agent has a moving difficulty (a controller or a p schedule)."""
    return cfg.agent.retriever is not None and (cfg.adaptive.controller is not None
                                                or cfg.agent.p_schedule != "none")


class SearchCurriculumHook:
    """Moves the search difficulty of each generation batch's rows and feeds the scored batch back to the
    controller (see the module docstring). ``controller``: None for the schedule alone. ``K_of(row)``: the top
    level of the row (its source's K with ``hard-negatives``, ``p_levels`` with ``withhold``)."""

    def __init__(self, controller: Controller | None, *, mode: str, K_of: Any, success: str = "exact_match",
                 num_generations: int, levels_file: Path | None = None, schedule: str = "none",
                 p_start: float = 0.0, p_end: float = 0.5, p_levels: int = 6) -> None:
        if mode not in ("hard-negatives", "withhold"):
            raise ConfigError(f"a search curriculum moves hard-negatives levels or withhold's p, not mode {mode!r}")
        if controller is None and schedule != "zerosearch":
            raise ConfigError("a search curriculum without a controller needs agent.p_schedule=zerosearch")
        self.controller = controller
        self.mode = mode
        self.K_of = K_of
        self.success = success
        self.num_generations = num_generations
        self.levels_file = levels_file
        self.schedule = schedule
        self.p_start, self.p_end, self.p_levels = float(p_start), float(p_end), int(p_levels)
        self.pending: list[tuple[str, int | None, int, float | None]] | None = None
        self.target_shown: float | None = controller.target() if controller is not None else None
        self.p_shown: float | None = None
        self.batch = 0  # scored batches (the schedule's; a controller counts its own)
        self.records: list[dict[str, Any]] = []
        self.trainer: Any = None

    def bind(self, trainer: Any) -> None:
        """The trainer whose steps the schedule follows (``state.global_step`` of ``state.max_steps``)."""
        self.trainer = trainer

    # --- before generation ---------------------------------------------------------------------------------
    def scheduled_p(self) -> float:
        """ZeroSearch's p(t): ``t`` the optimiser steps done, ``T`` the run's (the trainer's ``state``)."""
        state = getattr(self.trainer, "state", None)
        if state is None:
            raise ConfigError("agent.p_schedule=zerosearch: the hook is bound to no trainer (SearchCurriculumHook.bind)")
        return round(noise_probability(int(state.global_step), int(state.max_steps), self.p_start, self.p_end), 12)

    def render(self, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The rows of a generation batch (this process's share), each with the level or p of its searches."""
        out = [dict(r) for r in rows]
        if self.controller is None:  # the schedule alone: one p for the batch
            p = self.scheduled_p()
            self.p_shown = p
            self.pending = [(str(r["id"]), None, self.p_levels, p) for r in out]
            for r in out:
                r[P_COLUMN] = p
            return out
        keys = [(str(r["id"]), int(self.K_of(r))) for r in out]
        levels = self.controller.levels(keys)
        self.target_shown = self.controller.target()
        pending = []
        for r, (key, K), level in zip(out, keys, levels, strict=True):
            if self.mode == "hard-negatives":
                r["level"] = int(level)
                pending.append((key, int(level), K, None))
            else:
                p = level_to_p(level, self.p_levels, self.p_start, self.p_end)
                r[P_COLUMN] = p
                pending.append((key, int(level), K, p))
        self.pending = pending
        return out

    # --- after scoring ---------------------------------------------------------------------------------------
    def scores(self, rows: Sequence[Mapping[str, Any]], completions: Sequence[Any], totals: Sequence[float]
               ) -> list[float]:
        """This process's per-completion success: Search-R1's exact match of the answer the trajectory gave (the
        ``trajectory`` column of the tag protocol, else the last ``<answer>`` of the completion), or the total."""
        if self.success == "reward":
            return [float(t) for t in totals]
        em = get_reward("search-em", log_components=False)  # the search agent's EM, registered by its method
        return [em.score(c, row_gold(r), r.get("trajectory")).exact_match
                for r, c in zip(rows, completions, strict=True)]

    def update(self, entries: Sequence[Sequence[Any]], scores: Sequence[float], *, step: int) -> dict[str, float]:
        """Feed a scored batch (all processes, sampler order) to the controller, record it; the metrics to log."""
        g = self.num_generations
        if len(entries) != len(scores) or len(entries) % g:
            raise ConfigError(f"a scored batch of {len(scores)} completions for {len(entries)} rows does not split "
                              f"into groups of num_generations={g}")
        groups, rows = [], []
        for i in range(0, len(entries), g):
            group = [tuple(e) for e in entries[i:i + g]]
            key, level, K, p = group[0]
            if any(e[0] != key for e in group):
                raise ConfigError(f"completions {i}..{i + g - 1} are not one prompt's group ({[e[0] for e in group]}):"
                                  " TRL's sampler no longer repeats each prompt num_generations times in a row")
            groups.append(GroupResult(key, level if level is not None else 1, K,
                                      tuple(float(s) for s in scores[i:i + g])))
            rows.append({"id": key, "level": level, "p": p})
        target = self.target_shown
        if self.controller is not None:
            success = self.controller.update(groups)
            batch, next_target = self.controller.batch, self.controller.target()
        else:
            success = batch_success(groups)
            batch, next_target = self.batch + 1, None
        self.batch = batch
        record: dict[str, Any] = {"step": step, "batch": batch, "mode": self.mode, "success": success, "rows": rows}
        metrics: dict[str, float] = {"curriculum/success": success}
        if self.controller is not None:
            level_mean = sum(r["level"] for r in rows) / len(rows)
            record.update(level_target=target, level_mean=level_mean, next_target=next_target,
                          levels=dict(sorted(_count(r["level"] for r in rows).items())))
            if self.mode == "hard-negatives":  # withhold logs p (the rows' own level column is not the controller's)
                metrics.update({"curriculum/level_target": target, "curriculum/level_mean": level_mean})
        if self.mode == "withhold":
            ps = [r["p"] for r in rows]
            p_target = (self.p_shown if self.controller is None
                        else level_to_p(target, self.p_levels, self.p_start, self.p_end))
            record.update(p_target=p_target, p_mean=sum(ps) / len(ps))
            metrics.update({"curriculum/p_target": p_target, "curriculum/p_mean": record["p_mean"]})
        self.records.append(record)
        if self.levels_file is not None:
            with open(self.levels_file, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")
        return metrics

    # --- checkpoints -----------------------------------------------------------------------------------------
    def save(self, checkpoint: Path) -> None:
        """The controller's state (the schedule's p is a function of the step: only its batch count)."""
        state = (self.controller.state_dict() if self.controller is not None
                 else {"name": f"p-schedule:{self.schedule}", "batch": self.batch})
        write_state(checkpoint / STATE_FILE, state)

    def load(self, checkpoint: Path) -> bool:
        path = checkpoint / STATE_FILE
        state = read_state(path)
        if state is None:
            log.warning("%s has no %s: the search curriculum's controller starts afresh (the levels of the run being "
                        "resumed are not continued)", checkpoint, STATE_FILE)
            return False
        if self.controller is None:
            if state.get("name") != f"p-schedule:{self.schedule}":
                raise ConfigError(f"{path} holds the state of {state.get('name')!r}, this run has "
                                  f"agent.p_schedule={self.schedule} and no controller",
                                  hint="resume with the settings of the run being resumed")
            self.batch = int(state["batch"])
            return True
        self.controller.load_state_dict(state)
        self.target_shown = self.controller.target()
        return True

    def plot(self, out_dir: Path, *, title: str = "") -> Path | None:
        """``curriculum_levels.png`` of the run: the level (hard-negatives) or p (withhold) and success per step."""
        if self.levels_file is None or not self.levels_file.exists():
            return None
        records = read_levels(self.levels_file)
        success_range = (0.0, 1.0) if self.success == "exact_match" else None
        if self.mode == "hard-negatives":
            return plot_levels(records, out_dir / PLOT_FILE, K=self.controller.K if self.controller else 1,
                               title=title, success_range=success_range)
        # withhold: p itself, on a p axis from p_start to p_end (the rows' level does not move)
        return plot_levels(records, out_dir / PLOT_FILE, K=self.p_levels, title=title or "search curriculum",
                           success_range=success_range, p_range=(min(self.p_start, self.p_end),
                                                                 max(self.p_start, self.p_end)))


def make_search_hook(cfg: Any, manifest: Mapping[str, Any], *, num_generations: int, seed: int,
                     levels_file: Path | None) -> SearchCurriculumHook:
    """The hook of a search agent's run with ``adaptive.controller`` or ``agent.p_schedule`` set. With
    ``hard-negatives`` the levels are the shards' (K per dataset, from the manifest): rows should hold their
    K-level distractors (``--schedule max`` or ``adaptive``), since a row's hard negatives are its distractors."""
    a, agent = cfg.adaptive, cfg.agent
    mode = agent.difficulty
    if mode == "hard-negatives":
        Ks = {str(k): int(v) for k, v in (manifest.get("K") or {}).items()}
        if not Ks:
            raise ConfigError(f"data.shards={cfg.data.shards}: the manifest records no K per dataset, the top level "
                              "the controller may move a row's searches to", hint="rebuild the shards")
        schedule = (manifest.get("config") or {}).get("schedule")
        if schedule not in ("max", "adaptive"):
            log.warning("data.shards=%s is a %r curriculum: a row above its built level has fewer hard negatives "
                        "than asked (recorded); build with --schedule max or adaptive",
                        cfg.data.shards, schedule)

        def K_of(row: Mapping[str, Any]) -> int:
            try:
                return Ks[str(row["data_source"])]
            except KeyError:
                raise ConfigError(f"data.shards={cfg.data.shards}: row {row.get('id')!r} is from "
                                  f"{row.get('data_source')!r}, a dataset the manifest has no K for (it has "
                                  f"{sorted(Ks)})") from None
        top = max(Ks.values())
    else:
        def K_of(row: Mapping[str, Any]) -> int:
            return int(agent.p_levels)
        top = int(agent.p_levels)
    controller = None
    if a.controller is not None:
        controller = make_controller(a.controller, K=top, seed=seed if a.seed is None else a.seed,
                                     **dict(a.kwargs or {}))
    return SearchCurriculumHook(controller, mode=mode, K_of=K_of, success=a.success, num_generations=num_generations,
                                levels_file=levels_file, schedule=agent.p_schedule, p_start=agent.p_start,
                                p_end=agent.p_end, p_levels=agent.p_levels)

