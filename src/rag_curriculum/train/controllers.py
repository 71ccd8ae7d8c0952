"""Controllers of an adaptive curriculum: after each generation batch is scored, a controller sees how the model did
on each question's group of completions and picks the level the next batch's rows are shown at.

A controller is deterministic given its seed and the scores it is fed: its randomness (``target-band`` with
``mode: sample``) is drawn from a generator seeded by ``(seed, batch number, question id)``, so the same level is
drawn for every copy of a prompt, on every process, with no state but the batch counter. :meth:`Controller.state_dict`
is everything it needs to continue exactly (saved in every checkpoint by the trainer).

Shipped (registry :data:`CONTROLLERS`; add your own with :func:`register_controller`):

* ``target-band``: the AdaRFT update (Shi et al. 2025) of a continuous target level,
  ``T <- clip(T + eta * tanh(alpha * (success - target)), 1, K)``, rows shown at ``round(T)`` (``mode: round``) or
  at ``round(T + N(0, spread))`` (``mode: sample``);
* ``mastery``: per question, a group that was all right moves the question up a level for the next time it is
  seen, all wrong down; questions not seen yet start at the mean level the last batch's questions moved to
  (``new: batch``) or at ``start`` (``new: start``);
* ``informative``: each row at the level whose informative forecast is highest (or nearest a target), the level
  profile's prediction refreshed from the rollouts: each question's reward posterior times a per-level drift factor
  shrunk toward the factor pooled over levels (:class:`InformativeLevels`); the first batch is placed as
  ``--schedule calibrated --target-informative`` places it.

>>> c = make_controller("target-band", K=5, eta=1.0, alpha=2.0)
>>> c.levels([("q1", 5), ("q2", 3)])
[1, 1]
>>> c.update([GroupResult("q1", 1, 5, (1.0, 1.0)), GroupResult("q2", 1, 3, (1.0, 0.0))])
0.75
>>> round(c.T, 4), c.levels([("q3", 5)])
(1.4621, [1])
>>> m = make_controller("mastery", K=3)
>>> m.update([GroupResult("a", 1, 3, (1.0, 1.0)), GroupResult("b", 1, 3, (0.0, 1.0))])
0.75
>>> m.levels([("a", 3), ("b", 3), ("new", 3)])
[2, 1, 2]
"""

from __future__ import annotations

import inspect
import math
import random
import typing
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from .._plumbing import derive_seed
from .._settings import suggest
from ..difficulty.profile import DriftFactor, RewardPosterior
from ..errors import ConfigError, SettingError, UsageError
from ..registry import Registry, import_dotted
from ._informative import informative


class GroupResult(NamedTuple):
    """One question's group in a scored batch: its id, the level it was shown at, its source's top level, and the
    success of each completion (1/0 exact match, or the reward)."""

    key: str
    level: int
    K: int
    scores: tuple[float, ...]


def batch_success(results: Sequence[GroupResult]) -> float:
    """The mean success over every completion of the batch (NaN scores, from rewards that returned None, skipped);
    NaN when there is none."""
    values = [s for r in results for s in r.scores if not math.isnan(s)]
    return sum(values) / len(values) if values else math.nan


class Controller:
    """Base class: ``levels`` picks the level of each row of the next batch, ``update`` reads the scored batch.

    Subclasses take their settings as keyword arguments (``adaptive.kwargs`` in a recipe) and implement
    :meth:`levels`, :meth:`update`, :meth:`target` and, for their own state, :meth:`state_dict` /
    :meth:`load_state_dict` (call the base's)."""

    name = "controller"
    #: The controller needs the run's level profile: the hook passes ``profile`` and ``group_size`` (G).
    needs_profile = False
    #: What it reads as a completion's success: None (``adaptive.success``) or ``"reward"`` (the total reward).
    feed: str | None = None

    def __init__(self, *, K: int, seed: int = 0) -> None:
        if int(K) < 1:
            raise ConfigError(f"{self.name}: K = {K}; must be >= 1")
        self.K = int(K)
        self.seed = int(seed)
        self.batch = 0  # scored batches so far

    def levels(self, rows: Sequence[tuple[str, int]]) -> list[int]:
        """The level of each row ``(question id, top level of its source)`` of the next batch."""
        raise NotImplementedError

    def update(self, results: Sequence[GroupResult]) -> float:
        """Read a scored batch; returns its success (:func:`batch_success`)."""
        raise NotImplementedError

    def target(self) -> float:
        """The level the controller aims at now (logged as ``curriculum/level_target``)."""
        raise NotImplementedError

    def rng(self, key: str) -> random.Random:
        """The generator of question ``key`` in the current batch (the same on every process and copy)."""
        return random.Random(derive_seed(self.seed, self.name, self.batch, key))

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, "K": self.K, "seed": self.seed, "batch": self.batch}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("name") != self.name or int(state.get("K", -1)) != self.K:
            raise ConfigError(f"the saved curriculum controller is {state.get('name')!r} with K={state.get('K')}, "
                              f"this run's is {self.name!r} with K={self.K}",
                              hint="resume with the controller and shards of the run being resumed")
        self.seed = int(state["seed"])
        self.batch = int(state["batch"])


