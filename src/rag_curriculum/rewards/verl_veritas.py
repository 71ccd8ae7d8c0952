"""verl adapter: the VERITAS reward (Eq. 1) as verl's custom reward function, for the paper's PPO run on verl's
multi-turn agent loop (``recipes/verl/veritas_ppo.sh``; docs/veritas.md). verl loads this file by path, so the
imports below are absolute.

    python -m verl.trainer.main_ppo ... reward.reward_manager.name=naive \\
        reward.custom_reward_function.path=$(python -c "import rag_curriculum.rewards.verl_veritas as m; print(m.__file__)") \\
        reward.custom_reward_function.name=compute_veritas_score \\
        +reward.custom_reward_function.reward_kwargs.judge.backend=openai \\
        +reward.custom_reward_function.reward_kwargs.judge.model=veritas-rm \\
        +reward.custom_reward_function.reward_kwargs.judge.backend_args.base_url=http://HOST:8001/v1

Called one response at a time (verl 0.9.1's reward loop and its ``naive`` manager, which the recipe uses:
``compute_veritas_score(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)``; the reward loop
registers no ``batch`` manager) or a batch at a time (``data_sources=``, ``solution_strs=``, ``ground_truths=``,
``extra_infos=``, as a batch manager of verl's legacy reward workers or your own calls it), which sends the judge one
batched request for all the responses' pairs. ``reward_kwargs`` are :class:`~rag_curriculum.rewards._veritas.VeritasReward`'s
fields (``weights``, ``judge`` with :class:`~rag_curriculum.rewards._veritas.VeritasJudge`'s, ``aggregate``, ...);
the keyword arguments verl adds itself are ignored.

verl renders a tool's answer through the chat template, not inline: in the decoded response the passages of a
search stand between ``<tool_response>`` and ``</tool_response>`` (Qwen2.5's template; ``information_tag`` names
another wrapper), with the template's role words around them. Those blocks are read as the ``<information>`` blocks
of Search-R1's protocol; an ``<information>`` block the model wrote itself is dropped (a forged retrieval).

>>> y = ("<think>Who directed Jaws?</think><search>Jaws director</search>\\nuser\\n<tool_response>\\nDoc 1(Title: "
...      "Jaws) Jaws was directed by Steven Spielberg.\\n</tool_response>\\nassistant\\n<think>It is Steven "
...      "Spielberg.</think><answer>Steven Spielberg</answer>")
>>> out = compute_veritas_score("nq", y, {"answers": ["Steven Spielberg"]}, weights={"info_think": 0.0})
>>> out["score"], out["em"], out["think_answer"], out["searches"]
(0.92, 1.0, 1.0, 1.0)
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from typing import Any

from rag_curriculum.rewards._columns import verl_answers
from rag_curriculum.rewards._veritas import VeritasReward

__all__ = ["compute_veritas_score", "verl_segments"]

_FIELDS = frozenset(VeritasReward.field_names())
_SEARCH = re.compile(r"<search>.*?</search>", re.DOTALL)


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


def _plain(value: Any) -> Any:
    """verl's ``reward_kwargs`` (OmegaConf containers) as plain dicts and lists."""
    if hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "__iter__") and not isinstance(value, (str, bytes)):
        return [_plain(v) for v in value]
    return value


@functools.lru_cache(maxsize=16)
def _reward(options: str) -> VeritasReward:
    return VeritasReward(**json.loads(options), log_components=False)


def _scores(
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
            "searches": float(len(_SEARCH.findall(text or ""))),
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


def compute_veritas_score(
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
    **kwargs: Any,
) -> dict[str, float] | list[dict[str, float]]:
    """VERITAS for verl: ``{"score": total, "em", "info_think", "think_answer", ...}`` per response (a list for a
    batch). ``ground_truth``: ``{"answers": [...]}`` or the answers themselves."""
    options = json.dumps(
        {k: _plain(v) for k, v in kwargs.items() if k in _FIELDS and k != "log_components"}, sort_keys=True
    )
    reward = _reward(options)
    if solution_strs is not None:
        return _scores(
            reward, list(solution_strs), list(ground_truths or [None] * len(solution_strs)), information_tag
        )
    return _scores(reward, [solution_str or ""], [ground_truth], information_tag)[0]
