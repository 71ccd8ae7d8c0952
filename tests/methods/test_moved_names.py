"""The companion methods' names that moved into ``rag_curriculum.methods`` still import from their old packages for
one release: each is the very object of its new home, and comes with a DeprecationWarning naming that place."""

from __future__ import annotations

import importlib
import warnings

import pytest

#: (old package, new package, names): every public name that left the old package.
MOVED = [
    ("rag_curriculum.rewards", "rag_curriculum.methods.craft",
     ["CRAFT_REASONS", "CRAFT_VARIANTS", "CraftAnswerReward", "CraftBoundaryReward", "CraftBreakdown",
      "CraftEvidenceReward", "CraftFormatReward", "CraftJudge", "CraftJudgeReward", "CraftParse", "CraftReward",
      "boundary_check", "cited_documents", "parse_craft"]),
    ("rag_curriculum.rewards", "rag_curriculum.methods.veritas",
     ["INFO_THINK_PROMPT", "THINK_SEARCH_PROMPT", "VeritasJudge", "VeritasReward", "agreement", "lexical_judge",
      "pair_records", "read_labels", "think_answer", "trajectory_pairs"]),
    ("rag_curriculum.rewards", "rag_curriculum.methods.globalrag", ["GlobalRagBreakdown", "GlobalRagReward",
                                                                     "anneal_weight"]),
    ("rag_curriculum.rewards", "rag_curriculum.methods.search_r1",
     ["SearchEmReward", "SearchR1Reward", "search_r1_breakdown", "search_r1_score", "search_r1_sequence",
      "search_r1_target"]),
    ("rag_curriculum.grammar", "rag_curriculum.methods.globalrag",
     ["FORMAT_ERRORS", "PLAN_ERRORS", "GlobalRagTrace", "Plan", "PlanCycleError", "PlanError", "PlanNode", "SubPlan",
      "parse_globalrag", "parse_plan", "plan_from_questions", "read_plans", "write_plans"]),
    ("rag_curriculum.agents", "rag_curriculum.methods.globalrag",
     ["gold_plan", "gold_plans", "read_agent_summary", "render_table1", "TeacherResult", "teacher_plans"]),
    ("rag_curriculum.agents", "rag_curriculum.methods.react_crag",
     ["REACT_ERRORS", "Consistency", "CragWeights", "ReActFormat", "ReActStep", "best_of_n", "consistency_score",
      "parse_react_turn", "react_fewshot_template", "react_steps", "self_consistency"]),
    ("rag_curriculum.evaluation", "rag_curriculum.methods.veritas", ["veritas_table"]),
]


@pytest.mark.parametrize(("old", "new", "names"), MOVED, ids=[f"{o.split('.')[-1]}-{n.split('.')[-1]}"
                                                              for o, n, _ in MOVED])
def test_an_old_name_is_the_new_object_with_a_warning_naming_its_place(old, new, names):
    old_mod, new_mod = importlib.import_module(old), importlib.import_module(new)
    for name in names:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = getattr(old_mod, name)
        assert got is getattr(new_mod, name), name
        said = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
        assert said == [f"{old}.{name} moved to {new}.{name}: import it from there ({old}.{name} goes in the next "
                        "release)"], (name, said)
        assert name not in old_mod.__all__ and name in new_mod.__all__


def test_an_unknown_name_of_an_old_package_is_still_an_attribute_error():
    for old in ("rag_curriculum.rewards", "rag_curriculum.grammar", "rag_curriculum.agents"):
        with pytest.raises(AttributeError, match="no_such_name"):
            importlib.import_module(old).no_such_name  # noqa: B018
