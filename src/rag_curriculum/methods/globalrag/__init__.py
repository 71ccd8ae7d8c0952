"""GlobalRAG (Luo et al., ``../shared/papers/globalrag.txt``; docs/globalrag.md): a search agent that plans its
sub-questions as a graph, and the rewards that score the plan.

* the grammar: the ``<plan>`` / ``<subPlan>`` / ``<search>`` / ``<subAnswer>`` / ``<answer>`` format,
  :func:`parse_plan`, :class:`Plan` and its graph, :func:`parse_globalrag` (a whole trajectory, with
  :data:`FORMAT_ERRORS`), the plan files (:func:`read_plans`, :func:`write_plans`);
* the agent: its prompt (agent templates ``globalrag`` and ``globalrag-released``, run by the toolkit's rollout
  loop), :func:`gold_plan` / :func:`gold_plans` (plan graphs from the datasets' own annotations),
  :func:`teacher_plans` (appendix D's teacher path), :func:`render_table1` (an agent evaluation in Table 1's layout);
* the rewards: :class:`GlobalRagReward` (``"globalrag"``: Eq. 7, w_t (0.1 R_form + 0.5 R_str + 0.5 R_sem +
  0.5 R_step) + R_answ, with ``"globalrag-format"``, ``"globalrag-structure"``, ``"globalrag-semantic"``,
  ``"globalrag-step"``, ``"globalrag-answer"``) and :func:`anneal_weight` (Eq. 6).

Importing this package registers the agent templates and the rewards by name (nothing loads until one is asked
for). The command is ``curriculum globalrag plans | table``.

>>> from rag_curriculum.prompts import get_agent_template
>>> get_agent_template("globalrag").name
'globalrag'
>>> from rag_curriculum.methods.globalrag import parse_plan
>>> [n.question for n in parse_plan('{"Q1": ["Who directed Up?", "#1"], "Q2": ["When was #1 born?", "#2"]}').nodes]
['Who directed Up?', 'When was #1 born?']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._plumbing import lazy_exports
from ...prompts import AGENT_TEMPLATES
from ...rewards import register_reward

__getattr__, __dir__ = lazy_exports(__name__, globals())

if TYPE_CHECKING:  # for type checkers and IDEs; at run time these load on first use
    from ._agent import GLOBALRAG_PROMPT, gold_plan, gold_plans, read_agent_summary, render_table1
    from ._grammar import (
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
    from ._reward import GlobalRagBreakdown, GlobalRagReward, anneal_weight
    from ._teacher import TeacherResult, teacher_plans

AGENT_TEMPLATES.register("globalrag", f"{__name__}._agent:GLOBALRAG_TEMPLATE")
AGENT_TEMPLATES.register("globalrag-released", f"{__name__}._agent:GLOBALRAG_RELEASED_TEMPLATE")
# the annealed total R(t) and each term
for _name, _cls in (("globalrag", "GlobalRagReward"), ("globalrag-format", "GlobalRagFormatReward"),
                    ("globalrag-structure", "GlobalRagStructureReward"),
                    ("globalrag-semantic", "GlobalRagSemanticReward"), ("globalrag-step", "GlobalRagStepReward"),
                    ("globalrag-answer", "GlobalRagAnswerReward")):
    register_reward(_name, f"{__name__}._reward:{_cls}")

__all__ = [
    "FORMAT_ERRORS",
    "GLOBALRAG_PROMPT",
    "PLAN_ERRORS",
    "GlobalRagBreakdown",
    "GlobalRagReward",
    "GlobalRagTrace",
    "Plan",
    "PlanCycleError",
    "PlanError",
    "PlanNode",
    "SubPlan",
    "TeacherResult",
    "anneal_weight",
    "gold_plan",
    "gold_plans",
    "parse_globalrag",
    "parse_plan",
    "plan_from_questions",
    "read_agent_summary",
    "read_plans",
    "render_table1",
    "teacher_plans",
    "write_plans",
]
