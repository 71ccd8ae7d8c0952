"""A build with a level profile (``--profile``, :mod:`rag_curriculum.difficulty.profile`): each schedule's expected
informative fraction for the profiled model, and the calibrated schedule.

**The schedules compared.** Over the build's own sampled questions, each schedule's rows (max, linear, min-max,
min-max shuffled, the target-band controller's first batch, and the calibrated schedule) are scored by the profile:
each row's probability that a group of G samples has training rewards not all equal (spread above the profile's
``max_spread``), from its question's own recorded rewards at the row's level
(:meth:`~rag_curriculum.difficulty.profile.LevelProfile.row_informative`; a level that was not profiled interpolated
between its neighbours), or the level's expected fraction over the profiled questions for a question that was not
profiled. The whole curriculum's mean, and its first and last quarter (the start and the end of training: an order
that puts uninformative rows first shows there).

**The calibrated schedule** (``--schedule calibrated``, ``--target P``, default 0.5): each question at the profiled
level (up to its source's K) whose pass rate, its own where profiled else the level's, is nearest ``P``; the rows
ordered from the model's easiest to its hardest (the placed pass rate, high to low; then the level; then the sample
order). ``--order shuffled`` permutes them. ``--target-informative F``: the level whose predicted informative
fraction is nearest ``F`` instead (1: the most informative), ties by the pass rate rule.

**A band instead of a target** (``--band LO,HI``, not with ``--target``): each question at a profiled level whose
pass rate lies in ``[LO, HI]``, the one nearest the band's middle (ties to the lowest level, unless every tied rate is
above the middle); a question with no level inside goes to the level nearest the band, and the manifest counts those
by reason (``above``: the model passes it more often than HI there; ``below``: less often than LO).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from .._plumbing import derive_seed, distribution
from ..difficulty.profile import DEFAULT_TARGET, LevelProfile, read_profile
from ..errors import ProfileError
from ..records import Example
from ..shards import portable_path
from ._config import BuildConfig

log = logging.getLogger("rag_curriculum.build")

#: The schedule name of a calibrated build.
CALIBRATED = "calibrated"
#: The schedules a profile scores, as the card names them: (label, schedule, order).
COMPARED = (("max", "max", "level"), ("linear", "linear", "level"), ("min-max", "min-max", "level"),
            ("min-max shuffled", "min-max", "shuffled"))
#: The target-band controller's first batch: every row at its ``start`` level (1.0 by default).
ADAPTIVE_START_LEVEL = 1

Assign = Callable[[Sequence[Example], BuildConfig], list[tuple[Example, int]]]


def row_id(ex: Example) -> str:
    """The ``id`` a build gives the question's row (a profile names its questions by it)."""
    return f"{ex.extra.get('data_source') or ex.source}-{ex.extra.get('row_id', ex.id)}"


#: The differences between a profile and a build already announced (said once per process).
_ANNOUNCED: set[tuple[str | None, str]] = set()


def _model_name(ref: str | None) -> str:
    """A model reference as a name to compare: its last path component, without a ``.gguf`` suffix."""
    return str(ref or "").rstrip("/").split("/")[-1].removesuffix(".gguf").lower()


def load_profile(cfg: BuildConfig, datasets: Sequence[str]) -> LevelProfile:
    """The build's ``--profile``, refused when it measured other datasets than the build's, or (when the build names
    the model it is for with ``--tokenizer``) another model."""
    prof = read_profile(cfg.profile or "")
    missing = sorted(set(datasets) - set(prof.datasets))
    if missing:  # (a mixture's other dataset would be scored by this one's figures)
        raise ProfileError(f"--profile {cfg.profile} measured {', '.join(prof.datasets)}, not this build's "
                           f"{', '.join(missing)}", hint="profile every dataset of the build: curriculum profile "
                           f"--dataset {missing[0]} --input FILE --model M --out DIR (one profile of the mixture: "
                           "profile the build's own rows)")
    if cfg.tokenizer and prof.model and _model_name(prof.model) != _model_name(cfg.tokenizer):
        raise ProfileError(f"--profile {cfg.profile} measured model {_model_name(prof.model)}, not --tokenizer "
                           f"{cfg.tokenizer}'s model", hint="profile the model you will train, or pass its "
                           "tokenizer")
    sampling = {"group_size": cfg.group_size, "template": sorted({cfg.template})} if cfg.template else \
        {"group_size": cfg.group_size}
    for what in prof.differences(sampling=sampling):
        if (cfg.profile, what) in _ANNOUNCED:
            continue
        _ANNOUNCED.add((cfg.profile, what))
        log.warning("--profile %s was made with other settings than this build's: %s; its predictions are for "
                    "the profile's", cfg.profile, what)
    return prof


