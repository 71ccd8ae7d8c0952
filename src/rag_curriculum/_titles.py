"""The names and order of a report's cells: the paper's titles for datasets, settings and metrics, the order of
datasets and settings, and the (setting, dataset, model) cells of a summary. Shared by the report, its plots, the
outcome sections and CRAFT's table (:mod:`rag_curriculum.methods.craft`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

_DATASET_TITLES = {"hotpotqa": "HotpotQA", "musique": "MuSiQue", "2wikimultihopqa": "2Wiki"}
_SETTING_TITLES = {"distractor": "Distractor", "ideal": "Ideal Retrieval", "retrieved": "Retrieved"}
_METRIC_TITLES = {"answer_f1": "Answer F1", "citation_f1": "Citation F1", "joint_f1": "Joint F1",
                  "joint_f1_per_sample": "Joint F1 (per sample)", "exact_match": "EM",
                  "citation_precision": "Citation P", "citation_recall": "Citation R", "format_valid": "Valid format"}
MAIN_METRICS = ("answer_f1", "citation_f1", "joint_f1")


def dataset_title(name: str) -> str:
    """The name the paper's tables use for a dataset.

    >>> dataset_title("2wikimultihopqa"), dataset_title("mine")
    ('2Wiki', 'mine')
    """
    return _DATASET_TITLES.get(name, name)


def setting_title(name: str) -> str:
    return _SETTING_TITLES.get(name, name)


def metric_title(name: str) -> str:
    return _METRIC_TITLES.get(name, name)


def _dataset_order(names: Iterable[str]) -> list[str]:
    known = list(_DATASET_TITLES)
    return sorted(set(names), key=lambda n: (known.index(n) if n in known else len(known), n))


def _setting_order(names: Iterable[str]) -> list[str]:
    known = list(_SETTING_TITLES)
    return sorted(set(names), key=lambda n: (known.index(n) if n in known else len(known), n))


def _models(evals: Sequence[Mapping[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for e in evals:
        seen.setdefault(e["model"], None)
    return list(seen)


def _models_at(evals: Sequence[Mapping[str, Any]], idx: Mapping[tuple[str, str, str], Any], setting: str,
               datasets: Iterable[str]) -> list[str]:
    """The models (in the order they were given) evaluated in ``setting`` on any of ``datasets`` (``idx``:
    :func:`_index` of ``evals``)."""
    datasets = list(datasets)
    return [m for m in _models(evals) if any((m, d, setting) in idx for d in datasets)]


def _cells(evals: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, str, str, Mapping[str, Any]]]:
    """``(setting, dataset, model, entry)`` for every evaluation in the report's order: settings, then datasets,
    then models in the order they were given; combinations that were not evaluated are skipped."""
    idx = _index(evals)
    for setting in _setting_order(e["setting"] for e in evals):
        for d in _dataset_order(e["dataset"] for e in evals):
            for model in _models(evals):
                e = idx.get((model, d, setting))
                if e is not None:
                    yield setting, d, model, e


def pct(x: float | None) -> str:
    """A fraction as the paper prints it: x 100, two decimals.

    >>> pct(0.73301), pct(None)
    ('73.30', '–')
    """
    return "–" if x is None else f"{100 * x:.2f}"


def _index(evals: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], Mapping[str, Any]]:
    return {(e["model"], e["dataset"], e["setting"]): e for e in evals}
