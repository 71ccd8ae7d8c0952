"""Data cards: a ``README.md`` with Hugging Face dataset-card front matter, statistics, the command that made
the data, and plots (PNG, written beside the card)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .loaders import get_loader


def licenses_for(sources: Iterable[str]) -> list[str]:
    """The licences the rows inherit from their source datasets (one per source, deduplicated, sorted)."""
    return sorted({get_loader(s).license for s in sources})


def size_category(n: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return name
    return "n>1M"


#: The card's ``configs`` pattern: the shards under ``data/`` (the Hugging Face layout; ``datasets`` sorts the
#: matched files by name, which is curriculum order).
DATA_FILES = "data/*.parquet"


def hub_ids(sources: Iterable[str]) -> list[str]:
    """The Hub dataset ids of the source datasets (``source_datasets`` in the card), as the loaders download them."""
    return sorted({get_loader(s).hub_path for s in sources})


def front_matter(*, sources: Sequence[str], num_rows: int, pretty_name: str, tags: Sequence[str] = ()) -> str:
    lic = licenses_for(sources)
    lines = ["---"]
    if len(lic) == 1:
        lines.append(f"license: {lic[0]}")
    else:
        lines.append("license:")
        lines += [f"- {x}" for x in lic]
    lines += ["language:", "- en", "task_categories:", "- question-answering", "tags:"]
    lines += [f"- {t}" for t in ("rag", "multi-hop-qa", "curriculum-learning", "grpo", *tags)]
    lines += ["size_categories:", f"- {size_category(num_rows)}", "source_datasets:"]
    lines += [f"- {x}" for x in hub_ids(sources)]
    lines += [f"pretty_name: {pretty_name}", "configs:", "- config_name: default", "  data_files:",
              "  - split: train", f"    path: {DATA_FILES}", "---", ""]
    return "\n".join(lines)


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    return "\n".join(out)


def plot_levels(levels: Sequence[int], path: Path, *, title: str) -> None:
    """Level of each row against its curriculum index (the paper's Figure 2, for this build)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=110)
    # A step line through the points where the level changes (a few per schedule, even for 100k rows); an
    # unordered curriculum (shuffled) is drawn as a thinned scatter instead.
    xs: list[int] = []
    ys: list[int] = []
    for i, lv in enumerate(levels, 1):
        if not ys or lv != ys[-1]:
            xs.append(i)
            ys.append(lv)
    if len(xs) <= 2000:
        if levels:
            xs.append(len(levels))
            ys.append(levels[-1])
        ax.step(xs, ys, where="post", linewidth=1.4, color="#3465a4")
    else:
        step = max(1, len(levels) // 5000)
        ax.scatter(range(1, len(levels) + 1, step), levels[::step], s=1, color="#3465a4")
    ax.set_xlabel("row index i (training order)")
    ax.set_ylabel("difficulty level l")
    ax.set_title(title)
    if levels:
        ax.set_ylim(0, max(levels) + 1)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def plot_histogram(values: Sequence[float], path: Path, *, title: str, xlabel: str, bins: int = 20) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=110)
    ax.hist(list(values), bins=bins, range=(0, 1), color="#4e9a06", edgecolor="white")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("questions")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
