"""ReAct+CRAG (``../shared/papers/react-crag.txt``; docs/react-crag.md): a ReAct agent (Yao et al., 2023) on the
toolkit's search environment, and the best-of-N ranked by a CRAG-inspired consistency score.

* the format: :class:`ReActFormat` (a turn format of :func:`rag_curriculum.agents.run_rollouts`: ``Thought`` /
  ``Action`` ``Search[...]`` | ``Lookup[...]`` | ``Finish[...]`` / ``Observation``), :func:`parse_react_turn` (one
  turn, classified by :data:`REACT_ERRORS`), :func:`react_steps`; the agent template ``react`` (ReAct's HotpotQA
  instruction) and :func:`react_fewshot_template` (its few-shot prompt, from a copy of ReAct's prompts file);
* the ranking: :func:`consistency_score` (with :class:`CragWeights`), :func:`best_of_n`, :func:`self_consistency`;
* the evaluation's side (``curriculum eval --agent react [--best-of N]``): :class:`ReActProtocol`, the ``react``
  agent protocol, and :func:`score_react` (best-of-N, self-consistency and the oracle of each set).

Importing this package registers the ``react`` agent template and agent protocol by name (nothing loads until
one is asked for).

>>> from rag_curriculum.prompts import get_agent_template
>>> get_agent_template("react").text[:40]
'Solve a question answering task with int'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._agent_parts import AGENT_PROTOCOLS
from ..._plumbing import lazy_exports
from ...prompts import AGENT_TEMPLATES

__getattr__, __dir__ = lazy_exports(__name__, globals())

if TYPE_CHECKING:  # for type checkers and IDEs; at run time these load on first use
    from ._agent import (
        REACT_ERRORS,
        REACT_PROMPT,
        Consistency,
        CragWeights,
        ReActFormat,
        ReActStep,
        best_of_n,
        consistency_score,
        parse_react_turn,
        react_fewshot_template,
        react_steps,
        self_consistency,
    )
    from ._evaluation import ReActProtocol, score_react

AGENT_TEMPLATES.register("react", f"{__name__}._agent:REACT_TEMPLATE")
# its part of `curriculum eval --agent react`: the prompt, the turn format and the best-of-N scores of each set
AGENT_PROTOCOLS.register("react", f"{__name__}._evaluation:PROTOCOL")

__all__ = [
    "REACT_ERRORS",
    "REACT_PROMPT",
    "Consistency",
    "CragWeights",
    "ReActFormat",
    "ReActProtocol",
    "ReActStep",
    "best_of_n",
    "consistency_score",
    "parse_react_turn",
    "react_fewshot_template",
    "react_steps",
    "score_react",
    "self_consistency",
]
