"""Search agents: the model calls a retriever across turns (Search-R1's ``<search>`` / ``<information>``
protocol). One rollout loop (:func:`run_rollouts`) serves partition, eval and training; the backends of
:mod:`rag_curriculum.generation` stay ignorant of turns, and the retrievers (the toolkit's BM25 index in this
process, or a server speaking ``POST /retrieve``) of rows. The tags and their parsers (what a model wrote) are the
grammar's, :mod:`rag_curriculum.grammar`, which the rewards read too.

>>> sorted(AGENT_TEMPLATES.names())
['globalrag', 'globalrag-released', 'react', 'search-r1', 'search-r1-original', 'search-tools']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._agent_parts import (
    AGENT_PROTOCOLS,
    DEFAULT_AGENT,
    FAITHFULNESS_MEASURES,
    TRAJECTORY_REWARDS,
    AgentEvalPart,
    AgentSetRun,
    agent_protocol_names,
)
from .._plumbing import lazy_exports, moved_names
from ..prompts import AGENT_TEMPLATES, SearchTemplate, get_agent_template
from ._protocol import INVALID_ACTION, SEARCH_TOOLS_PROMPT, first_search_query

# The environment (search difficulty, retrievers, the rollout loop), the TYPE_CHECKING imports
# below, loads on first use: it reads indexes and calls backends. The templates above load with the package, so every
# template is registered as soon as one is asked for (the methods' own register with rag_curriculum.methods).
_lazy, __dir__ = lazy_exports(__name__, globals())
#: Names of the companion methods' agents that moved to rag_curriculum.methods (name -> its new package): imported
#: from here they still work for one release, each with a DeprecationWarning naming the new place.
_MOVED = {
    **dict.fromkeys(("REACT_ERRORS", "Consistency", "CragWeights", "ReActFormat", "ReActStep", "best_of_n", "consistency_score", "parse_react_turn", "react_fewshot_template", "react_steps", "self_consistency"), "rag_curriculum.methods.react_crag"),
    **dict.fromkeys(("gold_plan", "gold_plans", "read_agent_summary", "render_table1", "TeacherResult",
                     "teacher_plans"), "rag_curriculum.methods.globalrag"),
}
__getattr__ = moved_names(__name__, _MOVED, _lazy)

if TYPE_CHECKING:  # for type checkers and IDEs; at run time these load on first use
    from ._difficulty import (
        MODES,
        P_COLUMN,
        RowView,
        SearchDifficulty,
        hard_negative_count,
        noise_probability,
    )
    from ._retrievers import (
        NO_RESULTS,
        Hit,
        HttpRetriever,
        IndexRetriever,
        Retriever,
        RetrieverError,
        doc_lines,
        open_retriever,
        split_contents,
    )
    from ._rollout import (
        STATUSES,
        RolloutConfig,
        SearchCall,
        SearchR1Format,
        Trajectory,
        run_rollouts,
        summarize,
    )

__all__ = [
    "AGENT_TEMPLATES", "INVALID_ACTION", "MODES", "P_COLUMN", "SEARCH_TOOLS_PROMPT", "STATUSES", "Hit",
    "HttpRetriever", "IndexRetriever", "NO_RESULTS", "Retriever", "RetrieverError", "RolloutConfig",
    "RowView", "SearchCall", "SearchDifficulty", "SearchTemplate", "Trajectory", "doc_lines",
    "first_search_query", "get_agent_template", "hard_negative_count", "noise_probability", "open_retriever",
    "run_rollouts", "split_contents", "summarize",
    "SearchR1Format",
    # the methods' parts of the search-agent evaluation (curriculum eval --agent), by name
    "AGENT_PROTOCOLS", "DEFAULT_AGENT", "FAITHFULNESS_MEASURES", "TRAJECTORY_REWARDS", "AgentEvalPart",
    "AgentSetRun", "agent_protocol_names",
]
