"""GlobalRAG's agent (Luo et al., ``../shared/papers/globalrag.txt`` section 3, appendices A, D, E): the prompt of
Figure 7 and gold plan graphs from the datasets' own annotations (the teacher path of appendix D, which runs
rollouts, is ``_teacher``), and the evaluation table in the layout of Table 1. The format itself (the ``<plan>`` / ``<subPlan>`` / ``<subAnswer>`` blocks, the plan's dependency graph, the trajectory parser
and the plan files) is this folder's grammar module.

**Turns.** GlobalRAG's agent acts exactly as Search-R1's does (a turn ends at ``</search>`` or ``</answer>``; the
environment appends ``<information>``; "action budget 4" is ``max_turns=4``), so the rollout loop runs it with
Search-R1's turn protocol; only the prompt differs (``template: globalrag``). The plan, ``<subPlan>`` and
``<subAnswer>`` blocks are judged on the whole trajectory by :func:`~rag_curriculum.methods.globalrag.parse_globalrag` (the
format reward).

**Templates.** ``globalrag``: Figure 7 (appendix A) word for word, ``{question}`` after "Question:".
``globalrag-released``: the training prompt of the authors' release (``scripts/data.py``: Figure 7 plus the JSON
layout of the plan, the search instructions and a one-shot example), for their checkpoints.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..._metrics import normalize_answer
from ...errors import ConfigError, CurriculumError
from ...prompts import SearchTemplate
from ._grammar import Plan, PlanError, plan_from_questions

__all__ = ["GLOBALRAG_PROMPT", "gold_plan", "gold_plans", "read_agent_summary", "render_table1"]

#: Figure 7 of the paper (appendix A), verbatim; ``{question}`` takes the question.
GLOBALRAG_PROMPT = (
    "Answer the given question by following the steps below. You must conduct all reasoning inside <think> and "
    "</think> before producing <plan>, <search>, <subAnswer> and <answer>.\n\n"
    "Step 1: Explicitly generate one or more sub-questions within the <plan> and </plan> block.\n"
    "- Each sub-question must contain both a question and a placeholder (#1, #2, etc.) that represents the answer "
    "to that question.\n"
    "- Each sub-question should be as brief and precise as possible.\n"
    "- If a sub-question depends on the answer to a previous one, use a placeholder (#1, #2, etc.) to represent "
    "that dependency.\n\n"
    "Step 2: For each sub-question, create a block enclosed in <subPlan> and </subPlan>.\n"
    "- In sequential order, take one sub-question from <plan> and fill it between <search> and </search>.\n"
    "- Conclude the block with a <subAnswer> that binds the answer to the current sub-question.\n\n"
    "Step 3: Provide the final result inside <answer> and </answer>, without detailed explanations.\n\n"
    "Now, it's your turn! Please answer the following question!!!\n"
    "Question: {question}"
)

# The authors' released training prompt (GlobalRAG scripts/data.py: ``template + "\n" + "Question:" + q + "\n"``),
# braces doubled for str.format.
GLOBALRAG_RELEASED_PROMPT = (
    "Answer the given question by following the steps below. You must conduct all reasoning inside <think> and "
    "</think> before producing <plan>,  <search>, <subAnswer> and <answer>. \n\n"
    "Step 1:Explicitly generate one or more sub-questions within the <plan> and </plan> block.\n"
    " - Each sub-question must contain both a question and a placeholder (#1, #2, etc.) that represents the answer "
    "to that question.\n"
    " - Each sub-question should be as brief and precise as possible.\n"
    " - If a sub-question depends on the answer to a previous one, use a placeholder (#1, #2, etc.) to represent "
    "that dependency.\n"
    " - The output format of the sub-questions must follow this JSON structure:\n"
    "{{\n    \"Q1\": [\"First sub-question\", \"#1\"],\n    \"Q2\": [\"Second sub-question using #1\", \"#2\"],\n"
    "    ...\n}}\n\n"
    "Step 2: For each sub-question, create a block enclosed in <subPlan> and </subPlan>.\n"
    "Within each <subPlan> block you must:\n"
    " - In sequential order, take one sub-question from <plan> and fill it between <search> and </search>.\n"
    " - If you lack some knowledge, call a search engine using <search> query </search>. The search engine will "
    "return results enclosed in <information> and </information>. You may search as many times as needed.\n"
    " - Conclude the block with a <subAnswer> that binds the answer to the current sub-question.\n\n"
    "Step 3: Provide the final result inside <answer> and </answer>, without detailed explanations.\n\n\n"
    "## One-Shot Example:\nInput:\n"
    "Who was the screenwriter of the film directed by the person who created the Money in the Bank ladder match?\n\n"
    "Output:\n"
    "<think> The question involves multiple entities and relations, so it is best decomposed into smaller "
    "sub-questions. First, I need to identify the creator of the Money in the Bank ladder match. Then, I should "
    "check which film that person directed. Finally, I must find the screenwriter of that film. </think>\n"
    "<plan>\n{{ \"Q1\": [\"Who created the Money in the Bank ladder match?\", \"#1\"], \"Q2\": [\"Which film was "
    "directed by #1?\", \"#2\"], \"Q3\": [\"Who was the screenwriter of #2?\", \"#3\"] }} \n</plan>\n\n"
    "<subPlan>\n    <think> To start, I need to find who created the Money in the Bank ladder match. </think>\n"
    "    <search> creator of the Money in the Bank ladder match </search>\n"
    "    <information> The Money in the Bank ladder match was created by Chris Jericho. </information>\n"
    "    <think> The information shows that Chris Jericho is the creator. </think>\n"
    "    <subAnswer> #1 = Chris Jericho </subAnswer>\n</subPlan>\n\n"
    "<subPlan>\n    <think> Next, I need to find which film Chris Jericho directed, based on the previous answer. "
    "</think>\n    <search> Which film was directed by Chris Jericho </search>\n"
    "    <information> Chris Jericho directed the film \"But I'm Chris Jericho!\". </information>\n"
    "    <think> The evidence indicates that the film directed by Chris Jericho is \"But I'm Chris Jericho!\". "
    "</think>\n    <subAnswer> #2 = \"But I'm Chris Jericho!\" </subAnswer>\n</subPlan>\n\n"
    "<subPlan>\n    <think> Finally, I should determine who wrote the film \"But I'm Chris Jericho!\". </think>\n"
    "    <search> \"But I'm Chris Jericho!\" film screenwriter </search>\n"
    "    <information> The series \"But I'm Chris Jericho!\" was written by Bob Kerr and Norm Hiscock. "
    "</information>\n"
    "    <think> The results confirm that the screenwriters of the film are Bob Kerr and Norm Hiscock. </think>\n"
    "    <subAnswer> #3 = Bob Kerr and Norm Hiscock </subAnswer>\n</subPlan>\n\n"
    "<think> I have gathered all the necessary information from the sub-questions and can now provide the final "
    "answer. </think>\n<answer> Bob Kerr and Norm Hiscock </answer>\n\n\n"
    "## Now, it's your turn! Please answer the following question!!!\n"
    "\nQuestion:{question}\n"
)

GLOBALRAG_TEMPLATE = SearchTemplate("globalrag", GLOBALRAG_PROMPT)
GLOBALRAG_RELEASED_TEMPLATE = SearchTemplate("globalrag-released", GLOBALRAG_RELEASED_PROMPT)


# -- gold plans from the datasets' annotations ------------------------------------------------------------------
_ARROW = re.compile(r"^\s*(.+?)\s*>>\s*(.+?)\s*$")


def _arrow_question(q: str) -> str:
    """MuSiQue's ``subject >> relation`` steps as a question: ``What is the relation of subject?``."""
    m = _ARROW.match(q)
    return f"What is the {m.group(2)} of {m.group(1)}?" if m else q


