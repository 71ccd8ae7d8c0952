"""GlobalRAG's grammar (Luo et al., ``../shared/papers/globalrag.txt`` section 3, appendices A, D, E): the
``<plan>`` / ``<subPlan>`` / ``<search>`` / ``<subAnswer>`` / ``<answer>`` format, the plan's dependency graph, and
the plan files. The agent's side (its prompts, gold plans from the datasets, Table 1) is ``_agent``, the teacher
``_teacher``; the reward (``_reward``) reads trajectories through this module.

**The format** (the paper's case studies)::

    <think> ... </think>
    <plan> {"Q1": ["For what river does Toongabbie Creek serve as the mouth?", "#1"],
            "Q2": ["Into what does #1 flow?", "#2"]} </plan>
    <subPlan> <think> ... </think> <search> ... </search> <information> ... </information>
              <subAnswer> #1 = Parramatta River </subAnswer> </subPlan>
    <subPlan> ... <subAnswer> #2 = Sydney Harbour </subAnswer> </subPlan>
    <answer> Sydney Harbour </answer>

The plan is a JSON object mapping keys (``Q1``, ``Q2``, ...) to ``[sub-question, placeholder]``; a dependency edge
``Qi -> Qj`` exists when Qj's text names Qi's placeholder (``#i``, not a prefix of ``#12``). A plan that names an
unknown placeholder, binds one twice, or whose edges close a cycle is refused with a typed :class:`PlanError`
(:class:`PlanCycleError` names the cycle). The graph is a ``networkx.DiGraph`` (nodes ``0..n-1`` in plan order).
The plan, ``<subPlan>`` and ``<subAnswer>`` blocks are judged on the whole trajectory by :func:`parse_globalrag`
(the format reward).

>>> p = parse_plan('{"Q1": ["Who directed Up?", "#1"], "Q2": ["When was #1 born?", "#2"]}')
>>> [n.question for n in p.nodes], p.edges
(['Who directed Up?', 'When was #1 born?'], ((0, 1),))
>>> parse_plan('{"Q1": ["Where is #2?", "#1"], "Q2": ["Who owns #1?", "#2"]}')
Traceback (most recent call last):
...
rag_curriculum.methods.globalrag._grammar.PlanCycleError: the plan's dependencies form a cycle: #1 -> #2 -> #1
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..._plumbing import atomic_write_bytes, jsonl_records
from ...errors import ConfigError, DataError

__all__ = [
    "FORMAT_ERRORS", "PLAN_ERRORS", "GlobalRagTrace", "Plan", "PlanCycleError", "PlanError", "PlanNode", "SubPlan",
    "parse_globalrag", "parse_plan", "plan_from_questions", "read_plans", "write_plans",
]


# -- the plan and its graph -------------------------------------------------------------------------------------
#: The kinds of :class:`PlanError`, in the order they are checked.
PLAN_ERRORS = ("plan_not_json", "plan_not_object", "plan_empty", "plan_bad_entry", "plan_bad_placeholder",
               "plan_duplicate_placeholder", "plan_unknown_reference", "plan_cycle")


class PlanError(ValueError):
    """A ``<plan>`` that is not a valid plan; ``kind`` is one of :data:`PLAN_ERRORS`."""

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class PlanCycleError(PlanError):
    """The plan's dependencies form a cycle (``cycle``: the placeholders along it, first repeated at the end)."""

    def __init__(self, cycle: Sequence[str]) -> None:
        super().__init__(f"the plan's dependencies form a cycle: {' -> '.join(cycle)}", kind="plan_cycle")
        self.cycle = list(cycle)


_PLACEHOLDER = re.compile(r"^#(\d+)$")
_REFERENCE = re.compile(r"#(\d+)(?!\d)")


@dataclass(frozen=True)
class PlanNode:
    """One sub-question: its placeholder (``#k``), its text, and (gold plans) its answer where known."""

    placeholder: str
    question: str
    answer: str | None = None