def place(prof: LevelProfile, cfg: BuildConfig, ex: Example, K: int) -> tuple[int, float, str]:
    """Question ``ex``'s calibrated level (at most ``K``), its pass rate there, and ``"inside"`` (the target, or
    the band), ``"above"`` or ``"below"`` the band (none of its levels inside)."""
    if cfg.band is not None:
        lo, hi = cfg.band
        return prof.band_level(row_id(ex), K, (lo, hi))
    level, p = prof.calibrated_level(row_id(ex), K, DEFAULT_TARGET if cfg.target is None else cfg.target,
                                     informative=cfg.target_informative, group_size=cfg.group_size or prof.group_size,
                                     max_spread=prof.max_spread)
    return level, p, "inside"


def calibrated_label(cfg: BuildConfig) -> str:
    """The calibrated schedule's name in the figures: ``calibrated (target 0.5)`` or ``calibrated (band 0.3-0.7)``."""
    if cfg.band is not None:
        return f"calibrated (band {cfg.band[0]:g}-{cfg.band[1]:g})"
    if cfg.target_informative is not None:
        return f"calibrated (informative target {cfg.target_informative:g})"
    return f"calibrated (target {DEFAULT_TARGET if cfg.target is None else cfg.target:g})"


def calibrated_order(examples: Sequence[Example], cfg: BuildConfig, prof: LevelProfile,
                     K_of: Callable[[Example], int]) -> list[tuple[Example, int]]:
    """Each question at its calibrated level, easiest first (``--order shuffled``: permuted with the seed)."""
    placed = []
    for i, ex in enumerate(examples):
        level, p, _ = place(prof, cfg, ex, K_of(ex))
        placed.append((-p, level, i, ex))
    placed.sort(key=lambda t: t[:3])
    paired = [(ex, level) for _, level, _, ex in placed]
    if cfg.order == "shuffled":
        random.Random(derive_seed(cfg.seed, "order")).shuffle(paired)
    return paired


