"""The rewards verl loads, all in this one file: verl's custom reward functions for the toolkit's rewards.

Point verl at this file (it loads it by path, so the imports below are absolute) and name the function::

    python -m verl.trainer.main_ppo ... \\
        reward.custom_reward_function.path=$(python -m rag_curriculum.verl reward-path) \\
        reward.custom_reward_function.name=compute_score \\
        +reward.custom_reward_function.reward_kwargs.gamma_format=1.0

* :func:`compute_score`: RAG-RL (:class:`~rag_curriculum.rewards.RagRlReward`), on a curriculum's rows
  (``recipes/verl/run_grpo.sh``);
* :func:`compute_craft_score`: CRAFT without its judge (:class:`~rag_curriculum.methods.craft.CraftReward`), on rows built
  with a ``craft-v*`` template;
* :func:`compute_search_score`: Search-R1's exact match (or F1) of the last answer, on search-agent rows
  (``recipes/verl/run_search_r1.sh``), the toolkit's strict reading;
* :func:`compute_search_r1_score`: Search-R1's own reward bit for bit (its ``qa_em.compute_score_em`` on the decoded
  prompt plus response), with the reward manager that decodes as Search-R1's does
  (:class:`rag_curriculum.verl.reward_manager.SearchR1RewardManager`; ``REWARD=search-r1`` in
  ``recipes/verl/run_search_r1.sh``);
* :func:`compute_globalrag_score`: GlobalRAG's R(t), Eq. 7 (:class:`~rag_curriculum.methods.globalrag.GlobalRagReward`)
  (``recipes/verl/globalrag_grpo.sh``);
* :func:`compute_veritas_score`: VERITAS's Eq. 1 (:class:`~rag_curriculum.methods.veritas.VeritasReward`)
  (``recipes/verl/veritas_ppo.sh``).

verl calls each ``f(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)`` once per response, with
the row's ``reward_model.ground_truth`` and ``extra_info`` (a batch manager calls ``f(data_sources=,
solution_strs=, ground_truths=, extra_infos=, **reward_kwargs)`` and gets a list): the one signature every function
here has, made by :func:`verl_reward` around a scorer of the call's :class:`Responses`; the gold answers are read
by the toolkit's one reader (the toolkit's ``answers``, Search-R1's ``target``, FlashRAG's ``golden_answers``; none
is an error, never a 0).
``reward_kwargs`` (in the config) set the reward's options; the keyword arguments verl adds itself are ignored.
Each result is a dict: ``score`` (the total) plus every component and metric as a number (``acc`` is the exact
match, the metric for DAPO-style group filtering).

Loading this file loads the scoring code only: no generation backend, shard reader, retriever, pyarrow, numpy or
torch (``tests/verl_wing/test_reward_imports.py`` holds it); a judge's backend (VERITAS's, behind a server) or an
embedder (GlobalRAG's semantic term) is imported when a reward that uses one is built.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from rag_curriculum._metrics import answer_scores
from rag_curriculum.errors import ConfigError
from rag_curriculum.grammar import parse_trajectory
from rag_curriculum.methods.craft import CraftReward
from rag_curriculum.methods.globalrag import GlobalRagBreakdown, GlobalRagReward
from rag_curriculum.methods.search_r1 import search_r1_breakdown, search_r1_target
from rag_curriculum.methods.veritas import VeritasReward
from rag_curriculum.rewards import (  # each name loads its own module only (the rewards' lazy exports)
    RagRlReward,
    passage_labels,
    row_answerable,
    row_gold_labels,
    verl_answers,
)

__all__ = ["Responses", "StepClock", "compute_craft_score", "compute_globalrag_score", "compute_score",
           "compute_search_r1_score", "compute_search_score", "compute_veritas_score", "training_step",
           "verl_reward", "verl_segments"]

logger = logging.getLogger(__name__)


def _plain(value: Any) -> Any:
    """verl's ``reward_kwargs`` (OmegaConf containers) as plain dicts and lists."""
    if hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "__iter__") and not isinstance(value, (str, bytes)):
        return [_plain(v) for v in value]
    return value


