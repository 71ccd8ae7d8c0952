"""A ReAct agent (Yao et al., 2023) on the toolkit's search environment, and the consistency-ranked best-of-N of
"ReACT+CRAG" (``../shared/papers/react-crag.txt``).

**The format** (:class:`ReActFormat`, a turn format of :func:`~rag_curriculum.agents.run_rollouts`): the model
writes ``Thought i: ...`` then ``Action i: Search[entity]`` | ``Lookup[keyword]`` | ``Finish[answer]``; a turn
stops at ``\\nObservation`` (ReAct's stop string, without its step number) and the environment completes the line
``Observation i: ...``:

- ``Search[e]``: the retriever's top ``top_k`` passages for ``e`` are the "page" (each paragraph ``title: text``);
  the observation is the page's first ``sentences`` sentences (the paper's Table 3: "the first 5 sentences";
  ReAct's ``get_page_obs``: paragraphs split on newlines, sentences on ``". "``). No passage:
  ``Could not find e.``
- ``Lookup[k]``: ReAct's ``lookup``: the sentences of the current page that contain ``k`` (case-insensitive), one
  per call, ``(Result j / n) sentence``, then ``No more results.``; a new keyword starts again.
- ``Finish[a]``: the answer; the trajectory ends.

A turn is classified by :func:`parse_react_turn`, in the order of this table (the first rule that applies wins);
a malformed action is never executed and never taken as an answer:

=======================  =====================================================================================
``forged_observation``   the model wrote an ``Observation`` line itself
``no_action``            no ``Action:`` line
``multiple_actions``     more than one ``Action:`` line in one turn
``text_after_action``    text after the action line (the model went on without waiting for the observation)
``malformed_action``     the action line is not ``Name[argument]`` (``Search[x``, ``Search x``, ``Search[x] y``)
``unknown_action``       ``Name[argument]`` with a name other than Search, Lookup, Finish (any case)
``empty_argument``       ``Search[]``, ``Lookup[ ]``, ``Finish[]``
=======================  =====================================================================================

A turn with an error is answered ``Observation i: Invalid action: <the action line>`` (ReAct's ``Invalid
action: {}``), or, with ``on_invalid="stop"``, ends the trajectory; either way the error is recorded by type.

**The consistency score** ("CRAG-inspired": the paper names the criteria, "internal consistency between thoughts
and actions", "absence of contradictions", "agreement between retrieved facts and final answer", and what is
penalised, "repetitive reasoning loops", "contradictory thoughts or unsupported conclusions", but gives no formula,
weights or code). :func:`consistency_score` is the toolkit's own, deterministic definition on one trajectory::

    score = w_a * agreement + w_t * thought_action - w_l * loops - w_c * contradiction - w_e * early - w_f * errors

with every term in [0, 1] (:class:`CragWeights`, all weights 1 by default):

- ``agreement``: the share of the answer's normalised tokens found in the observations' normalised tokens (1.0
  when the normalised answer occurs in them whole); a yes/no answer scores 1.0 when some observation was seen
  (a comparison's answer is not written in the evidence), else 0.
- ``thought_action``: over Search/Lookup steps with a non-empty thought, the share whose argument shares a
  normalised token with that thought (1.0 without such steps).
- ``loops``: the larger of the repeated-action share (actions identical, normalised, to an earlier one) and the
  repeated-thought share.
- ``contradiction``: 1 when the thought of the Finish step states an answer ("the answer is X", "answer: X") whose
  normalised form neither equals nor contains nor is contained in the normalised Finish answer.
- ``early``: 1 when Finish comes before any Search/Lookup observation.
- ``errors``: the share of the trajectory's turns with a format error.

A trajectory without a Finish answer has no score (ranked below every finished one). Best-of-N
(:func:`best_of_n`) takes the highest score, the earliest sample on ties (Eqs. 1 and 4). Self-consistency
(:func:`self_consistency`) is the majority over the normalised answers of the finished trajectories (Wang et al.,
2023), ties to the answer seen first; its agreement rate and answer entropy are reported with it.

>>> parse_react_turn("Thought 1: I need Paris.\\nAction 1: Search[Paris]\\nObservation")
Turn(action='search', content='Paris', error=None)
>>> parse_react_turn("Thought 2: so it is 3.\\nAction 2: finish[3]").action
'answer'
>>> parse_react_turn("Action 1: Search[Paris").error
'malformed_action'
>>> parse_react_turn("Action 1: Google[Paris]").error
'unknown_action'
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..._metrics import normalize_answer
from ..._plumbing import AsDict
from ...errors import ConfigError
from ...grammar import Turn
from ...prompts import AGENT_TEMPLATES, SearchTemplate

#: ReAct's instruction for HotpotQA (``hotpotqa.ipynb`` of ysymyth/ReAct), verbatim, without its closing line
#: "Here are some examples." (the toolkit ships no few-shot trajectories; a template with them can be registered).
REACT_INSTRUCTION = (
    "Solve a question answering task with interleaving Thought, Action, Observation steps. Thought can reason about "
    "the current situation, and Action can be three types: \n"
    "(1) Search[entity], which searches the exact entity on Wikipedia and returns the first paragraph if it exists. "
    "If not, it will return some similar entities to search.\n"
    "(2) Lookup[keyword], which returns the next sentence containing keyword in the current passage.\n"
    "(3) Finish[answer], which returns the answer and finishes the task.\n"
)
#: The ``react`` template: the instruction, then ``Question: {question}`` as ReAct appends it (``question + "\n"``).
REACT_PROMPT = REACT_INSTRUCTION + "Question: {question}\n"

#: The ``react`` agent template (registered by name when the package is imported).
REACT_TEMPLATE = SearchTemplate("react", REACT_PROMPT)


def react_fewshot_template(
    prompts: str | Path | Mapping[str, str], *, key: str = "webthink_simple6", name: str = "react-fewshot"
) -> SearchTemplate:
    """ReAct's few-shot prompt exactly as its ``hotpotqa.ipynb`` builds it: the instruction, ``Here are some
    examples.``, the six HotpotQA trajectories of ``prompts_naive.json[key]``, then ``Question: {question}\n``.
    ``prompts``: a copy of ReAct's ``prompts/prompts_naive.json`` (MIT; not shipped with the toolkit) or its
    mapping. The template is registered under ``name`` (again if it was: the file decides) and returned."""
    import json

    where = str(prompts) if not isinstance(prompts, Mapping) else "the prompts mapping"
    if not isinstance(prompts, Mapping):
        try:
            prompts = json.loads(Path(prompts).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ConfigError(
                f"{where}: cannot read ReAct's prompts ({type(e).__name__}: {e})",
                hint="pass a copy of ReAct's prompts/prompts_naive.json",
            ) from None
    examples = prompts.get(key) if isinstance(prompts, Mapping) else None
    if not isinstance(examples, str) or "\nQuestion: " not in examples:
        known = sorted(prompts) if isinstance(prompts, Mapping) else []
        raise ConfigError(
            f"{where}: no few-shot trajectories under {key!r} (keys: {known})",
            hint="pass ReAct's prompts/prompts_naive.json; webthink_simple6 is its ReAct prompt",
        )
    text = (
        REACT_INSTRUCTION
        + "Here are some examples.\n"
        + examples.replace("{", "{{").replace("}", "}}")
        + "Question: {question}\n"
    )
    template = SearchTemplate(name, text)
    AGENT_TEMPLATES.register(name, template, overwrite=True)
    return template


#: Where a ReAct turn stops (ReAct stops at ``\nObservation {i}:``; the step number is left to the environment).
REACT_STOP = ("\nObservation",)

#: The format errors of one ReAct turn, in the order they are checked.
REACT_ERRORS = (
    "forged_observation",
    "no_action",
    "multiple_actions",
    "text_after_action",
    "malformed_action",
    "unknown_action",
    "empty_argument",
)

REACT_ACTIONS = {"search": "search", "lookup": "lookup", "finish": "answer"}

_ACTION_LINE = re.compile(r"^[ \t]*Action(?:[ \t]*\d+)?[ \t]*:[ \t]*(.*)$", re.MULTILINE)
_OBS_LINE = re.compile(r"^[ \t]*Observation\b", re.MULTILINE)
_CALL = re.compile(r"^(\w+)\[(.*)\]$", re.DOTALL)
_THOUGHT = re.compile(r"^\s*Thought(?:[ \t]*\d+)?[ \t]*:", re.IGNORECASE)


def _strip_stop(text: str) -> str:
    for s in REACT_STOP:
        if text.endswith(s):
            return text[: -len(s)]
    return text


def parse_react_turn(text: str) -> Turn:
    """Classify one ReAct turn (see the module docstring): ``action`` is ``search``, ``lookup``, ``answer`` or
    None; ``content`` the argument, stripped."""
    text = _strip_stop(text)
    if _OBS_LINE.search(text):
        return Turn(None, "", "forged_observation")
    lines = list(_ACTION_LINE.finditer(text))
    if not lines:
        return Turn(None, "", "no_action")
    if len(lines) > 1:
        return Turn(None, "", "multiple_actions")
    m = lines[0]
    if text[m.end() :].strip():
        return Turn(None, "", "text_after_action")
    call = _CALL.match(m.group(1).strip())
    if call is None:
        return Turn(None, "", "malformed_action")
    action = REACT_ACTIONS.get(call.group(1).lower())
    if action is None:
        return Turn(None, "", "unknown_action")
    arg = call.group(2).strip()
    if not arg:
        return Turn(None, "", "empty_argument")
    return Turn(action, arg, None)


def split_thought(text: str) -> str:
    """The thought of a turn: its text before the action line, without the ``Thought i:`` label."""
    text = _strip_stop(text)
    m = _ACTION_LINE.search(text)
    head = text[: m.start()] if m else text
    return _THOUGHT.sub("", head.strip(), count=1).strip()


def page_sentences(paragraphs: Iterable[str]) -> list[str]:
    """ReAct's sentence split of a page: paragraphs on newlines, sentences on ``". "``, each ending in one period.

    >>> page_sentences(["Paris: Paris is the capital. It is large.", "Lyon. A city"])
    ['Paris: Paris is the capital.', 'It is large.', 'Lyon.', 'A city.']
    """
    out = []
    for block in paragraphs:
        for p in block.split("\n"):
            for s in p.strip().split(". "):
                s = s.strip()
                if s:
                    out.append(s if s.endswith(".") else s + ".")
    return out


class ReActFormat:
    """ReAct's turn format for :func:`~rag_curriculum.agents.run_rollouts` (see the module docstring).
    ``sentences``: sentences of the page a Search shows (the paper: 5)."""

    name = "react"
    stop: tuple[str, ...] = REACT_STOP
    templates = ("react",)

    def __init__(self, sentences: int = 5) -> None:
        if sentences < 1:
            raise ConfigError(f"sentences must be >= 1 (got {sentences})")
        self.sentences = sentences

    def parse(self, text: str) -> Turn:
        return parse_react_turn(text)

    @staticmethod
    def _line(traj: Any, obs: str) -> str:
        """``Observation i: obs``: the model's turn ended at the stop string ``\\nObservation`` (kept, as every
        backend keeps it) or without it (end of text)."""
        last = traj.segments[-1].text if traj.segments else ""
        head = f" {traj.turns}: " if last.endswith(REACT_STOP[0]) else f"\nObservation {traj.turns}: "
        return head + obs.replace("\n", " ").strip() + "\n"

    def observe(self, hits: Sequence[Any], traj: Any) -> str:
        entity = traj.searches[-1].query if traj.searches else ""
        page = page_sentences(f"{h.title}: {h.text}" if h.title else h.text for h in hits)
        traj.state["page"] = page
        traj.state.pop("lookup", None)
        if not page:
            return self._line(traj, f"Could not find {entity}.")
        return self._line(traj, " ".join(page[: self.sentences]))

    def act(self, turn: Turn, traj: Any) -> str:
        if turn.action != "lookup":  # pragma: no cover - the loop sends only Lookup here
            raise ConfigError(f"react has no local action {turn.action!r}")
        keyword = turn.content
        state = traj.state.get("lookup")
        if state is None or state[0] != keyword:
            hits = [s for s in traj.state.get("page", []) if keyword.lower() in s.lower()]
            state = [keyword, hits, 0]
            traj.state["lookup"] = state
        _, hits, cnt = state
        if cnt >= len(hits):
            return self._line(traj, "No more results.")
        state[2] += 1
        return self._line(traj, f"(Result {cnt + 1} / {len(hits)}) {hits[cnt]}")

    def invalid(self, turn: Turn, traj: Any) -> str:
        text = _strip_stop(traj.segments[-1].text if traj.segments else "")
        m = _ACTION_LINE.search(text)
        what = m.group(1).strip() if m else (text.strip().splitlines() or [""])[-1].strip()
        return self._line(traj, f"Invalid action: {what}")


# -- a whole trajectory -----------------------------------------------------------------------------------------
@dataclass
class ReActStep:
    """One step: the thought, the action (``search`` | ``lookup`` | ``answer`` | None on a format error), its
    argument, the observation that followed ('' for none) and the format error."""

    thought: str
    action: str | None
    argument: str
    observation: str = ""
    error: str | None = None


def react_steps(segments: Sequence[Any]) -> list[ReActStep]:
    """The steps of a ReAct trajectory from its segments (``Segment`` or ``{"source", "text"}``, as
    ``trajectories.jsonl`` holds them)."""
    steps: list[ReActStep] = []
    for seg in segments:
        source, text = (seg["source"], seg["text"]) if isinstance(seg, dict) else (seg[0], seg[1])
        if source == "model":
            turn = parse_react_turn(text)
            steps.append(ReActStep(split_thought(text), turn.action, turn.content, "", turn.error))
        elif steps:
            obs = re.sub(r"^\s*(?:Observation\s*)?\d*\s*:\s*", "", text, count=1).strip()
            steps[-1].observation = (steps[-1].observation + " " + obs).strip()
    return steps


@dataclass(frozen=True)
class CragWeights(AsDict):
    """The weights of :func:`consistency_score`'s terms (the toolkit's choice: all 1)."""

    agreement: float = 1.0
    thought_action: float = 1.0
    loops: float = 1.0
    contradiction: float = 1.0
    early: float = 1.0
    errors: float = 1.0


@dataclass
class Consistency:
    """A trajectory's CRAG-inspired score (None without a Finish answer) and its terms."""

    score: float | None
    answer: str | None
    terms: dict[str, float]