def _figures(prof: LevelProfile, rows: Sequence[tuple[str, int]], group_size: int) -> dict[str, Any]:
    n = len(rows)
    q = max(1, n // 4)
    t = prof.max_spread
    return {"whole": round(prof.informative(rows, group_size, t), 4),
            "first_quarter": round(prof.informative(rows[:q], group_size, t), 4),
            "last_quarter": round(prof.informative(rows[n - q:], group_size, t), 4),
            "mean_pass_rate": round(sum(prof.pass_rate(r, lv)[0] for r, lv in rows) / n, 4) if n else None}


def profile_facts(cfg: BuildConfig, chosen: Sequence[Example], paired: Sequence[tuple[Example, int]],
                  prof: LevelProfile, assign: Assign) -> dict[str, Any]:
    """The manifest's ``profile`` record: the profile, the group size, each compared schedule's expected
    informative fraction over the build's questions (whole, first and last quarter), this build's, and, for a
    calibrated build, where its questions were placed."""
    g = cfg.group_size or prof.group_size
    target = DEFAULT_TARGET if cfg.target is None else cfg.target
    schedules: dict[str, Any] = {}
    for label, schedule, order in COMPARED:
        other = assign(chosen, replace(cfg, schedule=schedule, order=order, pieces=None))
        schedules[label] = _figures(prof, [(row_id(ex), lv) for ex, lv in other], g)
    schedules["adaptive start"] = _figures(prof, [(row_id(ex), ADAPTIVE_START_LEVEL) for ex in chosen], g)
    calibrated_cfg = replace(cfg, schedule=CALIBRATED, order="level", pieces=None,
                             target=None if cfg.band is not None else target,
                             target_informative=None if cfg.band is not None else cfg.target_informative)
    calibrated = assign(chosen, calibrated_cfg)
    schedules[calibrated_label(calibrated_cfg)] = _figures(prof, [(row_id(ex), lv) for ex, lv in calibrated], g)
    this = [(row_id(ex), lv) for ex, lv in paired]
    aim = round((cfg.band[0] + cfg.band[1]) / 2, 6) if cfg.band is not None else target  # a band: aim at its middle
    from ._plan import source_K

    K = min(cfg.K or source_K(cfg, s.dataset) for s in cfg.sources)  # a start above the build's K is no advice
    candidates = [lv for lv in prof.levels if lv <= K] or prof.levels[:1]
    if cfg.target_informative is not None:  # the level whose predicted informative fraction is nearest the target
        start = min(candidates, key=lambda lv: (abs(prof.level_informative(lv, g, prof.max_spread)
                                                    - cfg.target_informative), abs(prof.level_pass_rate(lv) - aim), lv))
    else:
        start = min(candidates, key=lambda lv: (abs(prof.level_pass_rate(lv) - aim), lv))
    reward = prof.summary.get("reward") or {}
    record: dict[str, Any] = {
        "path": portable_path(cfg.profile or "", cfg.out),
        "model": _model_name(prof.model) or None,
        "datasets": prof.datasets,
        "levels": prof.levels,
        "group_size": g,
        "profiled_questions": sum(1 for ex in chosen if prof.profiled(row_id(ex))),
        "questions": len(chosen),
        "level_pass_rate": {str(lv): round(prof.level_pass_rate(lv), 4) for lv in prof.levels},
        "level_informative": {str(lv): round(prof.level_informative(lv, g, prof.max_spread), 4)
                              for lv in prof.levels},
        "reward": ({"rewards": reward.get("rewards"), "identity": reward.get("identity")} if prof.has_rewards
                   else None),
        "max_spread": prof.max_spread,
        "sampling": prof.summary.get("sampling"),
        "schedules": schedules,
        "this_build": _figures(prof, this, g),
        "adaptive_start": {"level": start, "pass_rate": round(prof.level_pass_rate(start), 4), "target": aim,
                           "informative": round(prof.level_informative(start, g, prof.max_spread), 4),
                           **({"band": list(cfg.band)} if cfg.band is not None else {}),
                           **({"target_informative": cfg.target_informative}
                              if cfg.target_informative is not None else {})},
    }
    if cfg.schedule == CALIBRATED:
        record["calibrated"] = {
            "target": target,
            **({"target_informative": cfg.target_informative} if cfg.target_informative is not None else {}),
            "levels": distribution(lv for _, lv in paired),
            "own_rate": sum(1 for ex, _ in paired if prof.profiled(row_id(ex))),
            "level_rate": sum(1 for ex, _ in paired if not prof.profiled(row_id(ex))),
        }
        if cfg.band is not None:  # a band, not a target: the questions none of whose levels lie inside it, by reason
            lo, hi = cfg.band  # a placed rate outside the band: no level of that question lies inside
            rates = [prof.pass_rate(row_id(ex), lv)[0] for ex, lv in paired]
            reasons = ["above" if p > hi + 1e-12 else "below" for p in rates if not lo - 1e-12 <= p <= hi + 1e-12]
            del record["calibrated"]["target"]
            record["calibrated"]["band"] = list(cfg.band)
            record["calibrated"]["outside_band"] = {r: reasons.count(r) for r in ("above", "below")}
    return record
