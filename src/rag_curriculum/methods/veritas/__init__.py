"""VERITAS (Xu et al., "Beyond Correctness: Rewarding Faithful Reasoning in Retrieval-Augmented Generation";
docs/veritas.md): the faithfulness of a Search-R1 trajectory as metrics and as the reward of Eq. 1, and the
faithfulness columns of the search-agent evaluation (``curriculum eval --agent search-r1 --faithfulness veritas``).

* the reward, :class:`VeritasReward` (``"veritas"``: 0.9 EM + 0.05 Info-Think + 0.02 Think-Answer, with
  ``"veritas-em"``, ``"veritas-info-think"``, ``"veritas-think-answer"``, ``"veritas-think-search"``), its judge
  :class:`VeritasJudge` (appendix B's prompts :data:`THINK_SEARCH_PROMPT` and :data:`INFO_THINK_PROMPT` through a
  generation backend), :func:`trajectory_pairs`, :func:`think_answer`, :func:`agreement` and :func:`read_labels`,
  and :func:`lexical_judge` (a word-overlap stand-in judge for CPU smoke runs, not the paper's);
* the evaluation's side: :func:`veritas_entry` (a set's scores), :func:`veritas_table` and
  :func:`render_veritas_table` (the paper's Table 6 layout), :func:`check_config` (the ``--faithfulness`` settings),
  and :class:`VeritasMeasure`, the ``veritas`` faithfulness measure that puts them together.

Importing this package registers the rewards and the faithfulness measure by name (nothing loads until one is
asked for).

>>> from rag_curriculum.rewards import REWARDS
>>> REWARDS.get("veritas").__module__
'rag_curriculum.methods.veritas._reward'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._agent_parts import FAITHFULNESS_MEASURES
from ..._plumbing import lazy_exports
from ...rewards import register_reward

__getattr__, __dir__ = lazy_exports(__name__, globals())

if TYPE_CHECKING:  # for type checkers and IDEs; at run time these load on first use
    from ._evaluation import (
        FAITHFULNESS,
        VeritasMeasure,
        check_config,
        render_veritas_table,
        veritas_entry,
        veritas_table,
    )
    from ._reward import (
        INFO_THINK_PROMPT,
        THINK_SEARCH_PROMPT,
        VeritasBreakdown,
        VeritasJudge,
        VeritasReward,
        agreement,
        lexical_judge,
        pair_records,
        read_labels,
        think_answer,
        trajectory_pairs,
    )

# Eq. 1's total and each term
for _name, _cls in (("veritas", "VeritasReward"), ("veritas-em", "VeritasEmReward"),
                    ("veritas-info-think", "VeritasInfoThinkReward"),
                    ("veritas-think-answer", "VeritasThinkAnswerReward"),
                    ("veritas-think-search", "VeritasThinkSearchReward")):
    register_reward(_name, f"{__name__}._reward:{_cls}")
# its part of `curriculum eval --agent search-r1 --faithfulness veritas`: scores, judge pairs and veritas.md
FAITHFULNESS_MEASURES.register("veritas", f"{__name__}._evaluation:MEASURE")

__all__ = [
    "FAITHFULNESS",
    "INFO_THINK_PROMPT",
    "THINK_SEARCH_PROMPT",
    "VeritasBreakdown",
    "VeritasJudge",
    "VeritasMeasure",
    "VeritasReward",
    "agreement",
    "check_config",
    "lexical_judge",
    "pair_records",
    "read_labels",
    "render_veritas_table",
    "think_answer",
    "trajectory_pairs",
    "veritas_entry",
    "veritas_table",
]
