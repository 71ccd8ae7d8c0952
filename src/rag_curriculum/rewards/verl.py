"""verl adapter: the RAG-RL reward as verl's custom reward function.

Point verl at this file (it loads it by path, so the imports below are absolute)::

    python -m verl.trainer.main_ppo ... \\
        reward.custom_reward_function.path=$(python -c "import rag_curriculum.rewards.verl as m; print(m.__file__)") \\
        reward.custom_reward_function.name=compute_score \\
        +reward.custom_reward_function.reward_kwargs.gamma_format=1.0

verl calls ``compute_score(data_source, solution_str, ground_truth, extra_info)`` once per response, with the
row's ``reward_model.ground_truth`` (``{"answers": [...], "gold_labels": [...], "answerable": bool}``; a
ground truth without ``answerable``, from shards built before it existed, is answerable) and ``extra_info`` (whose
``labels``, when present, list every passage label). Keyword arguments named like :class:`RagRlReward` fields
(``reward_kwargs`` in the config) set the constants; the keyword arguments verl adds are ignored, and any other
name is ignored with a warning (logged once: most likely a misspelt constant). The result
is a dict: ``score`` (the total) plus every component and metric as a number (``acc`` is the exact match, the raw
metric to use for DAPO-style group filtering; ``abstained`` is 1 when the final answer is the abstention answer).

>>> gt = {"answers": ["Paris"], "gold_labels": ["France"]}
>>> out = compute_score("musique", "<reasoning></reasoning><answer>Final answer: Paris\\nSupporting passages: France</answer>", gt)
>>> out["score"], out["answer"], out["citation"], out["format"], out["acc"]
(11.0, 5.0, 5.0, 1.0, 1.0)
"""

from __future__ import annotations

import difflib
import functools
import json
import logging
from collections.abc import Mapping
from typing import Any

from rag_curriculum._metrics import answer_scores
from rag_curriculum.agents._searchr1 import parse_trajectory
from rag_curriculum.errors import ConfigError
from rag_curriculum.rewards._columns import passage_labels, row_answerable, row_gold_labels, verl_answers
from rag_curriculum.rewards._craft import CraftReward
from rag_curriculum.rewards._rag_rl import RagRlReward

__all__ = ["compute_craft_score", "compute_score", "compute_search_score"]

logger = logging.getLogger(__name__)

_FIELDS = frozenset(RagRlReward.field_names())
#: Keywords verl's reward loop adds itself (with a reward model); ignored without a warning.
_VERL_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer", "model_name", "sampling_params",
                          "log_components"})
_warned: set[str] = set()


def _warn_unknown(kwargs: Mapping[str, Any]) -> None:
    """Report (once per name) a keyword that is neither a RagRlReward constant nor one verl adds: most likely a
    misspelt ``reward_kwargs`` entry, which would otherwise leave the default constant silently in place."""
    for k in kwargs:
        if k in _FIELDS or k in _VERL_KWARGS or k in _warned:
            continue
        _warned.add(k)
        close = difflib.get_close_matches(k, sorted(_FIELDS), n=1)
        logger.warning("compute_score: ignoring keyword %r (not a RagRlReward constant%s); constants: %s", k,
                       f"; did you mean {close[0]!r}?" if close else "", ", ".join(sorted(_FIELDS)))


@functools.lru_cache(maxsize=64)
def _reward(items: tuple[tuple[str, Any], ...]) -> RagRlReward:
    return RagRlReward(**dict(items), log_components=False)


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """Score one response for verl: ``{"score": total, "answer": ..., "citation": ..., "format": ..., ...}``.

    ``ground_truth`` is ``{"answers", "gold_labels"}`` (a bare answer string or list is taken as the answers).
    """
    if kwargs:
        _warn_unknown(kwargs)
    options = tuple(sorted((k, v) for k, v in kwargs.items() if k in _FIELDS and k != "log_components"))
    reward = _reward(options)
    gt = ground_truth if isinstance(ground_truth, Mapping) else {"answers": ground_truth}
    answers = verl_answers(ground_truth, data_source, extra_info)
    b = reward.score(solution_str, answers, row_gold_labels(gt.get("gold_labels")), passage_labels(None, extra_info),
                     answerable=row_answerable(gt.get("answerable")))
    return {
        "score": b.total,
        "answer": b.answer,
        "citation": b.citation,
        "format": b.format,
        "acc": b.exact_match,
        "answer_f1": b.answer_f1,
        "citation_precision": b.citation_precision,
        "citation_recall": b.citation_recall,
        "citation_f1": b.citation_f1,
        "num_incorrect": float(b.num_incorrect),
        "format_valid": float(b.format_valid),
        "abstained": float(b.abstained),
    }