# --- verl's call: the one signature of the compute_* family ------------------------------------------------------
class Responses:
    """What verl hands a reward function in one call: the responses (``solution_str``), each with its row's data
    source, ``reward_model.ground_truth`` and ``extra_info``, and whether they came as a batch. (A plain class: verl
    loads this file by path, without a ``sys.modules`` entry, where ``dataclass`` cannot read its annotations.)"""

    def __init__(self, data_sources: list[Any], texts: list[Any], truths: list[Any], infos: list[Any], *,
                 batch: bool = False) -> None:
        self.data_sources, self.texts, self.truths, self.infos, self.batch = data_sources, texts, truths, infos, batch

    def __iter__(self) -> Iterator[tuple[Any, Any, Any, Any]]:
        """(data_source, solution_str, ground_truth, extra_info) of each response."""
        return iter(zip(self.data_sources, self.texts, self.truths, self.infos, strict=True))


def verl_reward(score: Callable[..., list[dict[str, float]]]) -> Callable[..., Any]:
    """A reward function for verl made from ``score(responses, **reward_kwargs)`` (a :class:`Responses`, one result
    per response): the signature every ``compute_*`` of this file shares. verl's reward loop (its ``naive``
    manager) calls it one response at a time, ``f(data_source, solution_str, ground_truth, extra_info,
    **reward_kwargs)``, and gets that response's dict; a batch manager (verl's legacy reward workers, offline
    scoring) calls it ``f(data_sources=, solution_strs=, ground_truths=, extra_infos=, **reward_kwargs)`` and gets
    a list. ``reward_kwargs`` (the config's, and what a manager adds) go to ``score``."""

    def compute(data_source: Any = None, solution_str: Any = None, ground_truth: Any = None, extra_info: Any = None,
                *, data_sources: Sequence[Any] | None = None, solution_strs: Sequence[str] | None = None,
                ground_truths: Sequence[Any] | None = None, extra_infos: Sequence[Any] | None = None,
                **reward_kwargs: Any) -> dict[str, float] | list[dict[str, float]]:
        if solution_strs is None:
            responses = Responses([data_source], [solution_str], [ground_truth], [extra_info])
        else:
            n = len(solution_strs)
            responses = Responses(list(data_sources or [None] * n), list(solution_strs),
                                  list(ground_truths or [None] * n), list(extra_infos or [None] * n), batch=True)
        out = score(responses, **reward_kwargs)
        return out if responses.batch else out[0]

    compute.__name__ = compute.__qualname__ = score.__name__
    compute.__doc__ = score.__doc__
    return compute


# --- RAG-RL: compute_score -----------------------------------------------------------------------------------------
_RAG_RL_FIELDS = frozenset(RagRlReward.field_names())
#: Keywords verl's reward loop adds itself (with a reward model); ignored without a warning.
_VERL_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer", "model_name", "sampling_params",
                          "log_components"})
_warned: set[str] = set()


def _warn_unknown(kwargs: Mapping[str, Any]) -> None:
    """Report (once per name) a keyword that is neither a RagRlReward constant nor one verl adds: most likely a
    misspelt ``reward_kwargs`` entry, which would otherwise leave the default constant silently in place."""
    for k in kwargs:
        if k in _RAG_RL_FIELDS or k in _VERL_KWARGS or k in _warned:
            continue
        _warned.add(k)
        close = difflib.get_close_matches(k, sorted(_RAG_RL_FIELDS), n=1)
        logger.warning("compute_score: ignoring keyword %r (not a RagRlReward constant%s); constants: %s", k,
                       f"; did you mean {close[0]!r}?" if close else "", ", ".join(sorted(_RAG_RL_FIELDS)))


@functools.lru_cache(maxsize=64)
def _rag_rl_reward(items: tuple[tuple[str, Any], ...]) -> RagRlReward:
    return RagRlReward(**dict(items), log_components=False)


