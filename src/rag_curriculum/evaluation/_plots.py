"""Plots of a summary (PNG, matplotlib's Agg backend): models side by side, overall (with the 95% intervals as
error bars) and by number of hops, and joint F1 against the difficulty level. Every function reads a summary only (see :mod:`._report`) and hands
the numbers to the toolkit's plotting module (:mod:`rag_curriculum._plots`), which draws them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._plots import bar_panels, plot_lines
from .._titles import (
    MAIN_METRICS,
    _dataset_order,
    _index,
    _models_at,
    _setting_order,
    dataset_title,
    metric_title,
    setting_title,
)

__all__ = ["plot_by_hops", "plot_by_level", "plot_overview", "write_plots"]


def plot_overview(summary: Mapping[str, Any], setting: str, path: Path) -> Path:
    """Answer / citation / joint F1 of every model on every dataset of one evaluation setting."""
    evals = summary["evals"]
    idx = _index(evals)
    datasets = _dataset_order(e["dataset"] for e in evals if e["setting"] == setting)
    models = _models_at(evals, idx, setting, datasets)

    def series(metric: str) -> dict[str, list[float | None]]:
        return {m: [idx[(m, d, setting)]["overall"][metric] if (m, d, setting) in idx else None for d in datasets]
                for m in models}

    def intervals(metric: str) -> dict[str, list[tuple[float, float] | None]]:
        return {m: [_interval(idx.get((m, d, setting)), metric) for d in datasets] for m in models}

    return _panels([dataset_title(d) for d in datasets], series, title=f"{setting_title(setting)} setting",
                   xlabel="dataset", path=path, errors_of=intervals)


def _interval(entry: Mapping[str, Any] | None, metric: str) -> tuple[float, float] | None:
    ci = ((entry or {}).get("intervals") or {}).get(metric)
    return (float(ci[0]), float(ci[1])) if ci else None


def _panels(groups: Sequence[str], series_of: Any, *, title: str, xlabel: str, path: Path,
            errors_of: Any = None) -> Path:
    """One panel per main metric, ``series_of(metric)``'s models as grouped bars over ``groups``, with
    ``errors_of(metric)``'s 95% intervals as error bars when given."""
    return bar_panels(groups, [(metric_title(m), series_of(m)) for m in MAIN_METRICS], title=title, xlabel=xlabel,
                      path=path, errors=[errors_of(m) for m in MAIN_METRICS] if errors_of else None)


def plot_by_hops(summary: Mapping[str, Any], dataset: str, setting: str, path: Path) -> Path | None:
    """F1 by number of hops (the paper's Table 10 as a picture), models side by side."""
    idx = _index(summary["evals"])
    models = _models_at(summary["evals"], idx, setting, [dataset])
    hops: dict[str, None] = {}
    for m in models:
        for h in idx[(m, dataset, setting)].get("by_hops") or {}:
            hops.setdefault(h, None)
    if not hops:
        return None
    groups = sorted(hops, key=lambda h: int(h) if h.isdigit() else 1 << 30)

    def series(metric: str) -> dict[str, list[float | None]]:
        out = {}
        for m in models:
            b = idx[(m, dataset, setting)].get("by_hops") or {}
            out[m] = [b[h][metric] if h in b else None for h in groups]
        return out

    return _panels([f"{h}-hop" for h in groups], series, xlabel="hops", path=path,
                   title=f"{dataset_title(dataset)}, {setting_title(setting).lower()} setting: F1 by hops")


def plot_by_level(summary: Mapping[str, Any], dataset: str, setting: str, path: Path) -> Path | None:
    """Joint F1 against the difficulty level of the rows, one line per model (only with two or more levels)."""
    idx = _index(summary["evals"])
    models = _models_at(summary["evals"], idx, setting, [dataset])
    levels = sorted({int(lv) for m in models for lv in idx[(m, dataset, setting)].get("by_level") or {}})
    if len(levels) < 2:
        return None
    lines = {}
    for m in models:
        b = idx[(m, dataset, setting)].get("by_level") or {}
        xs = [lv for lv in levels if str(lv) in b]
        lines[m] = (xs, [b[str(lv)]["joint_f1"] for lv in xs])
    plot_lines(lines, path, xlabel="difficulty level l", ylabel="joint F1 (x 100)",
               title=f"{dataset_title(dataset)}, {setting_title(setting).lower()} setting: joint F1 by level")
    return path


def write_plots(summary: Mapping[str, Any], directory: str | Path) -> list[Path]:
    """Every plot of a summary into ``directory``: ``overview-<setting>.png``,
    ``by_hops-<dataset>-<setting>.png`` and ``by_level-<dataset>-<setting>.png``; returns the paths written."""
    d = Path(directory)
    evals = summary["evals"]
    written: list[Path] = []
    for setting in _setting_order(e["setting"] for e in evals):
        written.append(plot_overview(summary, setting, d / f"overview-{setting}.png"))
        for dataset in _dataset_order(e["dataset"] for e in evals if e["setting"] == setting):
            for fn, stem in ((plot_by_hops, "by_hops"), (plot_by_level, "by_level")):
                p = fn(summary, dataset, setting, d / f"{stem}-{dataset}-{setting}.png")
                if p is not None:
                    written.append(p)
    return written
