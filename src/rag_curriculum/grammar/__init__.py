"""The trajectory grammar: the tags of the search protocols and the parsers of what a model wrote, a leaf below both
the agents (which write trajectories) and the rewards (which score them), so that a reward reads a trajectory
without importing the environment that made it.

* Search-R1's tags (``_search_r1``): :data:`STOP`, :func:`parse_turn` (one model turn, classified by
  :data:`TURN_ERRORS`), :func:`information_block` (what the environment appends after a search),
  :func:`parse_trajectory` (a whole trajectory's blocks, the answer being the last ``<answer>``),
  :func:`search_r1_answer_matches` (every ``<answer>`` match, as Search-R1's own reward reads a trajectory);
* GlobalRAG's plan format (``_globalrag``): :func:`parse_plan`, :class:`Plan` and its graph,
  :func:`parse_globalrag` (a whole trajectory with :data:`FORMAT_ERRORS`), the plan files (:func:`read_plans`,
  :func:`write_plans`).

It imports nothing of the toolkit above the errors, the metrics and the plumbing (``tests/test_layers.py``).

>>> parse_trajectory("<think>a</think><search>q</search><information>x</information><answer> y </answer>").answer
'y'
>>> parse_turn("<search> capital of France").error
'unclosed_search'
"""

from __future__ import annotations

from ._globalrag import (
    FORMAT_ERRORS,
    PLAN_ERRORS,
    GlobalRagTrace,
    Plan,
    PlanCycleError,
    PlanError,
    PlanNode,
    SubPlan,
    parse_globalrag,
    parse_plan,
    plan_from_questions,
    read_plans,
    write_plans,
)
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

__all__ = [
    "FORMAT_ERRORS", "PLAN_ERRORS", "STOP", "TURN_ERRORS", "GlobalRagTrace", "ParsedTrajectory", "Plan",
    "PlanCycleError", "PlanError", "PlanNode", "Segment", "SubPlan", "Turn", "information_block", "parse_globalrag",
    "parse_plan", "parse_trajectory", "parse_turn", "plan_from_questions", "read_plans", "search_r1_answer_matches",
    "write_plans",
]