@dataclass(frozen=True)
class Plan:
    """A plan: its nodes in plan order and the dependency edges ``(i, j)`` (node i's answer is used by node j);
    ``origin`` says where a gold plan came from (``musique-decomposition``, ``2wiki-evidences``,
    ``hotpotqa-bridge``, ``hotpotqa-comparison``, ``teacher:MODEL``), None for a model's plan."""

    nodes: tuple[PlanNode, ...]
    edges: tuple[tuple[int, int], ...]
    origin: str | None = None

    @property
    def key(self) -> tuple[int, tuple[tuple[int, int], ...]]:
        """The structure alone (node count, sorted edges): what the structural reward depends on."""
        return len(self.nodes), tuple(sorted(self.edges))

    def index(self, placeholder: str) -> int | None:
        return next((i for i, n in enumerate(self.nodes) if n.placeholder == placeholder), None)

    def graph(self) -> Any:
        """The dependency graph as a ``networkx.DiGraph`` (nodes ``0..n-1`` with ``question``, ``placeholder``,
        ``answer``)."""
        nx = _networkx()
        g = nx.DiGraph()
        for i, n in enumerate(self.nodes):
            g.add_node(i, question=n.question, placeholder=n.placeholder, answer=n.answer)
        g.add_edges_from(self.edges)
        return g

    def topological_order(self) -> list[int]:
        nx = _networkx()
        return list(nx.lexicographical_topological_sort(self.graph()))

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": [{"placeholder": n.placeholder, "question": n.question, "answer": n.answer}
                          for n in self.nodes],
                "edges": [list(e) for e in self.edges], "origin": self.origin}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Plan:
        """A plan from :meth:`to_dict`'s layout; the edges are recomputed from the placeholders and checked
        against the stored ones (a plan file edited by hand that disagrees with itself is refused)."""
        nodes = d.get("nodes")
        if not isinstance(nodes, list) or not nodes:
            raise PlanError("a plan needs a non-empty 'nodes' list", kind="plan_empty")
        try:
            triples = [(str(n["question"]), str(n["placeholder"]), n.get("answer")) for n in nodes]
        except (KeyError, TypeError):
            raise PlanError("every node needs 'question' and 'placeholder'", kind="plan_bad_entry") from None
        plan = plan_from_questions(triples, origin=d.get("origin"))
        stored = d.get("edges")
        if stored is not None and sorted(tuple(e) for e in stored) != sorted(plan.edges):
            raise PlanError(f"the stored edges {stored} disagree with the placeholders' ({[list(e) for e in plan.edges]})",
                            kind="plan_unknown_reference")
        return plan


def _networkx() -> Any:
    try:
        import networkx
    except ImportError:  # pragma: no cover - networkx comes with torch (the train extra)
        raise ConfigError("GlobalRAG's plan graphs need networkx",
                          hint="pip install 'rag-curriculum[globalrag]' (or the train extra)") from None
    return networkx


def plan_from_questions(items: Iterable[tuple[str, str, str | None] | tuple[str, str]], *,
                        origin: str | None = None) -> Plan:
    """A plan from ``(question, placeholder[, answer])`` in plan order; edges from the placeholders each question
    names. Raises :class:`PlanError` (unknown or duplicate placeholders) or :class:`PlanCycleError`."""
    nodes: list[PlanNode] = []
    for item in items:
        q, ph = item[0], item[1]
        ans = item[2] if len(item) > 2 else None
        if not isinstance(q, str) or not q.strip():
            raise PlanError(f"sub-question {len(nodes) + 1} is empty or not a string", kind="plan_bad_entry")
        if not isinstance(ph, str) or not _PLACEHOLDER.match(ph.strip()):
            raise PlanError(f"placeholder {ph!r} of sub-question {len(nodes) + 1} is not #k",
                            kind="plan_bad_placeholder")
        nodes.append(PlanNode(ph.strip(), q.strip(), None if ans is None else str(ans)))
    if not nodes:
        raise PlanError("the plan has no sub-question", kind="plan_empty")
    where = {}
    for i, n in enumerate(nodes):
        if n.placeholder in where:
            raise PlanError(f"placeholder {n.placeholder} is bound by two sub-questions",
                            kind="plan_duplicate_placeholder")
        where[n.placeholder] = i
    edges: set[tuple[int, int]] = set()
    for j, n in enumerate(nodes):
        for m in _REFERENCE.finditer(n.question):
            ref = f"#{m.group(1)}"
            if ref not in where:
                raise PlanError(f"sub-question {n.placeholder} names {ref}, which no sub-question binds",
                                kind="plan_unknown_reference")
            edges.add((where[ref], j))
    plan = Plan(tuple(nodes), tuple(sorted(edges)), origin)
    if all(i < j for i, j in edges):  # every reference to an earlier sub-question: a plan order, so acyclic
        return plan
    nx = _networkx()
    g = plan.graph()
    if not nx.is_directed_acyclic_graph(g):
        cyc = nx.find_cycle(g)
        path = [nodes[u].placeholder for u, _ in cyc] + [nodes[cyc[0][0]].placeholder]
        raise PlanCycleError(path)
    return plan


