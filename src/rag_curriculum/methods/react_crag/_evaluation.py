"""ReAct+CRAG in the search-agent evaluation (``curriculum eval --agent react [--best-of N]``): the ``react`` agent
protocol (:data:`rag_curriculum.agents.AGENT_PROTOCOLS`): ReAct's prompt and Thought / Action / Observation
format through the rollout loop, and, per set, :func:`score_react` (the trajectory the CRAG-inspired consistency
score ranks first, the self-consistency majority, the oracle) under ``react``, each trajectory's consistency
score and terms under ``consistency``, and the table's three rows per model (:meth:`ReActProtocol.table_rows`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from rag_plumbing import passage_hash

from ..._metrics import answer_scores
from ...agents import AgentEvalPart, AgentSetRun
from ...errors import UsageError
from ._agent import (
    CragWeights,
    ReActFormat,
    best_of_n,
    consistency_score,
    react_fewshot_template,
    react_steps,
    self_consistency,
)

__all__ = ["PROTOCOL", "ReActProtocol", "score_react"]


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _gold_recall(row: Mapping[str, Any], t: Any) -> float:
    gold = {passage_hash(p["title"], p["text"]) for p in (row.get("passages") or []) if p.get("is_gold")}
    found = {i for c in t.searches for i, g in zip(c.ids, c.gold, strict=True) if g}
    return min(len(found), len(gold)) / len(gold) if gold else 0.0


def score_react(rows: Sequence[Mapping[str, Any]], trajs: Sequence[Any], m: int,
                weights: CragWeights | None = None) -> tuple[dict[str, Any], list[Any]]:
    """ReAct+CRAG's scores of ``m`` trajectories per row (row order, then sample order): ``best_of`` (EM / F1 of
    the trajectory the CRAG-inspired consistency score ranks first, with its searches and gold recall),
    ``self_consistency`` (EM / F1 of the majority answer, its agreement rate and the answers' entropy in bits),
    ``oracle`` (EM / F1 of the best sample: pass@m), each a mean over questions (x 100; searches and entropy as
    they are), and the :class:`~rag_curriculum.methods.react_crag.Consistency` of every trajectory, in order. The
    mean over the ``m`` samples, the ReAct baseline, is the evaluation's ``overall``."""
    scored = [consistency_score(react_steps(t.segments), weights) for t in trajs]
    best: dict[str, list[float]] = defaultdict(list)
    vote: dict[str, list[float]] = defaultdict(list)
    oracle: dict[str, list[float]] = defaultdict(list)
    for qi, row in enumerate(rows):
        ts, cs = trajs[qi * m:(qi + 1) * m], scored[qi * m:(qi + 1) * m]
        pick = best_of_n(cs)
        t = ts[pick] if pick is not None else None
        e, f = answer_scores(t.answer, row["answers"]) if t is not None and t.answer is not None else (0.0, 0.0)
        best["em"].append(e)
        best["f1"].append(f)
        best["searches"].append(float(len(t.searches)) if t is not None else 0.0)
        best["gold_recall"].append(_gold_recall(row, t) if t is not None else 0.0)
        best["answered"].append(float(t is not None))
        sc = self_consistency([x.answer for x in ts])
        e, f = answer_scores(sc["answer"], row["answers"]) if sc["answer"] is not None else (0.0, 0.0)
        vote["em"].append(e)
        vote["f1"].append(f)
        vote["agreement"].append(sc["agreement"])
        vote["entropy"].append(sc["entropy"])
        pairs = [answer_scores(x.answer, row["answers"]) if x.answer is not None else (0.0, 0.0) for x in ts]
        oracle["em"].append(max(p[0] for p in pairs) if pairs else 0.0)
        oracle["f1"].append(max(p[1] for p in pairs) if pairs else 0.0)

    def agg(d: dict[str, list[float]], raw: tuple[str, ...] = ()) -> dict[str, float]:
        return {k: round(_mean(v), 3) if k in raw else round(100 * _mean(v), 2) for k, v in d.items()}

    out = {"n": m, "score": "crag-inspired", "weights": (weights or CragWeights()).to_dict(),
           "best_of": agg(best, ("searches",)), "self_consistency": agg(vote, ("entropy",)),
           "oracle": agg(oracle)}
    return out, scored


class ReActProtocol(AgentEvalPart):
    """``--agent react``: ReAct's prompt (``react``, or its few-shot prompt from a copy of ReAct's
    ``prompts_naive.json``), its turn format (``Search`` shows the page's first ``react_sentences`` sentences) and
    ReAct+CRAG's scores of each set (``--best-of N``, ``--crag-weight KEY=VALUE``)."""

    key = "react"
    settings = ("best_of", "crag_weights", "react_sentences")

    def check(self, cfg: Any) -> None:
        """An evaluation's or a partition's settings (a partition has no ``--best-of`` or ``--crag-weight``)."""
        best_of, crag_weights = getattr(cfg, "best_of", None), getattr(cfg, "crag_weights", {})
        if cfg.agent != "react":
            if best_of is not None or crag_weights:
                raise UsageError("--best-of and --crag-weight rank ReAct trajectories: pass --agent react")
            if cfg.template == "react":
                raise UsageError("the react template is ReAct's prompt: pass --agent react with it")
            return
        if cfg.template.startswith("search-r1") and cfg.template != "search-r1":
            raise UsageError(f"--template {cfg.template} is Search-R1's prompt; --agent react takes react (its "
                             "default) or a template registered for ReAct")
        known = {f.name for f in fields(CragWeights)}
        for k, v in crag_weights.items():
            if k not in known:
                raise UsageError(f"--crag-weight {k}: no such term; known: {', '.join(sorted(known))}")
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise UsageError(f"--crag-weight {k}={v!r}: a number is needed")
        if best_of is not None:
            if cfg.m not in (1, best_of):
                raise UsageError(f"--best-of {best_of} samples {best_of} trajectories per question; "
                                 f"--samples {cfg.m} says otherwise", hint="pass one of the two")
            cfg.m = best_of

    def template(self, cfg: Any) -> str:
        """``react`` unless another was chosen (``search-r1``, the evaluation's default, means ``react``); a path
        to a copy of ReAct's ``prompts_naive.json`` gives its few-shot prompt exactly
        (:func:`~rag_curriculum.methods.react_crag.react_fewshot_template`)."""
        if cfg.template.endswith(".json"):
            return react_fewshot_template(cfg.template).name
        return "react" if cfg.template == "search-r1" else cfg.template

    def turn_format(self, cfg: Any) -> Any:
        return ReActFormat(cfg.react_sentences)

    @staticmethod
    def weights(cfg: Any) -> CragWeights:
        """The consistency score's weights (``--crag-weight``)."""
        return CragWeights(**{k: float(v) for k, v in cfg.crag_weights.items()})

    def score_set(self, cfg: Any, run: AgentSetRun) -> dict[str, Any]:
        react, scored = score_react(run.rows, run.trajs, run.m, self.weights(cfg))
        for dct, c in zip(run.dicts, scored, strict=True):
            dct["consistency"] = {"score": c.score, "terms": c.terms}
        return react

    def table_rows(self, model: str, entries: Sequence[Mapping[str, Any] | None]
                   ) -> list[tuple[str, list[dict[str, Any]]]] | None:
        """With N > 1 samples, three rows: the mean of the N (the ReAct baseline), ReAct+CRAG's best of N (ranked
        by the CRAG-inspired score) and self-consistency's; None for entries without ReAct's scores."""
        vals = [(e or {}).get("overall", {}) for e in entries]
        reacts = [(e or {}).get(self.key) for e in entries]
        if not any(reacts):
            return None
        n = next(r["n"] for r in reacts if r)
        if n == 1:  # one sample: nothing to rank or vote
            return [(model, vals)]
        return [(f"{model} · ReAct (mean of {n})", vals),
                (f"{model} · ReAct+CRAG-inspired (best of {n})", [(r or {}).get("best_of", {}) for r in reacts]),
                (f"{model} · self-consistency ({n})",
                 [{k: v for k, v in (r or {}).get("self_consistency", {}).items() if k in ("em", "f1")}
                  for r in reacts])]


#: The object registered as the ``react`` agent protocol.
PROTOCOL = ReActProtocol()
