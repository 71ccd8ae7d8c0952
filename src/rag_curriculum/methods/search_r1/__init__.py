"""The search agent as Search-R1 (Jin et al., PeterGriffinJin/Search-R1; docs/search-agents.md) trains and scores it:
its prompts and its rewards. The protocol itself (the ``<search>`` / ``<information>`` / ``<answer>`` tags, the
rollout loop, the retrievers) is the toolkit's search environment, shared by every search method
(:mod:`rag_curriculum.grammar`, :mod:`rag_curriculum.agents`).

* the prompts: :data:`SEARCH_R1_PROMPT` (agent and build template ``search-r1``) and
  :data:`SEARCH_R1_ORIGINAL_PROMPT` (``search-r1-original``, Search-R1's released ``make_prefix`` byte for byte),
  and the output formats of the same names (:func:`parse_search_answer`: the last ``<answer>`` block);
* the rewards of a search agent: :class:`SearchEmReward` (``"search-em"``, Search-R1's exact match of the last
  answer), ``"search-f1"``, ``"search-gold-found"``, ``"search-count"``;
* Search-R1's own reward bit for bit: :class:`SearchR1Reward` (``"search-r1"``: its ``qa_em``
  ``compute_score_em`` on the decoded prompt plus response), :func:`search_r1_score`, :func:`search_r1_breakdown`,
  :func:`search_r1_sequence`, :func:`search_r1_target`;
* the evaluation's side (``curriculum eval --agent search-r1 --reward search-r1``): :class:`SearchR1RewardPart`,
  the ``search-r1`` trajectory reward, and :func:`reward_scores` (every trajectory's score).

Importing this package registers the templates, the output formats, the rewards and the trajectory reward by name
(nothing loads until one is asked for).

>>> from rag_curriculum.prompts import get_agent_template
>>> get_agent_template("search-r1").render("Who wrote the Iliad?")[0]["content"][-30:]
'Question: Who wrote the Iliad?'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._agent_parts import TRAJECTORY_REWARDS
from ..._plumbing import lazy_exports
from ...prompts import AGENT_TEMPLATES, TEMPLATES
from ...rewards import FORMATS, register_reward

__getattr__, __dir__ = lazy_exports(__name__, globals())

if TYPE_CHECKING:  # for type checkers and IDEs; at run time these load on first use
    from ._agent_rewards import (
        SearchBreakdown,
        SearchCountReward,
        SearchEmReward,
        SearchF1Reward,
        SearchGoldFoundReward,
        from_environments,
    )
    from ._evaluation import SearchR1RewardPart, reward_scores
    from ._prompts import SEARCH_R1_ORIGINAL_PROMPT, SEARCH_R1_PROMPT, parse_search_answer
    from ._reward import (
        SearchR1Breakdown,
        SearchR1Reward,
        search_r1_breakdown,
        search_r1_score,
        search_r1_sequence,
        search_r1_target,
    )

for _name, _attr in (("search-r1", "SEARCH_R1"), ("search-r1-original", "SEARCH_R1_ORIGINAL")):
    AGENT_TEMPLATES.register(_name, f"{__name__}._prompts:{_attr}_TEMPLATE")
    TEMPLATES.register(_name, f"{__name__}._prompts:{_attr}_BUILD_TEMPLATE")
    FORMATS.register(_name, f"{__name__}._prompts:{_attr}_FORMAT")
# a search agent's EM, F1, and the retrieval signals
for _name, _cls in (("search-em", "SearchEmReward"), ("search-f1", "SearchF1Reward"),
                    ("search-gold-found", "SearchGoldFoundReward"), ("search-count", "SearchCountReward")):
    register_reward(_name, f"{__name__}._agent_rewards:{_cls}")
# Search-R1's own reward, bit for bit: its qa_em on prompt + response
register_reward("search-r1", f"{__name__}._reward:SearchR1Reward")
# and its part of `curriculum eval --agent search-r1 --reward search-r1`: every trajectory scored beside EM / F1
TRAJECTORY_REWARDS.register("search-r1", f"{__name__}._evaluation:REWARD")

__all__ = [
    "SEARCH_R1_ORIGINAL_PROMPT",
    "SEARCH_R1_PROMPT",
    "SearchBreakdown",
    "SearchCountReward",
    "SearchEmReward",
    "SearchF1Reward",
    "SearchGoldFoundReward",
    "SearchR1Breakdown",
    "SearchR1Reward",
    "SearchR1RewardPart",
    "from_environments",
    "parse_search_answer",
    "reward_scores",
    "search_r1_breakdown",
    "search_r1_score",
    "search_r1_sequence",
    "search_r1_target",
]