def parse_plan(text: str) -> Plan:
    """The plan in a ``<plan>`` block's content: a JSON object ``{"Q1": ["question", "#1"], ...}`` (see the module
    docstring). Raises :class:`PlanError` / :class:`PlanCycleError`."""
    try:
        obj = json.loads(text.strip())
    except ValueError as e:
        raise PlanError(f"the plan is not JSON ({e})", kind="plan_not_json") from None
    if not isinstance(obj, dict):
        raise PlanError("the plan is not a JSON object of sub-questions", kind="plan_not_object")
    if not obj:
        raise PlanError("the plan has no sub-question", kind="plan_empty")
    items = []
    for key, value in obj.items():
        if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
            raise PlanError(f"{key}: expected [sub-question, placeholder], got {json.dumps(value)[:60]}",
                            kind="plan_bad_entry")
        items.append((value[0], value[1]))
    return plan_from_questions(items)


# -- a whole trajectory -----------------------------------------------------------------------------------------
#: The format errors of a GlobalRAG trajectory (any one makes R_form 0), besides :data:`PLAN_ERRORS`.
FORMAT_ERRORS = ("unbalanced_tags", "no_plan", "multiple_plans", "plan_after_subplan", "tag_outside_subplan",
                 "no_subplan", "subplan_without_search", "subplan_without_subanswer", "subplan_multiple_subanswers",
                 "bad_subanswer", "unknown_subanswer", "duplicate_subanswer", "missing_subanswer", "no_answer",
                 "multiple_answers", "empty_answer", "text_after_answer")

_TAG = re.compile(r"<(/?)(think|plan|subPlan|search|information|subAnswer|answer)>")
_INFO = re.compile(r"<information>.*?</information>", re.DOTALL)
_INSIDE_SUBPLAN = {"think", "search", "information", "subAnswer"}
_TOP = {"think", "plan", "subPlan", "answer"}
_BINDING = re.compile(r"^\s*(#\d+)\s*=\s*(.*?)\s*$", re.DOTALL)


@dataclass
class SubPlan:
    """One ``<subPlan>`` block: its search queries and its ``#k = answer`` bindings."""

    searches: list[str] = field(default_factory=list)
    bindings: list[tuple[str, str]] = field(default_factory=list)
    closed: bool = True


@dataclass
class GlobalRagTrace:
    """A GlobalRAG trajectory parsed: the plan (None when absent or invalid, with ``plan_error``), the sub-plans,
    the sub-answers by placeholder (the first binding of each), the final answer (the last ``<answer>``), and the
    format errors (:data:`FORMAT_ERRORS`, :data:`PLAN_ERRORS`); ``valid`` is R_form."""

    plan: Plan | None = None
    plan_error: PlanError | None = None
    subplans: list[SubPlan] = field(default_factory=list)
    sub_answers: dict[str, str] = field(default_factory=dict)
    answer: str | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors

    @property
    def searches(self) -> int:
        return sum(len(s.searches) for s in self.subplans)


