"""Plots of a summary (PNG, matplotlib's Agg backend): models side by side, overall and by number of hops,
and joint F1 against the difficulty level. Every function reads a summary only (see :mod:`._report`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._plumbing import atomic_write_with
from ._report import (
    MAIN_METRICS,
    _dataset_order,
    _index,
    _models,
    _setting_order,
    dataset_title,
    metric_title,
    setting_title,
)

__all__ = ["plot_by_hops", "plot_by_level", "plot_overview", "write_plots"]

_COLORS = ("#3465a4", "#f57900", "#4e9a06", "#cc0000", "#75507b", "#c4a000", "#06989a", "#555753")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_with(path, lambda tmp: fig.savefig(tmp, format="png", metadata={"Software": None}))


def _grouped_bars(ax: Any, groups: Sequence[str], series: Mapping[str, Sequence[float | None]]) -> None:
    n = max(len(series), 1)
    width = 0.8 / n
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        ys = [100 * v if v is not None else 0.0 for v in values]
        bars = ax.bar(xs, ys, width=width, label=name, color=_COLORS[i % len(_COLORS)])
        for b, v in zip(bars, values, strict=True):
            if v is None:
                b.set_alpha(0.0)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_ylim(0, 100)
    ax.grid(axis="y", alpha=0.3)


def _panels(groups: Sequence[str], series_of: Any, *, title: str, xlabel: str, path: Path) -> Path:
    plt = _plt()
    fig, axes = plt.subplots(1, len(MAIN_METRICS), figsize=(3.3 * len(MAIN_METRICS), 3.1), dpi=100, sharey=True)
    for ax, metric in zip(axes, MAIN_METRICS, strict=True):
        _grouped_bars(ax, groups, series_of(metric))
        ax.set_title(metric_title(metric), fontsize=10)
        ax.set_xlabel(xlabel)
    axes[0].set_ylabel("score (x 100)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), frameon=False, fontsize=9)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    _save(fig, path)
    plt.close(fig)
    return path


def plot_overview(summary: Mapping[str, Any], setting: str, path: Path) -> Path:
    """Answer / citation / joint F1 of every model on every dataset of one evaluation setting."""
    evals = summary["evals"]
    idx = _index(evals)
    datasets = _dataset_order(e["dataset"] for e in evals if e["setting"] == setting)
    models = [m for m in _models(evals) if any((m, d, setting) in idx for d in datasets)]

    def series(metric: str) -> dict[str, list[float | None]]:
        return {m: [idx[(m, d, setting)]["overall"][metric] if (m, d, setting) in idx else None for d in datasets]
                for m in models}

    return _panels([dataset_title(d) for d in datasets], series, title=f"{setting_title(setting)} setting",
                   xlabel="dataset", path=path)


def plot_by_hops(summary: Mapping[str, Any], dataset: str, setting: str, path: Path) -> Path | None:
    """F1 by number of hops (the paper's Table 10 as a picture), models side by side."""
    idx = _index(summary["evals"])
    models = [m for m in _models(summary["evals"]) if (m, dataset, setting) in idx]
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
    models = [m for m in _models(summary["evals"]) if (m, dataset, setting) in idx]
    levels = sorted({int(lv) for m in models for lv in idx[(m, dataset, setting)].get("by_level") or {}})
    if len(levels) < 2:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    for i, m in enumerate(models):
        b = idx[(m, dataset, setting)].get("by_level") or {}
        xs = [lv for lv in levels if str(lv) in b]
        ax.plot(xs, [100 * b[str(lv)]["joint_f1"] for lv in xs], marker="o", label=m,
                color=_COLORS[i % len(_COLORS)])
    ax.set_xlabel("difficulty level l")
    ax.set_ylabel("joint F1 (x 100)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    ax.set_title(f"{dataset_title(dataset)}, {setting_title(setting).lower()} setting: joint F1 by level",
                 fontsize=10)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
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