def _clip(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


def _round(x: float) -> int:
    return math.floor(x + 0.5)  # half up (Python's round() goes to the even neighbour)


class TargetBand(Controller):
    """AdaRFT's target-difficulty update on levels: ``T <- clip(T + eta tanh(alpha (success - target)), 1, K)``.

    ``target``: the success to keep (0.5: half the completions right); ``eta``: the most T moves per batch, in
    levels; ``alpha``: how sharply it reacts near the target; ``start``: T at the first batch; ``mode``: ``round``
    (every row at round(T)) or ``sample`` (each question at round(T + N(0, spread)), so a batch spans levels
    around T). A row's level is also clipped to its own source's K (mixtures of sources with different K)."""

    name = "target-band"

    def __init__(self, *, K: int, seed: int = 0, target: float = 0.5, eta: float = 1.0, alpha: float = 2.0,
                 start: float = 1.0, mode: str = "round", spread: float = 0.5) -> None:
        super().__init__(K=K, seed=seed)
        if mode not in ("round", "sample"):
            raise ConfigError(f"target-band: mode={mode!r}; must be round or sample")
        if not 0 <= target <= 1:
            raise ConfigError(f"target-band: target={target}; must be in 0..1 (the share of correct completions to "
                              "keep)")
        if eta <= 0 or alpha <= 0 or spread < 0:
            raise ConfigError(f"target-band: eta={eta}, alpha={alpha}, spread={spread}; eta and alpha must be > 0, "
                              "spread >= 0")
        self.success_target, self.eta, self.alpha = float(target), float(eta), float(alpha)
        self.mode, self.spread = mode, float(spread)
        self.T = _clip(float(start), 1.0, float(self.K))

    def levels(self, rows: Sequence[tuple[str, int]]) -> list[int]:
        out = []
        for key, K in rows:
            t = self.T + (self.rng(key).gauss(0.0, self.spread) if self.mode == "sample" and self.spread else 0.0)
            out.append(int(_clip(_round(t), 1, min(K, self.K))))
        return out

    def update(self, results: Sequence[GroupResult]) -> float:
        success = batch_success(results)
        if not math.isnan(success):
            self.T = _clip(self.T + self.eta * math.tanh(self.alpha * (success - self.success_target)), 1.0,
                           float(self.K))
        self.batch += 1
        return success

    def target(self) -> float:
        return self.T

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "T": self.T}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.T = float(state["T"])


class Mastery(Controller):
    """Per question: a group whose completions were all right (score >= ``threshold``) is shown one level higher
    the next time the question comes up, all wrong one level lower, otherwise at the same level. A question not seen
    yet starts at the mean level the last batch's questions moved to, rounded (``new: batch``; one pass over the
    data then adapts as well), or at ``start`` (``new: start``)."""

    name = "mastery"

    def __init__(self, *, K: int, seed: int = 0, start: int = 1, threshold: float = 1.0, new: str = "batch") -> None:
        super().__init__(K=K, seed=seed)
        if new not in ("batch", "start"):
            raise ConfigError(f"mastery: new={new!r}; must be batch or start")
        if not 1 <= int(start) <= self.K:
            raise ConfigError(f"mastery: start={start}; must be in 1..K (K = {self.K})")
        self.start, self.threshold, self.new = int(start), float(threshold), new
        self.per_question: dict[str, int] = {}
        self.new_level = self.start

    def levels(self, rows: Sequence[tuple[str, int]]) -> list[int]:
        return [int(_clip(self.per_question.get(key, self.new_level), 1, min(K, self.K))) for key, K in rows]

    def update(self, results: Sequence[GroupResult]) -> float:
        moved = []
        for r in results:
            right = [s >= self.threshold for s in r.scores if not math.isnan(s)]
            level = r.level
            if right and all(right):
                level = min(level + 1, r.K, self.K)
            elif right and not any(right):
                level = max(level - 1, 1)
            self.per_question[r.key] = level
            moved.append(level)
        if moved and self.new == "batch":
            self.new_level = int(_clip(_round(sum(moved) / len(moved)), 1, self.K))
        self.batch += 1
        return batch_success(results)

    def target(self) -> float:
        return float(self.new_level)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "new_level": self.new_level,
                "per_question": dict(sorted(self.per_question.items()))}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.new_level = int(state["new_level"])
        self.per_question = {str(k): int(v) for k, v in state["per_question"].items()}