def parse_globalrag(text: str, *, require_search: bool = True, require_all_subanswers: bool = True,
                    strict_end: bool = True) -> GlobalRagTrace:
    """Parse a trajectory (completion text, ``<information>`` blocks included) and check its format.

    The format is compliant (R_form = 1) when: every protocol tag is closed, in order, and nested as Figure 7
    lays out (``<search>``, ``<information>``, ``<subAnswer>`` only inside ``<subPlan>``; ``<think>`` anywhere);
    exactly one ``<plan>``, before the first ``<subPlan>``, that parses and is acyclic; at least one
    ``<subPlan>``, each with a search (``require_search``) and exactly one ``<subAnswer>`` ``#k = answer``
    binding a placeholder of the plan once; every sub-question answered (``require_all_subanswers``); exactly
    one non-empty ``<answer>``, outside the sub-plans, with nothing but whitespace after it (``strict_end``).

    >>> t = parse_globalrag('<plan>{"Q1": ["Who wrote Emma?", "#1"]}</plan><subPlan><search>Emma author</search>'
    ...                     '<information>Doc 1(Title: Emma) ...</information><subAnswer>#1 = Jane Austen'
    ...                     '</subAnswer></subPlan><answer>Jane Austen</answer>')
    >>> t.valid, t.sub_answers, t.answer, t.searches
    (True, {'#1': 'Jane Austen'}, 'Jane Austen', 1)
    >>> parse_globalrag('<plan>{"Q1": ["Who wrote Emma?", "#1"]}</plan><answer>Austen</answer>').errors
    ['no_subplan', 'missing_subanswer']
    """
    out = GlobalRagTrace()
    body = _INFO.sub("<information></information>", text)
    scan = _scan_tags(body, out)
    errors = scan.errors
    if not scan.balanced:
        errors.insert(0, "unbalanced_tags")
    errors += _plan_errors(out, scan.plan_texts)
    errors += _subplan_errors(out, require_search=require_search, require_all_subanswers=require_all_subanswers)
    errors += _answer_errors(out, scan.answers, body[scan.answer_end:], strict_end=strict_end)
    out.errors = list(dict.fromkeys(errors))
    return out


@dataclass
class _Scan:
    """What one pass over a trajectory's tags found besides the sub-plans (which go into the trace): the plans'
    and answers' texts, where the last answer ends, whether the tags nest, and the errors seen on the way."""

    plan_texts: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    answer_end: int = -1
    balanced: bool = True
    errors: list[str] = field(default_factory=list)


def _scan_tags(body: str, out: GlobalRagTrace) -> _Scan:
    """Walk the protocol's tags in order, checking that they are closed and nested as Figure 7 lays out, and
    collect the sub-plans (into ``out``), the plans, the bindings and the answers."""
    scan = _Scan()
    stack: list[str] = []
    opened_at: list[int] = []
    current: SubPlan | None = None
    seen_subplan = False
    for m in _TAG.finditer(body):
        closing, tag = m.group(1) == "/", m.group(2)
        if not closing:
            parent = stack[-1] if stack else None
            if parent is None and tag not in _TOP and tag not in _INSIDE_SUBPLAN:
                scan.balanced = False
            elif parent is None and tag in _INSIDE_SUBPLAN - {"think"}:
                scan.errors.append("tag_outside_subplan")
            elif parent == "subPlan" and tag not in _INSIDE_SUBPLAN:
                scan.balanced = False
            elif parent is not None and parent != "subPlan":
                scan.balanced = False
            stack.append(tag)
            opened_at.append(m.end())
            if tag == "subPlan":
                seen_subplan = True
                current = SubPlan(closed=False)
                out.subplans.append(current)
            elif tag == "plan" and seen_subplan:
                scan.errors.append("plan_after_subplan")
            continue
        if not stack or stack[-1] != tag:
            scan.balanced = False
            break
        stack.pop()
        content = body[opened_at.pop():m.start()]
        if tag == "plan":
            scan.plan_texts.append(content)
        elif tag == "subPlan" and current is not None:
            current.closed = True
            current = None
        elif tag == "search" and current is not None:
            current.searches.append(content.strip())
        elif tag == "subAnswer":
            b = _BINDING.match(content)
            if b is None or not b.group(2):
                scan.errors.append("bad_subanswer")
            elif current is not None:
                current.bindings.append((b.group(1), b.group(2)))
        elif tag == "answer":
            scan.answers.append(content.strip())
            scan.answer_end = m.end()
    if stack:
        scan.balanced = False
    return scan


