"""The trajectory grammar: the tags of the search protocols and the parsers of what a model wrote, a leaf below both
the agents (which write trajectories) and the rewards (which score them), so that a reward reads a trajectory
without importing the environment that made it.

* Search-R1's tags (``_search_r1``): :data:`STOP`, :func:`parse_turn` (one model turn, classified by
  :data:`TURN_ERRORS`), :func:`information_block` (what the environment appends after a search),
  :func:`parse_trajectory` (a whole trajectory's blocks, the answer being the last ``<answer>``),
  :func:`search_r1_answer_matches` (every ``<answer>`` match, as Search-R1's own reward reads a trajectory);
* the methods' own formats live in their folders (GlobalRAG's plan format: :mod:`rag_curriculum.methods.globalrag`,
  whose names still import from here for one release, with a :class:`DeprecationWarning`).

It imports nothing of the toolkit above the errors, the metrics and the plumbing (``tests/test_layers.py``).

>>> parse_trajectory("<think>a</think><search>q</search><information>x</information><answer> y </answer>").answer
'y'
>>> parse_turn("<search> capital of France").error
'unclosed_search'
"""

from __future__ import annotations

from .._plumbing import moved_names
from ._search_r1 import (
    STOP,
    TURN_ERRORS,
    ParsedTrajectory,
    Segment,
    Turn,
    information_block,
    parse_trajectory,
    parse_turn,
    search_r1_answer_matches,
)

#: GlobalRAG's grammar moved to rag_curriculum.methods.globalrag: its names import from here for one release, each
#: with a DeprecationWarning naming the new place.
__getattr__ = moved_names(__name__, dict.fromkeys((
    "FORMAT_ERRORS", "PLAN_ERRORS", "GlobalRagTrace", "Plan", "PlanCycleError", "PlanError", "PlanNode",
    "SubPlan", "parse_globalrag", "parse_plan", "plan_from_questions", "read_plans", "write_plans"),
    "rag_curriculum.methods.globalrag"))

__all__ = [
    "STOP", "TURN_ERRORS", "ParsedTrajectory", "Segment", "Turn", "information_block", "parse_trajectory",
    "parse_turn", "search_r1_answer_matches",
]
