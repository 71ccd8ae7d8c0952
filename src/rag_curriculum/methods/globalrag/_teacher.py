"""GlobalRAG's teacher path (Luo et al., appendix D): golden trajectories through a teacher model, kept only when
their plan is valid, every sub-question was answered within the retrieval budget and the final answer is right.
Apart from the format (the grammar of this folder) because it runs rollouts: the reward that parses
GlobalRAG's trajectories loads the format alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..._metrics import exact_match
from ..._plumbing import renamed_keywords
from ...agents import RolloutConfig, run_rollouts
from ...errors import ConfigError
from ._grammar import parse_globalrag, plan_from_questions

__all__ = ["TeacherResult", "teacher_plans"]


@dataclass
class TeacherResult:
    """What a teacher run kept (plan-file records, origin ``teacher:MODEL``) and what it rejected, by filter:
    ``topology`` (no valid acyclic plan), ``retrieval_budget`` (a sub-question searched more than
    ``max_retrievals`` times or was never answered), ``answer`` (the final answer is not an exact match)."""

    kept: list[dict[str, Any]] = field(default_factory=list)
    rejected: dict[str, list[str]] = field(default_factory=lambda: {"topology": [], "retrieval_budget": [],
                                                                    "answer": []})


@renamed_keywords(topk="top_k")
def teacher_plans(rows: Sequence[Mapping[str, Any]], backend: Any, retriever: Any, sampling: Any, *,
                  model: str, max_retrievals: int = 15, max_nodes: int = 6, template: str = "globalrag",
                  top_k: int = 3, max_context_tokens: int = 32768, seed: int = 0) -> TeacherResult:
    """Golden trajectories through a teacher (any generation backend of the toolkit) following appendix D: the
    teacher answers each row in GlobalRAG's format through the search environment (one rollout loop,
    :func:`~rag_curriculum.agents.run_rollouts`, with a turn budget of ``max_nodes x max_retrievals + 1``), and the
    trajectory is kept only if (1) its plan is topologically valid (parses, acyclic), (2) every sub-question was
    answered within ``max_retrievals`` searches, (3) its final answer matches a gold answer exactly (SQuAD
    normalisation). Kept plans carry the teacher's sub-answers and ``origin = "teacher:" + model``."""
    if max_retrievals < 1 or max_nodes < 1:
        raise ConfigError(f"max_retrievals and max_nodes must be >= 1 (got {max_retrievals}, {max_nodes})")
    cfg = RolloutConfig(template=template, top_k=top_k, max_turns=max_nodes * max_retrievals + 1,
                        max_context_tokens=max_context_tokens, seed=seed)
    trajs = run_rollouts(backend, rows, retriever, sampling, n=1, config=cfg)
    res = TeacherResult()
    for row, t in zip(rows, trajs, strict=True):
        rid = str(row["id"])
        trace = parse_globalrag(t.text, require_search=False, require_all_subanswers=False, strict_end=False)
        if trace.plan is None or len(trace.plan.nodes) > max_nodes:
            res.rejected["topology"].append(rid)
            continue
        per_node: dict[str, int] = {}
        for sp in trace.subplans:
            for ph, _ in sp.bindings or [("?", "")]:
                per_node[ph] = per_node.get(ph, 0) + len(sp.searches)
        if any(v > max_retrievals for v in per_node.values()) or any(
                n.placeholder not in trace.sub_answers for n in trace.plan.nodes):
            res.rejected["retrieval_budget"].append(rid)
            continue
        answers = list(row.get("answers") or [])
        if trace.answer is None or not exact_match(trace.answer, answers):
            res.rejected["answer"].append(rid)
            continue
        plan = plan_from_questions([(n.question, n.placeholder, trace.sub_answers[n.placeholder])
                                    for n in trace.plan.nodes], origin=f"teacher:{model}")
        res.kept.append({"id": rid, "source": row.get("data_source") or row.get("source"),
                         "question": row.get("question"), "answers": answers, **plan.to_dict(),
                         "trajectory": t.text})
    return res