def _plan_errors(out: GlobalRagTrace, plan_texts: list[str]) -> list[str]:
    """Exactly one plan, which parses and is acyclic (``out.plan``, or ``out.plan_error``)."""
    if not plan_texts:
        return ["no_plan"]
    errors = ["multiple_plans"] if len(plan_texts) > 1 else []
    try:
        out.plan = parse_plan(plan_texts[0])
    except PlanError as e:
        out.plan_error = e
        errors.append(e.kind)
    return errors


def _subplan_errors(out: GlobalRagTrace, *, require_search: bool, require_all_subanswers: bool) -> list[str]:
    """Each sub-plan searches and binds one placeholder of the plan, once (``out.sub_answers``); every
    sub-question is answered."""
    errors = [] if out.subplans else ["no_subplan"]
    for sp in out.subplans:
        if require_search and not sp.searches:
            errors.append("subplan_without_search")
        if not sp.bindings and sp.closed:
            errors.append("subplan_without_subanswer")
        elif len(sp.bindings) > 1:
            errors.append("subplan_multiple_subanswers")
        for ph, ans in sp.bindings:
            if out.plan is not None and out.plan.index(ph) is None:
                errors.append("unknown_subanswer")
            elif ph in out.sub_answers:
                errors.append("duplicate_subanswer")
            else:
                out.sub_answers[ph] = ans
    if require_all_subanswers and out.plan is not None and any(
            n.placeholder not in out.sub_answers for n in out.plan.nodes):
        errors.append("missing_subanswer")
    return errors


def _answer_errors(out: GlobalRagTrace, answers: list[str], after: str, *, strict_end: bool) -> list[str]:
    """Exactly one non-empty answer (``out.answer``: the last), with nothing but whitespace ``after`` it."""
    if not answers:
        return ["no_answer"]
    out.answer = answers[-1]
    errors = ["multiple_answers"] if len(answers) > 1 else []
    if not out.answer:
        errors.append("empty_answer")
    if strict_end and after.strip():
        errors.append("text_after_answer")
    return errors


# -- plan files ---------------------------------------------------------------------------------------------
def write_plans(path: str | Path, records: Iterable[Mapping[str, Any]]) -> Path:
    """Write plan records as JSONL, atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, "".join(json.dumps(dict(r), ensure_ascii=False) + "\n" for r in records)
                       .encode("utf-8"))
    return path


def read_plans(path: str | Path) -> dict[str, Plan]:
    """A plan file (:func:`write_plans`) as ``{id: Plan}``; a bad line is a :class:`DataError` naming the file,
    the line and the field."""
    path = Path(path)
    if not path.is_file():
        raise DataError("no such plan file", kind="missing_file", path=str(path))
    out: dict[str, Plan] = {}
    def bad(i: int, e: ValueError) -> Exception:
        return DataError(f"not JSON ({e})", kind="bad_json", path=str(path), record=f"line {i}")

    with path.open(encoding="utf-8") as f:
        for i, rec in jsonl_records(f, bad):
            if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
                raise DataError("expected an object with a string 'id'", kind="missing_field", path=str(path),
                                record=f"line {i}", field="id")
            try:
                out[rec["id"]] = Plan.from_dict(rec)
            except PlanError as e:
                raise DataError(str(e), kind=e.kind, path=str(path), record=f"line {i} (id {rec['id']})",
                                field="nodes") from None
    return out