def _entity_key(s: str) -> str:
    """An entity as Wikipedia titles and evidence triples name it: a trailing "(disambiguation)" dropped, accents
    folded, SQuAD-normalised ("Gianfranco Rosi (director)" and "Émile Chautard" match their mentions)."""
    s = re.sub(r"\s*\([^()]*\)\s*$", "", s)
    s = "".join(c for c in unicodedata.normalize("NFKD", s) if not unicodedata.combining(c))
    return normalize_answer(s)


def _musique_plan(ex: Any, arrows: str) -> Plan:
    steps = ex.decomposition or []
    items = []
    for j, s in enumerate(steps):
        q = str(s.get("question") or "")
        items.append((_arrow_question(q) if arrows == "rewrite" else q, f"#{j + 1}", s.get("answer")))
    return plan_from_questions(items, origin="musique-decomposition")


def _twowiki_plan(ex: Any) -> Plan:
    triples = ex.extra.get("evidences") or []
    items: list[tuple[str, str, str | None]] = []
    objects: list[tuple[str, int]] = []  # (normalised object, node index)
    # where a name differs from its earlier mention ("Kanye" / "Kanye West"), the question type's own shape
    by_type = {"compositional": {1: 0}, "inference": {1: 0}, "bridge_comparison": {2: 0, 3: 1}}
    shape = by_type.get(ex.qtype or "", {}) if len(triples) in (2, 4) else {}
    for j, t in enumerate(triples):
        subject, relation, obj = (str(x) for x in t[:3])
        ref = next((f"#{i + 1}" for o, i in objects if o == _entity_key(subject)), None)
        if ref is None and j in shape:
            ref = f"#{shape[j] + 1}"
        items.append((f"What is the {relation} of {ref or subject}?", f"#{j + 1}", obj))
        objects.append((_entity_key(obj), j))
    return plan_from_questions(items, origin="2wiki-evidences")


