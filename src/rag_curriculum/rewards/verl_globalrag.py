"""verl adapter: GlobalRAG's reward R(t) (:class:`~rag_curriculum.rewards._globalrag.GlobalRagReward`, Eq. 7) as
verl's custom reward function, for GlobalRAG's GRPO run on verl's multi-turn agent loop
(``recipes/verl/globalrag_grpo.sh``; docs/globalrag.md). verl loads this file by path, so the imports below are
absolute.

    python -m verl.trainer.main_ppo ... \\
        reward.custom_reward_function.path=$(python -c "import rag_curriculum.rewards.verl_globalrag as m; print(m.__file__)") \\
        reward.custom_reward_function.name=compute_globalrag_score \\
        +reward.custom_reward_function.reward_kwargs.plans=plans/musique-train.jsonl \\
        +reward.custom_reward_function.reward_kwargs.prompts_per_step=256

verl's signature, ``compute_globalrag_score(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)``
(verl 0.9.1's reward loop calls it one response at a time, through its ``naive`` manager), or a batch at a time
(``data_sources=``, ``solution_strs=``, ``ground_truths=``, ``extra_infos=``, as verl's legacy ``batch`` manager
and offline scoring call it). ``reward_kwargs`` are :class:`GlobalRagReward`'s fields (``plans``, ``embedder``,
``T``, ``alpha`` ...) and the step options below; the keyword arguments verl adds itself are ignored. One reward
object per set of options lives in each reward worker, so its caches (distances and matchings per pair of plan
structures, each sub-question embedded once) serve every response the worker scores.

**The gold plan** of a response: ``extra_info["gold_plan"]`` (a plan dict) when the row carries one, else the plan
file ``plans`` looked up by ``extra_info["source_id"]``, then ``extra_info["id"]`` (the curriculum rows carry the
example's id there).

**The training step t of w_t.** verl 0.9.1 does not pass its global step to reward functions (the reward loop
sees the row's ``extra_info`` only), so t is, in this order:

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
``<information>`` blocks of the protocol (:func:`~rag_curriculum.rewards.verl_veritas.verl_segments`).

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

from __future__ import annotations

import dataclasses
import functools
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from rag_curriculum.errors import ConfigError
from rag_curriculum.rewards._columns import verl_answers
from rag_curriculum.rewards._globalrag import GlobalRagBreakdown, GlobalRagReward
from rag_curriculum.rewards.verl_veritas import verl_segments

__all__ = ["StepClock", "compute_globalrag_score", "training_step"]

_FIELDS = frozenset(f.name for f in dataclasses.fields(GlobalRagReward)) - {"log_components"}
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
                              "rag_curriculum.agents.verl_data), or set step= or extra_info.global_step")
        clock = _CLOCKS.setdefault(int(b), StepClock())
        return float(clock(int(index), int(b)) + (_number(step_offset) or 0.0))
    raise ConfigError("the GlobalRAG reward needs the training step t of its weight w_t, and verl does not pass it "
                      "to reward functions",
                      hint="set reward_kwargs.prompts_per_step to data.train_batch_size (rows in curriculum order), "
                           "reward_kwargs.step to a fixed step, or put global_step in the rows' extra_info")


def _plain(value: Any) -> Any:
    """verl's ``reward_kwargs`` (OmegaConf containers) as plain dicts and lists."""
    if hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "__iter__") and not isinstance(value, (str, bytes)):
        return [_plain(v) for v in value]
    return value


@functools.lru_cache(maxsize=16)
def _reward(options: str) -> GlobalRagReward:
    return GlobalRagReward(**json.loads(options), log_components=False)


def _row(b: GlobalRagBreakdown, t: float) -> dict[str, float]:
    return {"score": b.total, "acc": b.answer, "form": b.form, "structure": b.structure, "semantic": b.semantic,
            "sub_answers": b.step, "weight": b.weight, "train_step": t, "matched": float(b.matched),
            "gold_nodes": float(b.gold_nodes), "has_gold_plan": float(b.has_gold)}


def _scores(reward: GlobalRagReward, texts: Sequence[str], truths: Sequence[Any], infos: Sequence[Any],
            tag: str, step_options: Mapping[str, Any]) -> list[dict[str, float]]:
    infos = [i if isinstance(i, Mapping) else {} for i in infos]
    steps = [training_step(i, **step_options) for i in infos]
    texts = ["".join(s["text"] for s in verl_segments(t or "", tag)) for t in texts]
    answers = [verl_answers(g, None, i) for g, i in zip(truths, infos, strict=True)]
    gold = [i.get("gold_plan") if isinstance(i.get("gold_plan"), Mapping) else None for i in infos]
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


def compute_globalrag_score(
    data_source: Any = None,
    solution_str: Any = None,
    ground_truth: Any = None,
    extra_info: Any = None,
    *,
    data_sources: Sequence[Any] | None = None,
    solution_strs: Sequence[str] | None = None,
    ground_truths: Sequence[Any] | None = None,
    extra_infos: Sequence[Any] | None = None,
    information_tag: str = "tool_response",
    step: Any = None,
    prompts_per_step: Any = None,
    step_offset: Any = 0,
    **kwargs: Any,
) -> dict[str, float] | list[dict[str, float]]:
    """GlobalRAG's R(t) for verl: ``{"score": R(t), "acc": R_answ, "form", "structure", "semantic",
    "sub_answers" (R_step), "weight" (w_t), "train_step" (t), ...}`` per response (a list for a batch).
    ``ground_truth``: ``{"answers": [...]}`` or the answers themselves."""
    options = json.dumps({k: _plain(v) for k, v in kwargs.items() if k in _FIELDS}, sort_keys=True, default=str)
    reward = _reward(options)
    step_options = {"step": step, "prompts_per_step": prompts_per_step, "step_offset": step_offset}
    if solution_strs is not None:
        n = len(solution_strs)
        return _scores(reward, list(solution_strs), list(ground_truths or [None] * n),
                       list(extra_infos or [None] * n), information_tag, step_options)
    return _scores(reward, [solution_str or ""], [ground_truth], [extra_info], information_tag, step_options)[0]