_STATED = re.compile(r"(?:the answer is|answer\s*:)\s*(.+?)(?:\.\s|\.$|\n|$)", re.IGNORECASE)
_YES_NO = frozenset(("yes", "no"))


def _tokens(s: str) -> list[str]:
    return normalize_answer(s).split()


def _repeat_share(items: Sequence[str]) -> float:
    items = [normalize_answer(x) for x in items if x.strip()]
    return (len(items) - len(set(items))) / len(items) if items else 0.0


def consistency_score(steps: Sequence[ReActStep], weights: CragWeights | None = None) -> Consistency:
    """The CRAG-inspired score of one trajectory's steps (see the module docstring for each term)."""
    w = weights or CragWeights()
    finish = next((s for s in steps if s.action == "answer"), None)
    observed = [s.observation for s in steps if s.action in ("search", "lookup") and s.observation]
    answer = finish.argument if finish else None
    evidence = set(_tokens(" ".join(observed)))
    ev_text = " " + normalize_answer(" ".join(observed)) + " "
    terms: dict[str, float] = {}
    if answer is None:
        terms["agreement"] = 0.0
    else:
        norm = normalize_answer(answer)
        toks = norm.split()
        if norm in _YES_NO:
            terms["agreement"] = 1.0 if observed else 0.0
        elif norm and f" {norm} " in ev_text:
            terms["agreement"] = 1.0
        else:
            terms["agreement"] = sum(t in evidence for t in toks) / len(toks) if toks else 0.0
    acts = [s for s in steps if s.action in ("search", "lookup") and s.thought.strip()]
    terms["thought_action"] = (
        (sum(bool(set(_tokens(s.argument)) & set(_tokens(s.thought))) for s in acts) / len(acts))
        if acts
        else 1.0
    )
    actions = [f"{s.action}[{s.argument}]" for s in steps if s.action is not None]
    terms["loops"] = max(_repeat_share(actions), _repeat_share([s.thought for s in steps]))
    contradiction = 0.0
    if finish is not None:
        m = _STATED.search(finish.thought)
        if m:
            stated, given = normalize_answer(m.group(1)), normalize_answer(answer or "")
            if stated and stated != given and stated not in given and given not in stated:
                contradiction = 1.0
    terms["contradiction"] = contradiction
    terms["early"] = 1.0 if finish is not None and not observed else 0.0
    terms["errors"] = sum(s.error is not None for s in steps) / len(steps) if steps else 0.0
    if answer is None:
        return Consistency(None, None, terms)
    score = (
        w.agreement * terms["agreement"]
        + w.thought_action * terms["thought_action"]
        - w.loops * terms["loops"]
        - w.contradiction * terms["contradiction"]
        - w.early * terms["early"]
        - w.errors * terms["errors"]
    )
    return Consistency(score, answer, terms)