def _hotpot_plan(ex: Any) -> Plan:
    titles = list(dict.fromkeys(t for t, _ in (ex.supporting_facts or [])))
    if len(titles) < 2:
        raise PlanError(f"{len(titles)} supporting title(s): a bridge or comparison plan needs two",
                        kind="plan_empty")
    a, b = titles[0], titles[1]
    if ex.qtype == "comparison":
        items = [(f"{ex.question} (about {a})", "#1", None), (f"{ex.question} (about {b})", "#2", None)]
        return plan_from_questions(items, origin="hotpotqa-comparison")
    text = {d.title: d.text for d in ex.documents if d.is_gold}
    # the first hop is the paragraph that names the other one's title (the bridge entity)
    if b.lower() not in text.get(a, "").lower() and a.lower() in text.get(b, "").lower():
        a, b = b, a
    items = [(f"Which entity connects {a} to the question?", "#1", b), (f"{ex.question} (via #1)", "#2",
                                                                        ex.answers[0])]
    return plan_from_questions(items, origin="hotpotqa-bridge")


def gold_plan(example: Any, *, musique_arrows: str = "rewrite") -> Plan | None:
    """The gold plan of an :class:`~rag_curriculum.records.Example` from its own annotations, without a teacher:

    * MuSiQue: ``question_decomposition`` (sub-questions with ``#k`` references and their answers); its
      ``subject >> relation`` steps are rewritten ``What is the relation of subject?`` (``musique_arrows=
      "rewrite"``, the default) or kept as written (``"keep"``);
    * 2WikiMultihopQA: ``evidences`` triples ``(subject, relation, object)``, one node each (``What is the relation
      of subject?``, answer the object), with an edge from triple i to triple j when j's subject is i's object
      (normalised, accents and a trailing "(disambiguation)" ignored; where a name differs from its earlier
      mention, the question type's shape): compositional and inference questions are chains, comparison questions
      two independent nodes, bridge-comparison questions two chains;
    * HotpotQA: two nodes from the supporting titles. Bridge: ``#1`` is the bridge entity (the title of the
      paragraph the other one names; its answer) and ``#2`` the question through ``#1`` (the gold answer).
      Comparison: one node per compared entity, independent, no gold sub-answer. The texts are templates: the
      structure and the bridge's sub-answers are exact, the wording is not (use a teacher for that).

    None where the record carries no annotation to build one from (MuSiQue without a decomposition, 2Wiki without
    evidences, HotpotQA without a type)."""
    if musique_arrows not in ("rewrite", "keep"):
        raise ConfigError(f"musique_arrows={musique_arrows!r}; choose rewrite or keep")
    if example.source == "musique" and example.decomposition:
        return _musique_plan(example, musique_arrows)
    if example.source == "2wikimultihopqa" and example.extra.get("evidences"):
        return _twowiki_plan(example)
    if example.source == "hotpotqa" and example.qtype in ("bridge", "comparison") and example.supporting_facts:
        return _hotpot_plan(example)
    return None


