"""What GRPO felt, step by step, beside what the level profile predicted: the trainer checks the prediction.

A group of ``G`` completions teaches only when its training rewards differ (an *informative* group: TRL's
``frac_reward_zero_std`` counts the others). A level profile (``curriculum profile``) predicts, for each question
and level, the probability that a group is informative; a build made with ``build --profile`` records it in its
manifest (``profile.path``, relative to the shards), and ``curriculum train --profile DIR`` (``data.profile``) names
one. With a profile, :class:`InformativeCheck`

- scores every generation batch as TRL does: the weighted total reward of each completion, a group informative when
  its rewards' standard deviation is not zero (TRL's ``isclose(std, 0)``; completions every reward function left
  unscored are left out, as TRL leaves them out);
- at each optimiser step, over exactly the rows the ledger says the step trained (``curriculum_steps.jsonl``), gives
  the predicted fraction (the mean of the profile's probability for each row at the level it was shown at) and the
  measured one (the share of those rows' groups that were informative), as ``informative/predicted`` and
  ``informative/measured`` in the logs and the ledger;
- writes one JSON line per step into ``step_metrics.jsonl`` (:data:`STEP_METRICS_FILE`): the step, its rows and
  levels, the predicted and measured fractions, TRL's ``1 - frac_reward_zero_std``, the reward's mean and standard
  deviation, the gradient norm and the learning rate (TRL's values averaged over the logging window, as logged);
- at the end (:meth:`InformativeCheck.summary`) writes ``informative.json`` and ``informative.png``: per level the
  groups, the predicted and measured fractions, the prediction's 95% interval for that many groups (the count of
  informative groups is a sum of independent Bernoulli draws with the predicted probabilities: a Poisson-binomial,
  whose normal interval is ``mean +- 1.96 sqrt(sum p(1 - p)) / n``), the measured fraction's Wilson interval, and the
  error (measured minus predicted) with a percentile bootstrap 95% interval over the groups; the same for the run's
  quarters (where the prediction drifted as the model learned: the first quarter whose measured fraction leaves the
  prediction's interval);
- refreshes the prediction from the rollouts (``refresh``, on by default): each question's reward values at each
  level have a Dirichlet posterior (:class:`~rag_curriculum.difficulty.profile.RewardPosterior`: prior the
  profile's recorded samples, each observed group's rewards added after its step), and each step logs beside
  ``predicted`` the posterior's forecast for its rows made *before* their groups are added (``refreshed``,
  ``informative/refreshed``), times a factor that follows the whole model's drift (``drift_decay``:
  :class:`~rag_curriculum.difficulty.profile.DriftFactor`, pooled over every question, for a curriculum shows most
  questions once); the summary's quarters give its error beside the static prediction's.

Without a profile the step line still shows TRL's measured fraction, and ``step_metrics.jsonl`` is written without
the predicted column.

>>> chk = InformativeCheck(None, 2)
>>> chk.scored([{"curriculum_index": 0, "id": "a", "level": 1}] * 2 + [{"curriculum_index": 1, "id": "b",
...            "level": 3}] * 2, [1.0, 0.0, 2.0, 2.0])
>>> chk.step(1, [{"curriculum_index": 0}, {"curriculum_index": 1}])
{'informative/measured': 0.5}
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._plots import plot_informative
from .._plumbing import atomic_write_text, read_jsonl_latest
from ..difficulty.profile import DriftFactor, RewardPosterior, read_profile
from ..errors import ProfileError
from ..shards import shared_path

log = logging.getLogger(__name__)

#: One JSON line per optimiser step in the run folder: what GRPO felt, beside the prediction.
STEP_METRICS_FILE = "step_metrics.jsonl"
#: The run's closing check of the prediction (with a profile), and its plot.
SUMMARY_FILE = "informative.json"
PLOT_FILE = "informative.png"
#: The quarters a run is cut into to see where the prediction drifted.
WINDOWS = 4
BOOTSTRAP_RESAMPLES = 2000
Z95 = 1.959964


def _key(row: Mapping[str, Any]) -> Any:
    return row.get("curriculum_index", row.get("id"))


def resolve_profile(given: str | None, shards: str | Path, manifest: Mapping[str, Any]) -> tuple[Any, str | None]:
    """The level profile a run checks its informative fraction against, and where it came from: ``given``
    (``data.profile``, read strictly: a folder that is not a finished profile is refused), else the one the build
    recorded (``manifest["profile"]["path"]``, relative to the shards), else none. A recorded profile that is not
    there any more is said once in the log, and the run trains unchecked. A profile of other datasets than the
    shards' (``manifest["K"]``) is refused (:func:`check_datasets`)."""
    if given:
        prof = read_profile(given)
        check_datasets(prof, manifest, shards, f"data.profile={given}")
        return prof, str(given)
    recorded = (manifest.get("profile") or {}).get("path")
    if not recorded:
        return None, None
    folder = Path(os.path.normpath(Path(shards) / recorded))  # relative to the shards (an absolute one as it is)
    try:
        prof = read_profile(folder)
    except ProfileError as e:
        log.warning("the shards' level profile %s cannot be read here (%s): the informative fraction goes "
                    "unchecked; give data.profile=DIR", recorded, e)
        return None, None
    check_datasets(prof, manifest, shards, f"the level profile {folder} the shards were built with")
    return prof, str(folder)


