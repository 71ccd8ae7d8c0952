"""Pass-rate-aware training: the base model's per-question pass rate, measured by ``curriculum partition``
(``stats.parquet``), seeds the run (docs/training.md, "Pass-rate-aware order").

* **A learnable band.** With ``data.pass_min`` / ``data.pass_max``, questions whose measured pass rate lies outside
  ``[pass_min, pass_max]`` (the model always solves them, or never) are either moved behind the others
  (``data.outside_band: defer``; both parts keep their curriculum order) or left out (``skip``). Rows the partition
  did not measure stay where they are. What was deferred or skipped is written to the run's plan.
* **A warm-started controller.** With ``adaptive.from_pass_rates``, the adaptive controller reads the partition's
  samples as its first scored batch (each question's ``c`` correct of ``n`` samples, at the level it was measured
  at) instead of starting from level 1: target-band's T moves as after a batch of that success, mastery moves each
  question up (all correct), down (none) or keeps it.

The join is on the rows' ``id`` (the partition keeps the ids of the rows it read). pyarrow only.

>>> rates = {"a": PassRate("a", 1, 8, 8), "b": PassRate("b", 1, 8, 3), "c": PassRate("c", 1, 8, 0)}
>>> plan = band_order(["a", "b", "c", "d"], rates, pass_min=0.1, pass_max=0.9, outside="defer")
>>> plan.order, plan.deferred, plan.unmeasured
([1, 3, 0, 2], ['a', 'c'], ['d'])
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .controllers import GroupResult

log = logging.getLogger(__name__)

STATS_NAME = "stats.parquet"
OUTSIDE = ("defer", "skip")
_COLUMNS = ("id", "level", "n", "c", "pass_rate")


@dataclass(frozen=True)
class PassRate:
    """One question's measurement: ``c`` of ``n`` samples correct at ``level``."""

    id: str
    level: int | None
    n: int
    c: int

    @property
    def rate(self) -> float:
        return self.c / self.n if self.n else float("nan")