def best_of_n(scores: Sequence[Consistency]) -> int | None:
    """Index of the highest-scoring trajectory (the earliest on ties), None when none has an answer."""
    best, best_score = None, -math.inf
    for i, c in enumerate(scores):
        if c.score is not None and c.score > best_score:
            best, best_score = i, c.score
    return best


def self_consistency(answers: Sequence[str | None]) -> dict[str, Any]:
    """Majority vote over normalised answers (None: no answer, not a vote): the chosen answer (as first written),
    the agreement rate (its votes / answered trajectories) and the answers' entropy in bits.

    >>> self_consistency(["Paris", "paris.", "Lyon", None])
    {'answer': 'Paris', 'votes': 2, 'agreement': 0.6667, 'entropy': 0.9183}
    """
    given = [(normalize_answer(a), a) for a in answers if a is not None]
    if not given:
        return {"answer": None, "votes": 0, "agreement": 0.0, "entropy": 0.0}
    counts = Counter(n for n, _ in given)
    first: dict[str, str] = {}
    for n, a in given:
        first.setdefault(n, a)
    top = max(counts.values())
    choice = next(n for n, _ in given if counts[n] == top)
    total = len(given)
    entropy = -sum(c / total * math.log2(c / total) for c in counts.values())
    return {
        "answer": first[choice],
        "votes": top,
        "agreement": round(top / total, 4),
        "entropy": round(entropy + 0.0, 4),
    }


__all__ = [
    "REACT_ERRORS",
    "REACT_INSTRUCTION",
    "REACT_PROMPT",
    "REACT_STOP",
    "Consistency",
    "CragWeights",
    "ReActFormat",
    "ReActStep",
    "best_of_n",
    "consistency_score",
    "page_sentences",
    "parse_react_turn",
    "react_fewshot_template",
    "react_steps",
    "self_consistency",
    "split_thought",
]