def check_datasets(profile: Any, manifest: Mapping[str, Any], shards: str | Path, what: str) -> None:
    """Refuse, in one line, a profile that measured other datasets than the shards hold (``manifest["K"]``): it
    would predict every row from another dataset's questions. Nothing to compare (no datasets recorded on either
    side) passes.

    Raises:
        ProfileError: a dataset of the shards that the profile did not measure.
    """
    ours = sorted(str(d) for d in (manifest.get("K") or {}))
    theirs = list(getattr(profile, "datasets", None) or [])
    missing = [d for d in ours if d not in theirs]
    if ours and theirs and missing:
        raise ProfileError(f"{what} measured {', '.join(theirs)}, not data.shards={shards}'s {', '.join(missing)}: "
                           "its predictions are for another dataset's questions",
                           hint=f"profile the shards' dataset (curriculum profile --dataset {missing[0]} --input FILE "
                                "--model M --out DIR) and give data.profile=DIR, or train on the profile's dataset")


def wilson(k: float, n: int) -> list[float] | None:
    """The Wilson 95% interval of ``k`` successes in ``n`` trials.

    >>> wilson(5, 10)
    [0.236593, 0.763407]
    """
    if n <= 0:
        return None
    p, z2 = k / n, Z95 * Z95
    mid = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return [round(max(0.0, mid - half), 6), round(min(1.0, mid + half), 6)]


def prediction_interval(probabilities: Sequence[float]) -> list[float] | None:
    """The 95% interval of the informative fraction of groups whose probabilities of being informative are
    ``probabilities``: the count is Poisson-binomial, ``mean +- 1.96 sqrt(sum p(1 - p)) / n`` (clipped to 0..1).

    >>> prediction_interval([0.5] * 100)
    [0.402002, 0.597998]
    """
    n = len(probabilities)
    if n == 0:
        return None
    mean = sum(probabilities) / n
    half = Z95 * math.sqrt(sum(p * (1 - p) for p in probabilities)) / n
    return [round(max(0.0, mean - half), 6), round(min(1.0, mean + half), 6)]


def compare(groups: Sequence[tuple[float, bool]], *, resamples: int = BOOTSTRAP_RESAMPLES,
            seed: int = 0) -> dict[str, Any]:
    """Predicted against measured over ``groups`` (each group's predicted probability, and whether it was
    informative): the means, the prediction's interval, the measured Wilson interval, the error with a percentile
    bootstrap 95% interval over the groups, and whether the measured fraction lies inside the prediction's interval.
    """
    import numpy as np

    n = len(groups)
    if n == 0:
        return {"groups": 0}
    p = np.array([g[0] for g in groups], dtype=float)
    m = np.array([float(g[1]) for g in groups])
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    err = (m[idx] - p[idx]).mean(axis=1)
    interval = prediction_interval(p.tolist())
    measured = float(m.mean())
    return {"groups": n, "predicted": round(float(p.mean()), 6), "measured": round(measured, 6),
            "predicted_interval": interval, "measured_interval": wilson(float(m.sum()), n),
            "error": round(measured - float(p.mean()), 6),
            "error_interval": [round(float(np.percentile(err, 2.5)), 6), round(float(np.percentile(err, 97.5)), 6)],
            "inside": bool(interval[0] - 1e-9 <= measured <= interval[1] + 1e-9)}