@verl_reward
def compute_score(responses: Responses, **kwargs: Any) -> list[dict[str, float]]:
    """The RAG-RL reward of one response for verl (``reward.custom_reward_function.name=compute_score``):
    ``{"score": total, "answer", "citation", "format", "acc", "answer_f1", "citation_precision", ...}``.

    ``ground_truth`` is the row's ``reward_model.ground_truth``, ``{"answers": [...], "gold_labels": [...],
    "answerable": bool}`` (a bare answer string or list is taken as the answers; a ground truth without
    ``answerable``, from shards built before it existed, is answerable); ``extra_info``'s ``labels``, when present,
    list every passage label. Keyword arguments named like :class:`~rag_curriculum.rewards.RagRlReward` fields
    (``reward_kwargs`` in the config) set the constants; the keyword arguments verl adds are ignored, and any other
    name is ignored with a warning (logged once: most likely a misspelt constant). ``acc`` is the exact match;
    ``abstained`` is 1 when the final answer is the abstention answer.

    >>> gt = {"answers": ["Paris"], "gold_labels": ["France"]}
    >>> y = "<reasoning></reasoning><answer>Final answer: Paris\\nSupporting passages: France</answer>"
    >>> out = compute_score("musique", y, gt)
    >>> out["score"], out["answer"], out["citation"], out["format"], out["acc"]
    (11.0, 5.0, 5.0, 1.0, 1.0)
    """
    if kwargs:
        _warn_unknown(kwargs)
    options = tuple(sorted((k, v) for k, v in kwargs.items() if k in _RAG_RL_FIELDS and k != "log_components"))
    reward = _rag_rl_reward(options)
    return [_rag_rl_score(reward, *response) for response in responses]


def _rag_rl_score(reward: RagRlReward, data_source: Any, solution_str: Any, ground_truth: Any,
                  extra_info: Any) -> dict[str, float]:
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


# --- CRAFT: compute_craft_score ----------------------------------------------------------------------------------
_CRAFT_OPTIONS = ("output_format", "terms", "weights", "normalize")


@functools.lru_cache(maxsize=64)
def _craft_reward(options: str) -> Any:
    return CraftReward(**json.loads(options), log_components=False)