_CRAFT_OPTIONS = ("output_format", "terms", "weights", "normalize")


@functools.lru_cache(maxsize=64)
def _craft_reward(options: str) -> Any:
    return CraftReward(**json.loads(options), log_components=False)


def compute_craft_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """The CRAFT reward for verl (``reward.custom_reward_function.name=compute_craft_score``) on rows built with a
    ``craft-v*`` template: ``{"score": total, "format", "answer", "evidence", "boundary", "acc", ...}``.

    ``reward_kwargs`` set :class:`~rag_curriculum.rewards._craft.CraftReward`'s options (``output_format``, default
    ``craft-v1``; ``terms``; ``weights``; ``normalize``); verl's own keywords are ignored. The judge term is not
    available here: verl hands a reward one response without the row's passages (train with TRL for R_faith).

    >>> gt = {"answers": ["Paris"], "gold_labels": ["2"]}
    >>> y = "<plan>p</plan><gold_docs>[2]</gold_docs><reason>doc [2]</reason><answer>Paris</answer>"
    >>> out = compute_craft_score("musique", y, gt)
    >>> out["score"], out["format"], out["evidence"], out["answer"], out["acc"]
    (3.0, 1.0, 1.0, 1.0, 1.0)
    """
    if kwargs.get("judge") is not None:
        raise ConfigError("compute_craft_score has no judge: verl gives a reward one response without the row's "
                          "passages", hint="drop reward_kwargs.judge, or train with TRL (rewards: craft with judge)")
    reward = _craft_reward(json.dumps({k: v for k, v in kwargs.items() if k in _CRAFT_OPTIONS}, sort_keys=True))
    gt = ground_truth if isinstance(ground_truth, Mapping) else {"answers": ground_truth}
    b = reward.score(solution_str, verl_answers(ground_truth, data_source, extra_info),
                     row_gold_labels(gt.get("gold_labels")),
                     answerable=row_answerable(gt.get("answerable")))  # <gold_docs>[] is right on an unanswerable row
    return {
        "score": b.total,
        "format": b.format,
        "answer": b.answer,
        "evidence": float(b.evidence or 0.0),
        "boundary": float(b.boundary or 0.0),
        "acc": b.exact_match,
        "answer_f1": b.answer_f1,
        "format_valid": float(b.format_valid),
    }


def compute_search_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """A search agent's reward for verl (``reward.custom_reward_function.name=compute_search_score``; the launch
    script ``recipes/verl/run_search_r1.sh`` sets it): Search-R1's exact match of the *last* ``<answer>`` block
    (``search-em``), or its token F1 with ``reward_kwargs.metric=f1``. The result: ``score``, ``acc`` (the exact
    match: the metric for DAPO-style group filtering), ``f1``, ``answered`` and ``searches`` (the well-formed
    ``<search>`` blocks of the response). Whether a search found a gold passage is the search tool's metric
    (``gold_found``), not the reward's: verl hands a reward the text alone.

    >>> y = "<think>t</think><search>q</search>Doc 1(Title: x) y<answer> Paris </answer>"
    >>> out = compute_search_score("musique", y, {"answers": ["Paris"]})
    >>> out["score"], out["acc"], out["searches"]
    (1.0, 1.0, 1.0)
    >>> compute_search_score("musique", "<answer>the city of Paris</answer>", ["Paris"], metric="f1")["score"]
    0.5
    """
    metric = kwargs.get("metric", "em")
    if metric not in ("em", "f1"):
        raise ConfigError(f"compute_search_score: metric={metric!r}; choose em or f1",
                          hint="set +reward.custom_reward_function.reward_kwargs.metric=em|f1")
    answers = verl_answers(ground_truth, data_source, extra_info)
    parsed = parse_trajectory(solution_str or "")
    em, f1 = answer_scores(parsed.answer, answers) if parsed.answer and answers else (0.0, 0.0)
    return {
        "score": em if metric == "em" else f1,
        "acc": em,
        "f1": f1,
        "answered": float(parsed.answer is not None),
        "searches": float(len(parsed.of("search"))),
    }