class InformativeLevels(Controller):
    """Each row at the level whose informative forecast, refreshed from the rollouts, is nearest
    ``target_informative`` (1: the most informative level), ties by the pass rate nearest ``target``: the rule of
    ``--schedule calibrated --target-informative`` (:meth:`~rag_curriculum.difficulty.profile.LevelProfile.
    calibrated_level`) on a forecast that follows the model. Needs the run's level profile (``data.profile``, or the
    one the shards were built with); reads each group's whole training reward (whatever ``adaptive.success`` says).

    The forecast of question ``q`` at level ``l`` for a group of ``G`` (the run's ``num_generations``) is

        f(q, l) = min(1, p(q, l) x R(q, l) x d_l)

    * ``p``: the profile's prediction (:meth:`~rag_curriculum.difficulty.profile.LevelProfile.row_informative`);
    * ``R``: the question's own refresh, 1 until a group of ``q`` at ``l`` is seen, then the posterior-predictive
      informative probability of its :class:`~rag_curriculum.difficulty.profile.RewardPosterior` (prior: the
      recorded samples, each worth ``prior_weight``; the groups' rewards added) over the prior's own. Anchored so,
      the forecast before any rollout is exactly the profile's, and the first step places exactly as the calibrated
      build does; a prior predicting 0 (every recorded reward equal) or none (a pass/fail profile, a question not
      profiled) is no anchor: ``p x R`` is then the posterior's own prediction;
    * ``d_l``: the level's drift factor, a :class:`~rag_curriculum.difficulty.profile.DriftFactor` over the groups
      shown at ``l`` (informative groups against their forecasts ``min(1, p x R)``, discounted by ``level_decay``
      per batch), whose Gamma prior has the *pooled* factor (the same over every level's groups, ``drift_decay``,
      ``drift_prior_groups``) as its mean, worth ``level_prior_groups`` groups:
      ``d_l = (w x d_pooled + M_l) / (w + F_l)``. A level with few groups follows the pooled factor; one whose
      groups stop teaching falls below the others, and the questions move off it. A factor pooled over every level
      alone multiplies every level alike and never changes which level is best.

    Deterministic (no draw); its state is the observed posteriors and the factors' sums, restored exactly."""

    name = "informative"
    needs_profile = True
    feed = "reward"

    def __init__(self, *, K: int, seed: int = 0, profile: Any = None, group_size: int | None = None,
                 target_informative: float = 1.0, target: float = 0.5, prior_weight: float = 1.0,
                 drift_decay: float = 0.9, drift_prior_groups: float = 2.0, level_decay: float = 0.9,
                 level_prior_groups: float = 2.0) -> None:
        super().__init__(K=K, seed=seed)

        if profile is None:
            raise ConfigError("the 'informative' controller needs a level profile", hint="give data.profile=DIR "
                              "(curriculum train --profile DIR) or build the shards with --profile")
        for key, value in (("target_informative", target_informative), ("target", target)):
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"adaptive.kwargs.{key}={value}: must be in 0..1", hint=(
                    "target_informative: the informative probability to aim at (1: the most informative level); "
                    "target: the pass rate ties are broken toward"))
        for key, value in (("drift_decay", drift_decay), ("level_decay", level_decay)):
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"adaptive.kwargs.{key}={value}: must be in 0..1",
                                  hint="the discount of older batches per batch (1: none, 0: the last batch only)")
        for key, value in (("drift_prior_groups", drift_prior_groups), ("level_prior_groups", level_prior_groups)):
            if not value > 0.0:
                raise ConfigError(f"adaptive.kwargs.{key}={value}: must be > 0",
                                  hint="the groups the factor's prior is worth (2: the informative check's)")
        if not prior_weight >= 0.0:
            raise ConfigError(f"adaptive.kwargs.prior_weight={prior_weight}: must be >= 0",
                              hint="what each of the profile's recorded samples counts in a question's posterior")
        self.profile = profile
        self.group_size = int(group_size or profile.group_size)
        self.max_spread = float(profile.max_spread)
        self.target_informative, self.success_target = float(target_informative), float(target)
        self.posterior = RewardPosterior(profile, prior_weight=prior_weight)
        self._prior = RewardPosterior(profile, prior_weight=prior_weight)  # never observed: each question's prior
        self.pooled = DriftFactor(decay=drift_decay, prior_groups=drift_prior_groups)
        self.per_level = {lv: DriftFactor(decay=level_decay, prior_groups=level_prior_groups)
                          for lv in profile.levels}
        self._anchor: dict[tuple[str, int], float | None] = {}

    def level_factor(self, level: int) -> float:
        """``d_l``: the level's drift factor, its prior mean the pooled factor (the pooled one for a level that
        was not profiled)."""
        pooled = self.pooled.factor()
        own = self.per_level.get(int(level))
        return pooled if own is None else own.factor(prior_mean=pooled)

    def base(self, key: str, level: int) -> float:
        """``min(1, p x R)``: the profile's prediction refreshed by the question's own groups, before the drift."""
        g, t = self.group_size, self.max_spread
        p = self.profile.row_informative(key, level, g, t)
        if not self.posterior.observed(key, level):
            return p
        post = self.posterior.predict(key, level, g, t) or 0.0
        k = (key, int(level))
        if k not in self._anchor:
            self._anchor[k] = self._prior.predict(key, level, g, t)
        prior = self._anchor[k]
        return min(1.0, post if not prior else p * post / prior)

    def forecast(self, key: str, level: int) -> float:
        """``f(q, l)``: the refreshed informative probability of question ``key``'s next group at ``level``."""
        return min(1.0, self.base(key, level) * self.level_factor(level))

    def place(self, key: str, K: int) -> int:
        """Question ``key``'s level for the next batch (at most ``K``)."""
        return self.profile.calibrated_level(key, min(int(K), self.K), self.success_target,
                                             informative=self.target_informative, group_size=self.group_size,
                                             max_spread=self.max_spread,
                                             forecast=lambda lv: self.forecast(key, lv))[0]

    def levels(self, rows: Sequence[tuple[str, int]]) -> list[int]:
        placed: dict[tuple[str, int], int] = {}  # each prompt's copies alike
        return [placed.setdefault((key, K), self.place(key, K)) for key, K in rows]

    def update(self, results: Sequence[GroupResult]) -> float:

        seen = []
        for r in results:  # every forecast first, as each group's was before the batch
            rewards = [s for s in r.scores if not math.isnan(s)]
            seen.append((r, rewards, informative(rewards, self.max_spread), self.base(r.key, r.level)))
        for r, rewards, _, _ in seen:
            if rewards:  # a group no reward scored tells nothing of the values (the factors count it, as TRL does)
                self.posterior.observe(r.key, r.level, rewards)
        self.pooled.observe([m for *_, m, _ in seen], [f for *_, f in seen])
        for lv, factor in self.per_level.items():  # every level's sums discounted, shown this batch or not
            mine = [(m, f) for r, _, m, f in seen if r.level == lv]
            factor.observe([m for m, _ in mine], [f for _, f in mine])
        self.batch += 1
        return batch_success(results)

    def target(self) -> float:
        """The level a question the profile did not see is placed at now (its level's figures)."""
        return float(self.place("\0not profiled", self.K))

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "profile_sha256": self.profile.summary.get("table_sha256"),
                "posterior": self.posterior.state_dict(), "pooled": self.pooled.state_dict(),
                "per_level": {str(lv): f.state_dict() for lv, f in sorted(self.per_level.items())}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        mine = self.profile.summary.get("table_sha256")
        if state.get("profile_sha256") != mine:
            raise ConfigError(f"the saved 'informative' controller followed another level profile (table "
                              f"{state.get('profile_sha256')}) than this run's ({mine})",
                              hint="resume with the profile of the run being resumed (data.profile)")
        self.posterior.load_state_dict(state["posterior"])
        self._prior = type(self.posterior)(self.profile, prior_weight=self.posterior.prior_weight)
        self._anchor = {}
        self.pooled.load_state_dict(state["pooled"])
        for lv, f in state["per_level"].items():
            self.per_level.setdefault(int(lv), type(self.pooled)()).load_state_dict(f)