class InformativeCheck:
    """The per-step check of a run's informative fraction against a level profile (module docstring).

    Args:
        profile: a :class:`~rag_curriculum.difficulty.profile.LevelProfile`, or None (measured only).
        group_size: the run's ``num_generations`` (the prediction is for groups of this size).
        path: ``step_metrics.jsonl`` (None: nothing written; the main process only).
        source: where the profile came from, as the summary names it.
        max_spread: a group counts as informative when its rewards spread by more than this (0: not all equal,
            TRL's zero-std rule).
        refresh: also forecast each step from the profile refreshed by the run's own groups (``refreshed``).
        prior_weight: what each of the profile's recorded samples counts in the refreshed posterior.
        drift_decay: with ``refresh``, the drift factor's discount per step (:class:`DriftFactor`); None: no
            factor (each question's posterior alone).
    """

    def __init__(self, profile: Any, group_size: int, *, path: str | Path | None = None, source: str | None = None,
                 max_spread: float = 0.0, refresh: bool = True, prior_weight: float = 1.0,
                 drift_decay: float | None = 0.9) -> None:
        self.profile = profile
        self.group_size = int(group_size)
        self.path = Path(path) if path is not None else None
        self.source = source
        self.max_spread = float(max_spread)
        self.groups: dict[Any, tuple[Any, Any, bool]] = {}  # row key -> (id, level, informative) of its last group
        self.pending: list[dict[str, Any]] = []  # steps not yet logged by TRL
        self.steps: list[dict[str, Any]] = []  # every step: its rows' (predicted, informative, level)
        self._memo: dict[tuple[Any, int], float] = {}
        self.posterior = RewardPosterior(profile, prior_weight=prior_weight) if profile is not None and refresh else None
        self.drift = DriftFactor(decay=drift_decay) if self.posterior is not None and drift_decay is not None else None
        self._rewards: dict[Any, list[float]] = {}  # row key -> its last group's rewards, until a step observes them

    def predict(self, row_id: Any, level: int) -> float:
        """The profile's probability that a group of question ``row_id`` at ``level`` is informative."""
        key = (row_id, int(level))
        if key not in self._memo:
            prof = self.profile
            if hasattr(prof, "row_informative"):
                value = prof.row_informative(str(row_id), int(level), self.group_size, max_spread=self.max_spread)
            else:
                value = prof.informative([(str(row_id), int(level))], self.group_size)
            self._memo[key] = float(value)
        return self._memo[key]

    def scored(self, rows: Sequence[Mapping[str, Any]], rewards: Iterable[float]) -> None:
        """A generation batch, scored: its rows (a row per completion, every process, in order) and each
        completion's weighted total reward (NaN: unscored by every reward function)."""
        values = [float(r) for r in rewards]
        g = self.group_size
        if len(values) != len(rows) or len(rows) % g:
            log.debug("informative check: %d rows and %d rewards, not whole groups of %d; batch left out",
                      len(rows), len(values), g)
            return
        for start in range(0, len(rows), g):
            group = [v for v in values[start:start + g] if not math.isnan(v)]
            row = rows[start]
            self.groups[_key(row)] = (row.get("id"), row.get("level"), informative(group, self.max_spread))
            self._rewards[_key(row)] = group

    def step(self, step: int, rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """Close optimiser step ``step`` over the rows it trained (the ledger's): the metrics to log (and to add to
        the ledger's record)."""
        found = [(self.groups[_key(r)], r) for r in rows if _key(r) in self.groups]
        if not found:
            return {}
        measured = [g[2] for g, _ in found]
        entry: dict[str, Any] = {"step": step, "rows": [_key(r) for _, r in found], "ids": [g[0] for g, _ in found],
                                 "levels": [g[1] for g, _ in found], "informative": measured}
        metrics = {"informative/measured": sum(measured) / len(measured)}
        if self.profile is not None:
            predicted = [self.predict(g[0], int(g[1])) for g, _ in found]
            entry["p"] = predicted
            metrics["informative/predicted"] = sum(predicted) / len(predicted)
        if self.posterior is not None:  # the forecast first, then the step's groups refresh the posterior
            refreshed = [self.posterior.predict(g[0], int(g[1]), self.group_size, self.max_spread) for g, _ in found]
            entry["q0"] = [p if q is None else q for p, q in zip(entry["p"], refreshed, strict=True)]
            factor = self.drift.factor() if self.drift is not None else 1.0
            entry["q"] = [min(1.0, q * factor) for q in entry["q0"]]
            if self.drift is not None:
                entry["drift"] = factor
            metrics["informative/refreshed"] = sum(entry["q"]) / len(entry["q"])
            entry["r"] = [self._rewards.pop(_key(r), []) for _, r in found]
            self._observe(entry)
        self.steps.append(entry)
        self.pending.append({**entry, **metrics})
        return metrics

    def _observe(self, entry: Mapping[str, Any]) -> None:
        for row_id, level, rewards in zip(entry["ids"], entry["levels"], entry["r"], strict=True):
            self.posterior.observe(row_id, int(level), rewards)
        if self.drift is not None:
            self.drift.observe(entry["informative"], entry.get("q0", entry["q"]))

    def logged(self, logs: Mapping[str, Any]) -> None:
        """TRL's log of the steps since the last one: each such step's line, with TRL's numbers, written."""
        if not self.pending or "frac_reward_zero_std" not in logs:
            return
        trl = {"trl_informative": 1.0 - float(logs["frac_reward_zero_std"])}
        for key, name in (("reward", "reward"), ("reward_std", "reward_std"), ("grad_norm", "grad_norm"),
                          ("learning_rate", "learning_rate"), ("loss", "loss")):
            value = logs.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                trl[name] = float(value)
        lines = []
        for e in self.pending:
            record = {"step": e["step"], "rows": e["rows"], "levels": e["levels"],
                      "informative": [int(m) for m in e["informative"]],
                      "measured": round(e["informative/measured"], 6), **trl, "logged_steps": len(self.pending)}
            if "informative/predicted" in e:
                record["predicted"] = round(e["informative/predicted"], 6)
                record["p"] = [round(p, 6) for p in e["p"]]
            if "informative/refreshed" in e:
                record["refreshed"] = round(e["informative/refreshed"], 6)
                record.update(q=[round(q, 6) for q in e["q"]], q0=[round(q, 6) for q in e["q0"]], ids=e["ids"],
                              rewards=e["r"], **({"drift": round(e["drift"], 6)} if "drift" in e else {}))
            lines.append(json.dumps(record, sort_keys=True) + "\n")
        self.pending = []
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as f:
                f.writelines(lines)

    def load(self, path: str | Path, upto: int) -> None:
        """The steps a resumed run trained before (``step_metrics.jsonl`` up to step ``upto``), so its summary
        covers the whole run."""
        p = Path(path)
        if not p.is_file():
            return
        self.steps = [{"step": r["step"], "rows": r["rows"], "levels": r["levels"],
                       "informative": [bool(m) for m in r.get("informative", [])],
                       **{k: r[k] for k in ("p", "q", "q0") if k in r},
                       **({"ids": r["ids"], "r": r["rewards"]} if "rewards" in r else {})}
                      for r in read_step_metrics(p) if int(r["step"]) <= upto]
        if self.profile is not None and any("p" not in s for s in self.steps):
            self.steps = [s for s in self.steps if "p" in s]  # steps checked without this profile: left out
        if self.posterior is not None:  # the posterior as the run left it: its groups observed again, in order
            for s in sorted(self.steps, key=lambda s: s["step"]):
                if "r" in s:
                    self._observe(s)

    def summary(self) -> dict[str, Any] | None:
        """Predicted against measured per level, over the whole run and per quarter of its steps; None without a
        profile or a step."""
        if self.profile is None or not self.steps:
            return None
        every = [(s["step"], lv, p, m) for s in self.steps for lv, p, m in zip(s["levels"], s["p"], s["informative"],
                                                                               strict=True)]
        levels = sorted({lv for _, lv, _, _ in every}, key=lambda v: (v is None, v))
        refreshed = ([(s["step"], q, m) for s in self.steps for q, m in zip(s["q"], s["informative"], strict=True)]
                     if all("q" in s for s in self.steps) else [])  # the refreshed forecast (every step has one)
        steps = sorted({s["step"] for s in self.steps})
        windows = []
        k = max(1, math.ceil(len(steps) / WINDOWS))
        for i in range(0, len(steps), k):
            span = steps[i:i + k]
            chosen = [(p, m) for st, _, p, m in every if span[0] <= st <= span[-1]]
            windows.append({"steps": [span[0], span[-1]], **compare(chosen, seed=i)})
            if refreshed:
                windows[-1]["refreshed"] = compare([(q, m) for st, q, m in refreshed if span[0] <= st <= span[-1]],
                                                   seed=i)
        drift = next((w["steps"] for w in windows if not w["inside"]), None)
        return {
            "kind": "informative-check",
            "profile": shared_path(self.source),  # the run folder is shared: no machine path
            "group_size": self.group_size,
            "max_spread": self.max_spread,
            "steps": len(steps),
            "whole": compare([(p, m) for _, _, p, m in every]),
            "per_level": {str(lv): compare([(p, m) for _, v, p, m in every if v == lv]) for lv in levels},
            "windows": windows,
            "drift": {"first_outside": drift},
            "per_step": [{"step": s["step"], "predicted": round(sum(s["p"]) / len(s["p"]), 6),
                          "measured": round(sum(s["informative"]) / len(s["informative"]), 6),
                          **({"refreshed": round(sum(s["q"]) / len(s["q"]), 6)} if refreshed else {})}
                         for s in self.steps],
            **({"refreshed": {"whole": compare([(q, m) for _, q, m in refreshed]),
                              "prior_weight": self.posterior.prior_weight if self.posterior else None,
                              "drift_decay": self.drift.decay if self.drift is not None else None,
                              **({"without_drift": compare([(q, bool(m)) for s in self.steps
                                                            for q, m in zip(s["q0"], s["informative"], strict=True)])}
                                 if all("q0" in s for s in self.steps) else {})}}
               if refreshed else {}),
        }

    def finish(self, out: str | Path) -> dict[str, Any] | None:
        """Write the summary (``informative.json``) and its plot into the run folder ``out``; the summary."""
        summary = self.summary()
        if summary is None:
            return None
        out = Path(out)
        atomic_write_text(out / SUMMARY_FILE, json.dumps(summary, indent=2, sort_keys=True) + "\n")
        plot_informative(summary, out / PLOT_FILE)
        return summary


def informative_callback(check: InformativeCheck) -> Any:
    """A transformers callback that hands each of TRL's logs to ``check`` (its steps' lines are written then, with
    TRL's reward, reward_std and grad_norm), and on resume reads back the steps trained before."""
    from transformers import TrainerCallback

    class Informative(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001 - transformers' signature
            if state.global_step and check.path is not None:
                check.load(check.path, upto=state.global_step)

        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001 - transformers' signature
            if state.is_world_process_zero and logs:
                check.logged(logs)

    return Informative()


def informative(rewards: Sequence[float], max_spread: float = 0.0) -> bool:
    """Whether a group's rewards teach: their standard deviation is not zero, as TRL decides it
    (``torch.isclose(std, 0)``: above 1e-8), and (with ``max_spread`` > 0) max - min is above ``max_spread``.

    >>> informative([1.0, 1.0]), informative([1.0, 0.5]), informative([1.0, 0.5], max_spread=0.5), informative([2.0])
    (False, True, False, False)
    """
    if len(rewards) < 2:
        return False
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1))
    if std <= 1e-8:
        return False
    return max(rewards) - min(rewards) > max_spread if max_spread > 0 else True


def summary_table(summary: Mapping[str, Any]) -> list[list[str]]:
    """The rows of the printed table: per level, then the whole run; columns: level, groups, predicted (95%),
    measured (95%), error (95%), inside."""
    def fmt(x: float | None, ci: Sequence[float] | None, sign: str = "") -> str:
        if x is None:
            return "-"
        return f"{x:{sign}.3f} [{ci[0]:{sign}.3f}, {ci[1]:{sign}.3f}]" if ci else f"{x:{sign}.3f}"

    rows = []
    for name, c in [*((f"level {lv}", c) for lv, c in summary["per_level"].items()), ("all", summary["whole"])]:
        if not c.get("groups"):
            continue
        rows.append([name, str(c["groups"]), fmt(c["predicted"], c["predicted_interval"]),
                     fmt(c["measured"], c["measured_interval"]), fmt(c["error"], c["error_interval"], "+"),
                     "yes" if c["inside"] else "NO"])
    return rows


def read_step_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of ``step_metrics.jsonl``; for a step written twice (a resumed run), the last one."""
    return read_jsonl_latest(path, "step")
