"""Every plot the toolkit writes, in one place: matplotlib on its Agg backend, one PNG writer, and the drawings of
the build card (levels against curriculum index), the partition card (pass-rate histogram), the adaptive and
dynamic-sampling training runs, and the bars and lines of an evaluation summary. Each takes plain numbers or
records (the callers turn their manifests, logs and summaries into them); matplotlib is imported inside the
functions, on first use (it is heavy), so importing this module costs nothing.

The public names stay where the docs show them (``cards.plot_levels``, ``train.adaptive.plot_levels``,
``train._dynamic.plot_dynamic``, ``evaluation.write_plots`` ...): they are this module's functions, or call them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ._plumbing import atomic_write_with

__all__ = [
    "COLORS",
    "bar_panels",
    "plot_adaptive_levels",
    "plot_build_levels",
    "plot_dynamic",
    "plot_informative",
    "plot_histogram",
    "plot_lines",
    "pyplot",
    "save_png",
]

#: The colours of the evaluation plots' series, in order (Tango).
COLORS = ("#3465a4", "#f57900", "#4e9a06", "#cc0000", "#75507b", "#c4a000", "#06989a", "#555753")


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend. Its first import leaves garbage reference cycles that hold the
    frames of its callers, locals included (pyparsing keeps the exceptions it raised, with their tracebacks): a
    long job imports it through this before it holds its data (see ``build_curriculum``), else a 90k-row build's
    rows stay alive after it returns, and the collection that frees them costs seconds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` as a PNG, atomically (its folder made if missing), with no ``Software`` tag (the
    bytes depend on the data and matplotlib's version only), and close it."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        atomic_write_with(out, lambda tmp: fig.savefig(tmp, format="png", metadata={"Software": None}))
    finally:
        pyplot().close(fig)
    return out


# -- cards ----------------------------------------------------------------------------------------------------------
def plot_build_levels(levels: Sequence[int], path: str | Path, *, title: str,
                      shown: Sequence[int] | None = None, short: Sequence[tuple[int, int]] = ()) -> Path:
    """Level of each row against its curriculum index (the paper's Figure 2, for this build); with ``shown`` (the
    level each row shows as built: lower where its question had fewer distractors than its level asks for), that
    too, dashed, as the mean over each run of one level (a capped level's flat stretch is the difficulty it lost);
    ``short``: ``(curriculum_index, level shown)`` of the rows short of their level, each drawn as a marker."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=110)
    # A step line through the points where the level changes (a few per schedule, even for 100k rows); an
    # unordered curriculum (shuffled) is drawn as a thinned scatter instead.
    starts = [i for i, lv in enumerate(levels) if i == 0 or lv != levels[i - 1]]
    capped = shown is not None and list(shown) != list(levels)
    if len(starts) <= 2000:
        if levels:
            xs = [i + 1 for i in starts] + [len(levels)]
            ys = [levels[i] for i in starts] + [levels[-1]]
            ax.step(xs, ys, where="post", linewidth=1.4, color="#3465a4",
                    label="level (schedule)" if capped else None)
            if capped:
                ends = [*starts[1:], len(levels)]
                means = [sum(shown[a:b]) / (b - a) for a, b in zip(starts, ends, strict=True)]
                ax.step(xs, [*means, means[-1]], where="post", linewidth=1.4, color="#f57900", ls="--",
                        label="level as built (distractors shown)")
    else:
        step = max(1, len(levels) // 5000)
        ax.scatter(range(1, len(levels) + 1, step), levels[::step], s=1, color="#3465a4",
                   label="level (schedule)" if capped else None)
        if capped:
            ax.scatter(range(1, len(levels) + 1, step), list(shown)[::step], s=1, color="#f57900",
                       label="level as built (distractors shown)")
    if short:  # each row far short of its level, where it is: a level's mean line would hide it
        ax.plot([i + 1 for i, _ in short], [lv for _, lv in short], ls="none", marker="v", markersize=5,
                color="#cc0000", label="row short of its level (level it shows)")
    if capped or short:
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel("row index i (training order)")
    ax.set_ylabel("difficulty level l")
    ax.set_title(title)
    if levels:
        ax.set_ylim(0, max(levels) + 1)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_png(fig, path)


def plot_histogram(values: Sequence[float], path: str | Path, *, title: str, xlabel: str, bins: int = 20) -> Path:
    """A histogram of values in [0, 1] (the partition card's pass rates)."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=110)
    ax.hist(list(values), bins=bins, range=(0, 1), color="#4e9a06", edgecolor="white")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("questions")
    ax.set_title(title)
    fig.tight_layout()
    return save_png(fig, path)


# -- training runs --------------------------------------------------------------------------------------------------
def plot_adaptive_levels(records: Sequence[Mapping[str, Any]], path: str | Path, *, K: int, title: str = "",
                         success_range: tuple[float, float] | None = None,
                         p_range: tuple[float, float] | None = None) -> Path:
    """Level (target and mean shown) and success against step, as a PNG (``success_range``: the success axis,
    e.g. (0, 1) for exact match; None: from the data). ``records``: ``curriculum_levels.jsonl``'s. With
    ``p_range`` (a search agent's withholding curriculum), the withholding probability p (``p_target``,
    ``p_mean``) is drawn on a p axis over that range instead of a level."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    steps = [r["step"] for r in records]
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    what, lo, hi = ("level", 0.5, K + 0.5) if p_range is None else ("p", *p_range)
    if p_range is not None:
        pad = (max(hi - lo, 1e-9)) * 0.05
        lo, hi = lo - pad, hi + pad
    ax.plot(steps, [r[f"{what}_target"] for r in records], label=f"{what} target", color="tab:blue")
    ax.plot(steps, [r[f"{what}_mean"] for r in records], label=f"{what} shown (mean)", color="tab:blue", ls="--",
            marker=".")
    ax.set_xlabel("step")
    ax.set_ylabel("level" if p_range is None else "withholding probability p")
    ax.set_ylim(lo, hi)
    ax2 = ax.twinx()
    ax2.plot(steps, [r["success"] if r["success"] is not None and not math.isnan(r["success"]) else None
                     for r in records], label="success", color="tab:orange", marker=".")
    ax2.set_ylabel("success")
    if success_range is not None:
        pad = (success_range[1] - success_range[0]) * 0.05
        ax2.set_ylim(success_range[0] - pad, success_range[1] + pad)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if p_range is None:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper left", fontsize=8)
    ax.set_title(title or "adaptive curriculum", fontsize=10)
    fig.tight_layout()
    return save_png(fig, path)


def plot_dynamic(records: Sequence[Mapping[str, Any]], path: str | Path, *, title: str = "") -> Path:
    """Per step: the informative fraction of the groups generated and of the groups trained, the refills, and the
    rows retired so far, as a PNG (beside ``curriculum_levels.png``). ``records``: ``curriculum_dynamic.jsonl``'s."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    steps = [r["step"] for r in records]
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    ax.plot(steps, [r["informative_groups"] / max(r["generated_groups"], 1) for r in records],
            label="informative / generated", color="tab:blue", marker=".")
    ax.plot(steps, [r["trained_fraction_informative"] for r in records], label="informative / trained",
            color="tab:green", marker=".")
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("step")
    ax.set_ylabel("fraction of groups")
    ax2 = ax.twinx()
    ax2.bar(steps, [r["refills"] for r in records], alpha=0.25, color="tab:orange", label="refills")
    ax2.plot(steps, [r["retired_total"] for r in records], color="tab:red", ls="--", label="rows retired (total)")
    ax2.set_ylabel("refills / rows")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax2.yaxis.set_major_locator(MaxNLocator(integer=True))
    lines, lines2 = ax.get_legend_handles_labels(), ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="lower left", fontsize=8)
    ax.set_title(title or "dynamic sampling", fontsize=10)
    fig.tight_layout()
    return save_png(fig, path)


def plot_informative(summary: Mapping[str, Any], path: str | Path) -> Path:
    """A run's informative fraction against the level profile's prediction (``informative.json``): per step (left),
    and per level with the prediction's 95% interval and the measured Wilson interval (right)."""
    plt = pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=110)
    steps = summary["per_step"]
    xs = [s["step"] for s in steps]
    ax.plot(xs, [s["measured"] for s in steps], color=COLORS[0], marker=".", label="measured")
    ax.plot(xs, [s["predicted"] for s in steps], color=COLORS[1], ls="--", label="predicted")
    if steps and "refreshed" in steps[0]:
        ax.plot(xs, [s["refreshed"] for s in steps], color=COLORS[2], ls=":", label="refreshed")
    for w in summary["windows"]:
        if w.get("groups") and not w["inside"]:
            ax.axvspan(w["steps"][0] - 0.5, w["steps"][1] + 0.5, color=COLORS[3], alpha=0.08)
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("step")
    ax.set_ylabel("informative groups")
    ax.legend(fontsize=8, frameon=False)
    ax.set_title("per step (shaded: a quarter outside the prediction)", fontsize=9)
    levels = [lv for lv, c in summary["per_level"].items() if c.get("groups")]
    for i, lv in enumerate(levels):
        c = summary["per_level"][lv]
        lo, hi = c["predicted_interval"]
        bx.bar(i, hi - lo, bottom=lo, width=0.5, color=COLORS[1], alpha=0.3, label="predicted 95%" if i == 0 else None)
        mlo, mhi = c["measured_interval"]
        bx.errorbar([i], [c["measured"]], yerr=[[c["measured"] - mlo], [mhi - c["measured"]]], color=COLORS[0],
                    marker="o", capsize=4, label="measured (Wilson 95%)" if i == 0 else None)
    bx.set_xticks(range(len(levels)))
    bx.set_xticklabels([f"level {lv}" for lv in levels], fontsize=8)
    bx.set_ylim(-0.05, 1.05)
    bx.legend(fontsize=8, frameon=False)
    bx.set_title(f"per level, groups of {summary['group_size']}", fontsize=9)
    fig.tight_layout()
    return save_png(fig, path)


# -- evaluation summaries -------------------------------------------------------------------------------------------
def _grouped_bars(ax: Any, groups: Sequence[str], series: Mapping[str, Sequence[float | None]],
                  errors: Mapping[str, Sequence[tuple[float, float] | None]] | None = None) -> None:
    n = max(len(series), 1)
    width = 0.8 / n
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        ys = [100 * v if v is not None else 0.0 for v in values]
        bars = ax.bar(xs, ys, width=width, label=name, color=COLORS[i % len(COLORS)])
        spans = (errors or {}).get(name)
        if spans:  # an interval [low, high] around each bar that has one: black error bars
            have = [(x, y, s) for x, y, s, v in zip(xs, ys, spans, values, strict=True) if s and v is not None]
            if have:
                ax.errorbar([h[0] for h in have], [h[1] for h in have], fmt="none", ecolor="black", elinewidth=0.8,
                            capsize=2, yerr=[[max(h[1] - 100 * h[2][0], 0.0) for h in have],
                                             [max(100 * h[2][1] - h[1], 0.0) for h in have]])
        for b, v in zip(bars, values, strict=True):
            if v is None:
                b.set_alpha(0.0)
        # every bar's value above it, zeros included: a bar of 0 is otherwise indistinguishable from no result
        ax.bar_label(bars, labels=[f"{100 * v:.1f}" if v is not None else "" for v in values], fontsize=7,
                     padding=1)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_ylim(0, 110)  # room for the label of a bar at 100
    ax.set_yticks(range(0, 101, 20))
    ax.grid(axis="y", alpha=0.3)


def bar_panels(groups: Sequence[str], panels: Sequence[tuple[str, Mapping[str, Sequence[float | None]]]], *,
               title: str, xlabel: str, path: str | Path, ylabel: str = "score (x 100)",
               errors: Sequence[Mapping[str, Sequence[tuple[float, float] | None]]] | None = None) -> Path:
    """One panel per ``(panel title, {series name: a score in [0, 1] or None per group})``, side by side, the
    series as grouped bars (x 100; None: no bar), each bar's value above it, one legend below them. ``errors``
    (one per panel: ``{series name: (low, high) in [0, 1] or None per group}``) draws each interval as an error
    bar."""
    plt = pyplot()
    width = max(3.3 * len(panels), 0.075 * len(title) + 1.0)  # the title fits however few panels there are
    fig, grid = plt.subplots(1, len(panels), figsize=(width, 3.1), dpi=100, sharey=True, squeeze=False)
    axes = grid[0]
    for k, (ax, (panel_title, series)) in enumerate(zip(axes, panels, strict=True)):
        _grouped_bars(ax, groups, series, errors[k] if errors else None)
        ax.set_title(panel_title, fontsize=10)
        ax.set_xlabel(xlabel)
    axes[0].set_ylabel(ylabel)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), frameon=False, fontsize=9)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return save_png(fig, path)


def plot_lines(lines: Mapping[str, tuple[Sequence[float], Sequence[float]]], path: str | Path, *, title: str,
               xlabel: str, ylabel: str) -> Path:
    """One line per ``{name: (xs, scores in [0, 1])}`` (x 100), in the series colours."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    for i, (name, (xs, ys)) in enumerate(lines.items()):
        ax.plot(list(xs), [100 * y for y in ys], marker="o", label=name, color=COLORS[i % len(COLORS)])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return save_png(fig, path)