CONTROLLERS: Registry[type[Controller]] = Registry(
    "curriculum controller", check=lambda o: isinstance(o, type) and issubclass(o, Controller),
    must_be="a subclass of rag_curriculum.train.Controller")
CONTROLLERS.register("target-band", TargetBand)
CONTROLLERS.register("mastery", Mastery)
CONTROLLERS.register("informative", InformativeLevels)


def register_controller(name: str, cls: type[Controller] | str | None = None, *, overwrite: bool = False) -> Any:
    """Register a :class:`Controller` subclass (or a dotted path ``"pkg.mod:Class"``) under ``name`` (usable as a
    decorator); ``adaptive.controller=NAME`` then selects it.

    Args:
        name: the controller's name.
        cls: the class or its dotted path; None to use this as a decorator.
        overwrite: replace a controller already registered under ``name``.

    Returns:
        ``cls`` (or, as a decorator, the decorator).

    Raises:
        ConfigError: ``name`` is taken (without ``overwrite``), or ``cls`` is not a :class:`Controller` subclass.

    Examples:
        ```python
        from rag_curriculum.train import Controller, register_controller

        @register_controller("band-by-hops")
        class BandByHops(Controller):
            ...   # levels, update, target, state_dict, load_state_dict (docs/adaptive.md)
        ```
    """
    return CONTROLLERS.register(name, cls, overwrite=overwrite)