@verl_reward
def compute_craft_score(responses: Responses, **kwargs: Any) -> list[dict[str, float]]:
    """The CRAFT reward for verl (``reward.custom_reward_function.name=compute_craft_score``) on rows built with a
    ``craft-v*`` template: ``{"score": total, "format", "answer", "evidence", "boundary", "acc", ...}``.

    ``reward_kwargs`` set :class:`~rag_curriculum.methods.craft.CraftReward`'s options (``output_format``, default
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
    return [_craft_score(reward, *response) for response in responses]


def _craft_score(reward: Any, data_source: Any, solution_str: Any, ground_truth: Any,
                 extra_info: Any) -> dict[str, float]:
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


# --- Search-R1: compute_search_score ----------------------------------------------------------------------------
@verl_reward
def compute_search_score(responses: Responses, **kwargs: Any) -> list[dict[str, float]]:
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
    out = []
    for data_source, solution_str, ground_truth, extra_info in responses:
        answers = verl_answers(ground_truth, data_source, extra_info)
        parsed = parse_trajectory(solution_str or "")
        em, f1 = answer_scores(parsed.answer, answers) if parsed.answer and answers else (0.0, 0.0)
        out.append({
            "score": em if metric == "em" else f1,
            "acc": em,
            "f1": f1,
            "answered": float(parsed.answer is not None),
            "searches": float(len(parsed.of("search"))),
        })
    return out


# --- Search-R1's own reward: compute_search_r1_score ----------------------------------------------------------
@verl_reward
def compute_search_r1_score(responses: Responses, *, prompt_str: str | None = None, format_score: float = 0.0,
                            score: float = 1.0, **kwargs: Any) -> list[dict[str, float]]:
    """Search-R1's own reward (``search-r1``, :mod:`rag_curriculum.methods.search_r1`) for verl:
    ``compute_score_em(prompt_str + solution_str, ground_truth, format_score, score)`` of its ``qa_em.py``, bit for
    bit. The result: ``score``, ``acc`` (the extracted answer matched a gold answer), ``extracted`` (an answer was
    read: two ``<answer>`` matches at least) and ``from_prompt`` (the answer read was the prompt's own example).

    Search-R1 scores the prompt and the response decoded together, special tokens kept; verl's own managers hand a
    reward the response alone (``skip_special_tokens``), so this function needs ``prompt_str``, which
    :class:`rag_curriculum.verl.reward_manager.SearchR1RewardManager` passes (it decodes as Search-R1's manager
    does): called without it, it refuses rather than score the response alone (where a single ``<answer>`` is no
    answer). The gold answers: ``ground_truth["target"]`` as it is (the rows the toolkit builds carry it, as
    Search-R1's data files do), else the toolkit's ``answers``; none is an error naming the row.

    >>> p = "<|im_start|>user\\nAnswer inside <answer> and </answer>, e.g. <answer> Beijing </answer>.<|im_end|>\\n"
    >>> compute_search_r1_score("nq", "<answer> Paris </answer><|im_end|>", {"target": ["Paris"]}, prompt_str=p)
    {'score': 1.0, 'acc': 1.0, 'extracted': 1.0, 'from_prompt': 0.0}
    >>> compute_search_r1_score("nq", "<think>?</think>", {"target": ["Paris"]}, prompt_str=p, format_score=0.1)
    {'score': 0.1, 'acc': 0.0, 'extracted': 1.0, 'from_prompt': 1.0}
    """
    if prompt_str is None:
        raise ConfigError("compute_search_r1_score scores the prompt and the response decoded together, as "
                          "Search-R1's reward manager does, and verl's manager handed it the response alone",
                          hint="set reward.reward_manager.source=importlib, reward.reward_manager.name="
                               "SearchR1RewardManager and reward.reward_manager.module.path=$(python -m "
                               "rag_curriculum.verl reward-manager-path) (REWARD=search-r1 bash "
                               "recipes/verl/run_search_r1.sh sets them)")
    if responses.batch:
        raise ConfigError("compute_search_r1_score scores one response at a time: its reward manager hands it each "
                          "response's prompt_str", hint="use SearchR1RewardManager (REWARD=search-r1 bash "
                          "recipes/verl/run_search_r1.sh), which calls it per response")
    ((data_source, solution_str, ground_truth, extra_info),) = responses
    where = f"data_source {data_source!r}"
    if isinstance(extra_info, Mapping) and extra_info.get("index") is not None:
        where += f", extra_info.index {extra_info.get('index')}"
    target = search_r1_target({"ground_truth": ground_truth}, where=where)
    text = prompt_str + (solution_str or "")
    b = search_r1_breakdown(text, target, response_start=len(prompt_str), format_score=float(format_score),
                            score=float(score))
    return [{"score": b.score, "acc": b.exact_match, "extracted": float(b.answer is not None),
             "from_prompt": float(b.from_prompt)}]


# --- VERITAS: compute_veritas_score -----------------------------------------------------------------------------
_VERITAS_FIELDS = frozenset(VeritasReward.field_names())
_SEARCH_BLOCK = re.compile(r"<search>.*?</search>", re.DOTALL)


def verl_segments(solution_str: str, information_tag: str = "tool_response") -> list[dict[str, str]]:
    """The response as the toolkit's rollout records it: the model's text and the environment's ``<information>``
    blocks (each ``<information_tag>`` block of the rendered response).

    >>> [s["source"] for s in verl_segments("<search>q</search>\\nuser\\n<tool_response>\\nx\\n</tool_response>\\nassistant\\n<answer>a</answer>")]
    ['model', 'env', 'model']
    """
    pattern = re.compile(rf"<{re.escape(information_tag)}>(.*?)</{re.escape(information_tag)}>", re.DOTALL)
    out: list[dict[str, str]] = []
    pos = 0
    for m in pattern.finditer(solution_str or ""):
        out.append({"source": "model", "text": solution_str[pos : m.start()]})
        out.append({"source": "env", "text": f"<information>{m.group(1).strip()}</information>"})
        pos = m.end()
    out.append({"source": "model", "text": (solution_str or "")[pos:]})
    return [s for s in out if s["text"]]



@functools.lru_cache(maxsize=16)
def _veritas_reward(options: str) -> VeritasReward:
    return VeritasReward(**json.loads(options), log_components=False)


def _veritas_scores(
    reward: VeritasReward, texts: Sequence[str], truths: Sequence[Any], tag: str
) -> list[dict[str, float]]:
    trajs = [{"segments": verl_segments(t, tag)} for t in texts]
    answers = [verl_answers(g) for g in truths]
    out = []
    for text, b in zip(texts, reward.components(list(texts), answers, trajectory=trajs), strict=True):
        d = {
            "score": b.total,
            "acc": b.em,
            "em": b.em,
            "f1": b.f1,
            "think_answer": b.think_answer,
            "answered": b.answered,
            "searches": float(len(_SEARCH_BLOCK.findall(text or ""))),
            "info_think_pairs": b.info_think_pairs,
            "judge_failures": b.judge_failures,
            "missing_blocks": b.missing_blocks,
            "no_search": float(b.no_search),
        }
        if b.info_think is not None:
            d["info_think"] = b.info_think
        if b.think_search is not None:
            d["think_search"] = b.think_search
        out.append({k: float(v) for k, v in d.items()})
    return out


@verl_reward
def compute_veritas_score(responses: Responses, *, information_tag: str = "tool_response",
                          **kwargs: Any) -> list[dict[str, float]]:
    """VERITAS's reward (Eq. 1) for verl: ``{"score": total, "em", "info_think", "think_answer", ...}`` per response
    (a list for a batch), for the paper's PPO run on verl's multi-turn agent loop (``recipes/verl/veritas_ppo.sh``;
    docs/veritas.md). ``ground_truth``: ``{"answers": [...]}`` or the answers themselves.

    Called one response at a time (verl 0.9.1's reward loop and its ``naive`` manager, which the recipe uses:
    ``compute_veritas_score(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)``; the reward loop
    registers no ``batch`` manager) or a batch at a time (``data_sources=``, ``solution_strs=``, ``ground_truths=``,
    ``extra_infos=``, as a batch manager of verl's legacy reward workers or your own calls it), which sends the judge
    one batched request for all the responses' pairs. ``reward_kwargs`` are
    :class:`~rag_curriculum.methods.veritas.VeritasReward`'s fields (``weights``, ``judge`` with
    :class:`~rag_curriculum.methods.veritas.VeritasJudge`'s, ``aggregate``, ...), e.g.
    ``+reward.custom_reward_function.reward_kwargs.judge.backend=openai``,
    ``...judge.model=veritas-rm``, ``...judge.backend_args.base_url=http://HOST:8001/v1``.

    verl renders a tool's answer through the chat template, not inline: in the decoded response the passages of a
    search stand between ``<tool_response>`` and ``</tool_response>`` (Qwen2.5's template; ``information_tag`` names
    another wrapper), with the template's role words around them. Those blocks are read as the ``<information>``
    blocks of Search-R1's protocol (:func:`verl_segments`); an ``<information>`` block the model wrote itself is
    dropped (a forged retrieval).

    >>> y = ("<think>Who directed Jaws?</think><search>Jaws director</search>\\nuser\\n<tool_response>\\nDoc 1(Title: "
    ...      "Jaws) Jaws was directed by Steven Spielberg.\\n</tool_response>\\nassistant\\n<think>It is Steven "
    ...      "Spielberg.</think><answer>Steven Spielberg</answer>")
    >>> out = compute_veritas_score("nq", y, {"answers": ["Steven Spielberg"]}, weights={"info_think": 0.0})
    >>> out["score"], out["em"], out["think_answer"], out["searches"]
    (0.92, 1.0, 1.0, 1.0)
    """
    options = json.dumps(
        {k: _plain(v) for k, v in kwargs.items() if k in _VERITAS_FIELDS and k != "log_components"}, sort_keys=True
    )
    reward = _veritas_reward(options)
    texts = responses.texts if responses.batch else [t or "" for t in responses.texts]
    return _veritas_scores(reward, texts, responses.truths, information_tag)


# --- GlobalRAG: compute_globalrag_score --------------------------------------------------------------------------
_GLOBALRAG_FIELDS = frozenset(f.name for f in dataclasses.fields(GlobalRagReward)) - {"log_components"}
STEP_KEYS = ("global_step", "global_steps", "step")


class StepClock:
    """The training step of a row drawn in curriculum order: ``step_offset + epochs x steps + index // B``, the
    epochs counted by this process each time the indices start again (a row more than one step behind the latest
    one seen)."""

    def __init__(self) -> None:
        self.base = 0
        self.last = -1
        self.lock = threading.Lock()

    def __call__(self, index: int, prompts_per_step: int) -> int:
        s = int(index) // int(prompts_per_step)
        with self.lock:
            if self.last >= 0 and s < self.last - 1:
                self.base += self.last + 1
                self.last = s
            else:
                self.last = max(self.last, s)
            return self.base + s


_CLOCKS: dict[int, StepClock] = {}
#: verl's reward loop calls the function from an executor's threads: one scoring at a time per process (the
#: reward's caches are not thread-safe; the work holds the GIL anyway).
_SCORING = threading.Lock()


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def training_step(extra_info: Mapping[str, Any] | None, *, step: Any = None, prompts_per_step: Any = None,
                  step_offset: Any = 0) -> float:
    """The step t of w_t for one response (see "The training step" in the module docstring)."""
    info = extra_info if isinstance(extra_info, Mapping) else {}
    for key in STEP_KEYS:
        t = _number(info.get(key))
        if t is not None:
            return t
    t = _number(step)
    if t is not None:
        return t
    if prompts_per_step is not None:
        b = _number(prompts_per_step)
        index = _number(info.get("index"))
        if b is None or b < 1:
            raise ConfigError(f"prompts_per_step={prompts_per_step!r}: a positive number of prompts (verl's "
                              "data.train_batch_size)")
        if index is None:
            raise ConfigError(f"prompts_per_step is set but the row's extra_info has no 'index' (keys: "
                              f"{sorted(info)})", hint="give verl the curriculum's rows (python -m "
                              "rag_curriculum.verl agent-data), or set step= or extra_info.global_step")
        clock = _CLOCKS.setdefault(int(b), StepClock())
        return float(clock(int(index), int(b)) + (_number(step_offset) or 0.0))
    raise ConfigError("the GlobalRAG reward needs the training step t of its weight w_t, and verl does not pass it "
                      "to reward functions",
                      hint="set reward_kwargs.prompts_per_step to data.train_batch_size (rows in curriculum order), "
                           "reward_kwargs.step to a fixed step, or put global_step in the rows' extra_info")



@functools.lru_cache(maxsize=16)
def _globalrag_reward(options: str) -> GlobalRagReward:
    return GlobalRagReward(**json.loads(options), log_components=False)


def _row(b: GlobalRagBreakdown, t: float) -> dict[str, float]:
    return {"score": b.total, "acc": b.answer, "form": b.form, "structure": b.structure, "semantic": b.semantic,
            "sub_answers": b.step, "weight": b.weight, "train_step": t, "matched": float(b.matched),
            "gold_nodes": float(b.gold_nodes), "has_gold_plan": float(b.has_gold)}


def _globalrag_scores(reward: GlobalRagReward, texts: Sequence[str], truths: Sequence[Any], infos: Sequence[Any],
            tag: str, step_options: Mapping[str, Any]) -> list[dict[str, float]]:
    infos = [i if isinstance(i, Mapping) else {} for i in infos]
    steps = [training_step(i, **step_options) for i in infos]
    texts = ["".join(s["text"] for s in verl_segments(t or "", tag)) for t in texts]
    answers = [verl_answers(g, None, i) for g, i in zip(truths, infos, strict=True)]
    gold = [i.get("gold_plan") for i in infos]  # checked by the reward: one that is not a plan is an error
    sids = [i.get("source_id") for i in infos]
    ids = [i.get("id") for i in infos]
    out: list[dict[str, float] | None] = [None] * len(texts)
    for t in dict.fromkeys(steps):  # one batched call per step (one step in a training batch)
        rows = [k for k, s in enumerate(steps) if s == t]
        with _SCORING:
            got = reward.components([texts[k] for k in rows], [answers[k] for k in rows],
                                    gold_plan=[_plain(gold[k]) for k in rows], source_id=[sids[k] for k in rows],
                                    id=[ids[k] for k in rows], step=t)
        for k, b in zip(rows, got, strict=True):
            out[k] = {key: float(v) for key, v in _row(b, t).items()}
    return out  # type: ignore[return-value]


@verl_reward
def compute_globalrag_score(responses: Responses, *, information_tag: str = "tool_response", step: Any = None,
                            prompts_per_step: Any = None, step_offset: Any = 0,
                            **kwargs: Any) -> list[dict[str, float]]:
    """GlobalRAG's R(t) (:class:`~rag_curriculum.methods.globalrag.GlobalRagReward`, Eq. 7) for verl: ``{"score": R(t),
    "acc": R_answ, "form", "structure", "semantic", "sub_answers" (R_step), "weight" (w_t), "train_step" (t), ...}``
    per response (a list for a batch), for GlobalRAG's GRPO run on verl's multi-turn agent loop
    (``recipes/verl/globalrag_grpo.sh``; docs/globalrag.md). ``ground_truth``: ``{"answers": [...]}`` or the
    answers themselves.

    verl's signature, ``compute_globalrag_score(data_source, solution_str, ground_truth, extra_info,
    **reward_kwargs)`` (verl 0.9.1's reward loop calls it one response at a time, through its ``naive`` manager), or
    a batch at a time (``data_sources=``, ``solution_strs=``, ``ground_truths=``, ``extra_infos=``, as verl's legacy
    ``batch`` manager and offline scoring call it). ``reward_kwargs`` are :class:`GlobalRagReward`'s fields
    (``plans``, ``embedder``, ``T``, ``alpha`` ...) and the step options below, e.g.
    ``+reward.custom_reward_function.reward_kwargs.plans=plans/musique-train.jsonl`` and
    ``...reward_kwargs.prompts_per_step=256``. One reward object per set of options lives in each reward worker, so
    its caches (distances and matchings per pair of plan structures, each sub-question embedded once) serve every
    response the worker scores.

    **The gold plan** of a response: ``extra_info["gold_plan"]`` (a plan dict) when the row carries one, else the
    plan file ``plans`` looked up by ``extra_info["source_id"]``, then ``extra_info["id"]`` (the curriculum rows
    carry the example's id there).

    **The training step t of w_t.** verl 0.9.1 does not pass its global step to reward functions (the reward loop
    sees the row's ``extra_info`` only), so t is, in this order (:func:`training_step`):

    1. ``extra_info["global_step"]`` (or ``global_steps``, ``step``) where the data or an agent loop puts it;
    2. ``step=N`` in reward_kwargs: a fixed step (e.g. ``step=0`` for the start of training, or any step to score
       offline with that step's weight);
    3. ``prompts_per_step=B`` (the recipe sets it to ``data.train_batch_size``): the curriculum's rows reach verl in
       order (``data.shuffle=False``), so the row at ``extra_info["index"]`` i is drawn at step ``i // B``; a worker
       that sees the indices start again counts one more epoch. ``step_offset`` adds a number of steps (set it when
       resuming from a checkpoint). With validation on (``trainer.test_freq``), validation rows would count as
       training rows: the recipe keeps validation off, as ``run_search_r1.sh`` does;
    4. none of these: an error saying so (never a silent w_0).

    verl renders a tool's answer through the chat template: the passages stand between ``<tool_response>`` and
    ``</tool_response>`` in the decoded response (``information_tag`` names another wrapper); they are read as the
    ``<information>`` blocks of the protocol (:func:`verl_segments`).

    >>> plan = {"nodes": [{"placeholder": "#1", "question": "Who directed Jaws?", "answer": "Steven Spielberg"}],
    ...         "edges": []}
    >>> y = ('<think>plan</think><plan>{"Q1": ["Who directed Jaws?", "#1"]}</plan><subPlan><search>Jaws director'
    ...      '</search>\\nuser\\n<tool_response>\\nDoc 1(Title: Jaws) by Steven Spielberg.\\n</tool_response>\\nassistant\\n'
    ...      '<subAnswer>#1 = Steven Spielberg</subAnswer></subPlan><answer>Steven Spielberg</answer>')
    >>> out = compute_globalrag_score("musique", y, {"answers": ["Steven Spielberg"]}, {"gold_plan": plan},
    ...                               embedder="hash", step=45)
    >>> out["weight"], out["form"], out["structure"], round(out["semantic"], 6), out["sub_answers"], out["acc"]
    (0.5, 1.0, 1.0, 1.0, 1.0, 1.0)
    >>> round(out["score"], 6)   # 0.5 x (0.1 + 0.5 + 0.5 + 0.5) + 1
    1.8
    """
    options = json.dumps({k: _plain(v) for k, v in kwargs.items() if k in _GLOBALRAG_FIELDS}, sort_keys=True,
                         default=str)
    reward = _globalrag_reward(options)
    step_options = {"step": step, "prompts_per_step": prompts_per_step, "step_offset": step_offset}
    texts = responses.texts if responses.batch else [t or "" for t in responses.texts]
    return _globalrag_scores(reward, texts, responses.truths, responses.infos, information_tag, step_options)