def gold_plans(examples: Iterable[Any], *, musique_arrows: str = "rewrite") -> tuple[list[dict[str, Any]],
                                                                                     dict[str, int]]:
    """Gold plans of examples as plan-file records (``id``, ``source``, ``question``, ``answers``, the plan's
    ``nodes`` / ``edges`` / ``origin``) and counts: ``planned``, ``no_annotation``, and one per
    :data:`PLAN_ERRORS` kind for annotations that do not make a valid plan (nothing is dropped silently)."""
    records: list[dict[str, Any]] = []
    counts: dict[str, int] = {"planned": 0, "no_annotation": 0}
    for ex in examples:
        try:
            plan = gold_plan(ex, musique_arrows=musique_arrows)
        except PlanError as e:
            counts[e.kind] = counts.get(e.kind, 0) + 1
            continue
        if plan is None:
            counts["no_annotation"] += 1
            continue
        counts["planned"] += 1
        records.append({"id": ex.id, "source": ex.source, "question": ex.question, "answers": list(ex.answers),
                        **plan.to_dict()})
    return records, counts


# -- the evaluation table (Table 1's layout) --------------------------------------------------------------------
#: Table 1's columns: the toolkit's dataset names, the paper's headers.
TABLE1_COLUMNS = (("hotpotqa", "HotpotQA"), ("2wikimultihopqa", "2Wiki"), ("musique", "MuSiQue"),
                  ("bamboogle", "Bamboogle"), ("wikihop", "WikiHop"))
#: The paper's GlobalRAG rows (Table 1, EM / F1 x 100), printed under the toolkit's rows for reference.
TABLE1_PAPER = {
    "GlobalRAG-instruct (Qwen2.5-3B, paper)": ((32.9, 44.2), (42.3, 47.8), (10.8, 18.6), (37.6, 49.3), (12.9, 20.7)),
    "GlobalRAG-instruct (Qwen2.5-7B, paper)": ((38.2, 50.7), (47.8, 53.2), (14.9, 21.2), (48.8, 61.6), (19.0, 28.0)),
}


def render_table1(summary: Mapping[str, Any], *, paper_rows: bool = True) -> str:
    """The EM / F1 table of an agent evaluation (``curriculum eval --agent search-r1 --template globalrag``'s
    ``summary.json``) in the layout of the paper's Table 1: one row per model, HotpotQA | 2Wiki | MuSiQue |
    Bamboogle | WikiHop | Avg, each ``EM / F1`` (x 100), ``-`` where a set was not evaluated; Avg over the sets
    evaluated. Sets of one dataset are averaged over their questions."""
    cells: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    models: list[str] = []
    for e in summary.get("evals", []):
        ds = str(e.get("dataset", "")).lower()
        o = e.get("overall") or {}
        if e["model"] not in models:
            models.append(e["model"])
        cells.setdefault((e["model"], ds), []).append((float(o.get("em", 0)), float(o.get("f1", 0)),
                                                       int(o.get("questions", e.get("questions", 1)) or 1)))
    head = "| Method | " + " | ".join(h for _, h in TABLE1_COLUMNS) + " | Avg |"
    lines = [head, "|---|" + "---|" * (len(TABLE1_COLUMNS) + 1)]

    def row(name: str, vals: list[tuple[float, float] | None]) -> str:
        got = [v for v in vals if v is not None]
        avg = (sum(v[0] for v in got) / len(got), sum(v[1] for v in got) / len(got)) if got else None
        show = [f"{v[0]:.1f} / {v[1]:.1f}" if v is not None else "-" for v in [*vals, avg]]
        return f"| {name} | " + " | ".join(show) + " |"

    for mname in models:
        vals: list[tuple[float, float] | None] = []
        for ds, _ in TABLE1_COLUMNS:
            c = cells.get((mname, ds))
            if not c:
                vals.append(None)
                continue
            n = sum(q for _, _, q in c)
            vals.append((sum(e * q for e, _, q in c) / n, sum(f * q for _, f, q in c) / n))
        lines.append(row(mname, vals))
    if paper_rows:
        for name, vals in TABLE1_PAPER.items():
            lines.append(row(name, list(vals)))
    return "\n".join(lines) + "\n"


def read_agent_summary(path: str | Path) -> dict[str, Any]:
    """The ``summary.json`` of an agent evaluation (``curriculum eval --agent``), given its ``--out`` folder or the
    file itself: what :func:`render_table1` reads.

    Raises:
        CurriculumError: the file is not JSON, or not an agent evaluation's summary (no ``evals`` list).
        OSError: it cannot be read.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "summary.json"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise CurriculumError(f"{path}: not JSON ({e})", hint="give the --out folder of `curriculum eval "
                              "--agent` or its summary.json") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("evals"), list):
        raise CurriculumError(f"{path}: not the summary.json of an agent evaluation (no 'evals' list)",
                              hint="give the --out folder of `curriculum eval --agent`")
    return summary