def resolve_controller(name: str) -> type[Controller]:
    """The class registered under ``name``, or named by a dotted path ``"pkg.module:Class"`` (so the command line
    can use a controller no one registered in its process)."""
    if ":" in name and name not in CONTROLLERS:
        try:
            cls = import_dotted(name)
        except (ImportError, AttributeError) as e:
            raise UsageError(f"adaptive.controller={name!r}: cannot import it ({e})",
                              hint="give a registered name (target-band, mastery) or pkg.module:Class") from None
        if not (isinstance(cls, type) and issubclass(cls, Controller)):
            raise ConfigError(f"adaptive.controller={name!r} is not a Controller subclass")
        return cls
    return CONTROLLERS.get(name)


def make_controller(name: str, *, K: int, seed: int = 0, profile: Any = None, group_size: int | None = None,
                    **kwargs: Any) -> Controller:
    """The controller registered under ``name`` (or a ``pkg.module:Class`` path) with its settings; an unknown
    setting is refused with a "did you mean" and the known ones.

    Args:
        name: ``target-band``, ``mastery``, a registered name, or ``pkg.module:Class``.
        K: the top level.
        seed: the controller's seed.
        profile: the run's level profile, for a controller that needs one (``needs_profile``: ``informative``).
        group_size: the run's G (``num_generations``), with ``profile``.
        **kwargs: its settings (a recipe's ``adaptive.kwargs``).

    Returns:
        The controller, at its starting level.

    Raises:
        UnknownNameError: no controller of that name.
        UsageError: a dotted path that cannot be imported.
        ConfigError: a setting the controller does not take or of the wrong type, a class that is not a
            :class:`Controller`, or ``K`` below 1.

    Examples:
        >>> from rag_curriculum.train import make_controller
        >>> controller = make_controller("target-band", K=4, target=0.5)
        >>> controller.levels([("q1", 4), ("q2", 4)]), controller.target()
        ([1, 1], 1.0)
    """
    cls = resolve_controller(name)
    needs = getattr(cls, "needs_profile", False)
    run_given = ("profile", "group_size") if needs else ()
    if not needs:  # a setting of that name is the controller's own
        kwargs = {**kwargs, **{k: v for k, v in (("profile", profile), ("group_size", group_size)) if v is not None}}
    params = inspect.signature(cls.__init__).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        known = [p for p in params if p not in ("self", "K", "seed", *run_given)]
        for key in kwargs:
            if key not in known:
                raise ConfigError(f"adaptive.kwargs.{key}: not a setting of the {name!r} controller"
                                  f"{suggest(key, known)} Known: {', '.join(known)}")
    _check_kwarg_types(cls, kwargs)
    if needs:
        kwargs = {**kwargs, "profile": profile, "group_size": group_size}
    try:
        return cls(K=K, seed=seed, **kwargs)
    except (TypeError, ValueError) as e:  # a setting of a type the controller cannot take
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"adaptive.kwargs of the {name!r} controller: {e}") from None


def _check_kwarg_types(cls: type, kwargs: Mapping[str, Any]) -> None:
    """A controller setting of the wrong type (``adaptive.kwargs.target=high`` where a number is needed) is refused
    naming the setting, by the constructor's annotations (numbers, flags and strings; others are the class's)."""
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # pragma: no cover - a user's class with annotations that do not resolve
        return
    for key, value in kwargs.items():
        want = hints.get(key)
        if want is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif want is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif want in (str, bool):
            ok = isinstance(value, want)
        else:
            continue
        if not ok:
            raise SettingError(f"adaptive.kwargs.{key}", value, f"a value of type {want.__name__} (the "
                               f"{getattr(cls, 'name', cls.__name__)!r} controller)")