def stats_path(path: str | Path) -> Path:
    """``stats.parquet`` itself, or the one in a partition's output folder."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / STATS_NAME
    if not p.is_file():
        raise ConfigError(f"data.pass_rates={path}: no such file (give the stats.parquet written by `curriculum "
                          "partition`, or its output folder)")
    return p


def read_pass_rates(path: str | Path) -> dict[str, PassRate]:
    """Per question id, its measurement; questions the partition skipped (no samples) are left out."""
    import pyarrow.parquet as pq

    p = stats_path(path)
    try:
        schema = pq.read_schema(p)
    except Exception as e:
        raise ConfigError(f"{p}: not a parquet file ({e})") from None
    missing = [c for c in _COLUMNS if c not in schema.names]
    if missing:
        raise ConfigError(f"{p}: no column {', '.join(missing)}: not a `curriculum partition` stats.parquet")
    table = pq.read_table(p, columns=list(_COLUMNS))
    out: dict[str, PassRate] = {}
    for i, row in enumerate(table.to_pylist()):
        if row["id"] is None:
            raise ConfigError(f"{p}: row {i} has no id")
        if row["n"] is None or row["c"] is None or not row["n"]:
            continue  # a skipped question: nothing measured
        if not 0 <= row["c"] <= row["n"]:
            raise ConfigError(f"{p}: row {i} (id {row['id']}): c = {row['c']} of n = {row['n']} samples")
        if row["id"] in out:
            raise ConfigError(f"{p}: id {row['id']} appears twice (rows {list(table['id'].to_pylist()).index(row['id'])}"
                              f" and {i})")
        out[str(row["id"])] = PassRate(str(row["id"]), row["level"], int(row["n"]), int(row["c"]))
    return out


@dataclass
class BandPlan:
    """The training order: dataset positions, and which question ids were deferred, skipped or not measured."""

    order: list[int]
    deferred: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    unmeasured: list[str] = field(default_factory=list)
    in_band: int = 0

    def summary(self) -> dict[str, Any]:
        return {"rows": len(self.order), "in_band": self.in_band, "deferred": len(self.deferred),
                "skipped": len(self.skipped), "unmeasured": len(self.unmeasured),
                "deferred_ids": self.deferred, "skipped_ids": self.skipped}


def band_order(ids: Sequence[str], rates: Mapping[str, PassRate], *, pass_min: float | None = None,
               pass_max: float | None = None, outside: str = "defer") -> BandPlan:
    """The rows in curriculum order with those outside ``[pass_min, pass_max]`` deferred behind the others (in
    their own curriculum order) or skipped; unmeasured rows keep their place."""
    if outside not in OUTSIDE:
        raise ConfigError(f"data.outside_band={outside!r}: one of {', '.join(OUTSIDE)}")
    lo = 0.0 if pass_min is None else float(pass_min)
    hi = 1.0 if pass_max is None else float(pass_max)
    if lo > hi:
        raise ConfigError(f"data.pass_min={lo:g} is above data.pass_max={hi:g}: the band is empty")
    plan = BandPlan(order=[])
    later: list[int] = []
    for pos, key in enumerate(ids):
        r = rates.get(str(key))
        if r is None:
            plan.unmeasured.append(str(key))
            plan.order.append(pos)
        elif lo <= r.rate <= hi:
            plan.in_band += 1
            plan.order.append(pos)
        elif outside == "defer":
            plan.deferred.append(str(key))
            later.append(pos)
        else:
            plan.skipped.append(str(key))
    plan.order += later
    return plan


def apply_pass_rates(dataset: Any, data: Any) -> tuple[Any, dict[str, Any]]:
    """The run's dataset in the pass-rate-aware order (``data``: the config's ``data`` section), and what was done
    (for the run's plan)."""
    rates = read_pass_rates(data.pass_rates)
    if "id" not in dataset.column_names:
        raise ConfigError(f"data.pass_rates: the rows of {data.shards} have no id column to join the pass rates on")
    ids = [str(x) for x in dataset["id"]]
    if not any(i in rates for i in ids):
        raise ConfigError(f"data.pass_rates={data.pass_rates}: none of the {len(ids)} rows' ids is in it (e.g. "
                          f"{ids[0]!r}); give the stats of a partition of these questions")
    summary: dict[str, Any] = {"file": str(stats_path(data.pass_rates))}
    if data.pass_min is None and data.pass_max is None:
        summary.update(measured=sum(i in rates for i in ids), rows=len(ids))
        return dataset, summary
    plan = band_order(ids, rates, pass_min=data.pass_min, pass_max=data.pass_max, outside=data.outside_band)
    summary.update(plan.summary(), band=[data.pass_min, data.pass_max], outside_band=data.outside_band)
    log.info("pass-rate band [%s, %s]: %d rows in band, %d %s, %d not measured (kept in place)",
             data.pass_min, data.pass_max, plan.in_band, len(plan.deferred or plan.skipped),
             "deferred behind them" if data.outside_band == "defer" else "skipped", len(plan.unmeasured))
    if not plan.order:
        raise ConfigError(f"data.pass_min/pass_max [{data.pass_min}, {data.pass_max}] with outside_band=skip leaves "
                          "no row to train on")
    if plan.order != list(range(len(ids))):
        dataset = dataset.select(plan.order)
    return dataset, summary


def warm_start(controller: Any, rows: Sequence[tuple[str, int]], rates: Mapping[str, PassRate]) -> dict[str, Any]:
    """Feed the partition's samples of the curriculum's questions (``rows``: id and top level K) to ``controller``
    as its first scored batch; returns what it did (for the log)."""
    seen: set[str] = set()
    results = []
    for key, K in rows:
        r = rates.get(key)
        if r is None or key in seen:
            continue
        seen.add(key)
        level = min(max(int(r.level or 1), 1), int(K))
        results.append(GroupResult(key, level, int(K), tuple([1.0] * r.c + [0.0] * (r.n - r.c))))
    if not results:
        raise ConfigError("adaptive.from_pass_rates: none of the curriculum's questions is in data.pass_rates")
    before = controller.target()
    success = controller.update(results)
    log.info("adaptive controller warm-started from %d measured questions (pass rate %.3f): target %.3g -> %.3g",
             len(results), success, before, controller.target())
    return {"questions": len(results), "success": success, "target_before": before, "target": controller.target()}
