"""The one rollout loop of a search agent, shared by partition, eval and training.

Given rows (a curriculum's rows, or any dicts with ``id``, ``question``, ``answers``), a generation backend and a
retriever, each of ``n`` trajectories per row runs turn by turn:

1. the model generates until ``</search>`` or ``</answer>`` (the backend continues the conversation's last,
   assistant message: every backend of the toolkit implements ``generate(..., stop=...)`` with a trailing
   assistant message continued, as ``continue_final_message`` does in transformers and vLLM);
2. the turn is parsed (:func:`~rag_curriculum.grammar.parse_turn`); a search is sent to the retriever (all
   the searches of a turn in one batch), its ``k`` results (shaped by the row's level, :mod:`._difficulty`) are
   appended inside ``<information>`` in Search-R1's layout; an answer ends the trajectory; a turn with a format
   error gets Search-R1's "My previous action is invalid" (or, with ``on_invalid="stop"``, ends it);
3. until the answer, the turn budget (``max_turns`` model turns) or the context budget (``max_context_tokens``:
   prompt plus trajectory, counted with the backend's tokenizer where it has one, else characters / 4).

The turn format is a hook (``fmt``: stop strings, parser, how observations and feedback are rendered, and the
format's own non-search actions); Search-R1's tags are the default (:class:`SearchR1Format`), ReAct's
Thought / Action / Observation lines another (:mod:`._react`).

Nothing is cut silently: a trajectory stopped by a budget says so in ``status`` and is counted. Every query, every
retrieved passage (its id in the retriever, whether it was gold) and every format error is recorded.

All the active trajectories of a turn go to the backend in one call, each with its own seed
(``derive_seed(seed, row id, sample, turn)``), so a trajectory does not depend on what it is batched with (where the
backend honours per-prompt seeds).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .._plumbing import AsDict, derive_seed, renamed_keywords
from ..errors import ConfigError, GenerationError
from ..generation import cut_at_stop
from ..grammar import STOP, Segment, information_block, parse_turn
from ..prompts import get_agent_template
from ._difficulty import RowView, SearchDifficulty
from ._protocol import INVALID_ACTION
from ._retrievers import Retriever

log = logging.getLogger(__name__)

STATUSES = ("answer", "turn_budget", "context_budget", "format_error")


class SearchR1Format:
    """The rollout loop's format hook, Search-R1's tags (the default): the stop strings of a turn, its parser, what
    the environment appends after a search (``observe``), after a format error (``invalid``) and after a turn whose
    action is neither ``search`` nor ``answer`` (``act``: another format's local action, e.g. ReAct's ``Lookup``).
    Another format (:class:`rag_curriculum.methods.react_crag.ReActFormat`) implements the same five members; per-trajectory
    state it needs lives in ``Trajectory.state``."""

    name = "search-r1"
    stop: tuple[str, ...] = STOP

    def parse(self, text: str) -> Any:
        return parse_turn(text)

    def observe(self, hits: Sequence[Any], traj: Trajectory) -> str:
        return information_block([h.shown() for h in hits])

    def invalid(self, turn: Any, traj: Trajectory) -> str:
        return INVALID_ACTION

    def act(self, turn: Any, traj: Trajectory) -> str:  # pragma: no cover - Search-R1 has no other action
        raise GenerationError(f"search-r1 has no action {turn.action!r}")


@renamed_keywords(topk="top_k")
@dataclass
class RolloutConfig(AsDict):
    """The search environment's settings.

    Attributes:
        template: the agent's prompt template (``search-r1``, ``search-r1-original``, ... in ``AGENT_TEMPLATES``).
        top_k: passages per search (Search-R1: 3).
        max_turns: model turns per trajectory, the answering one included.
        max_context_tokens: the trajectory's token budget (prompt and every segment).
        on_invalid: a turn that breaks the format: ``feedback`` (Search-R1: tell the model, go on) or ``stop``.
        seed: the sampling seed (each turn's seed is derived from it, the row and the sample).

    Raises:
        ConfigError: a budget below 1, or another ``on_invalid``.
        UnknownNameError: an unknown template.
    """

    template: str = "search-r1"
    top_k: int = 3  # Search-R1's retriever top_k
    max_turns: int = 4  # model turns, the answering one included
    max_context_tokens: int = 8192
    on_invalid: str = "feedback"  # feedback (Search-R1: tell the model, go on) | stop
    seed: int = 0

    def __post_init__(self) -> None:
        if self.top_k < 1 or self.max_turns < 1 or self.max_context_tokens < 1:
            raise ConfigError(f"top_k, max_turns and max_context_tokens must be >= 1 (got {self.top_k}, "
                              f"{self.max_turns}, {self.max_context_tokens})")
        if self.on_invalid not in ("feedback", "stop"):
            raise ConfigError(f"on_invalid={self.on_invalid!r}; choose feedback or stop")
        get_agent_template(self.template)


@dataclass
class SearchCall:
    """One executed search: the turn, the query, the passages returned (ids in the retriever, gold flags), and what
    the difficulty setting did (``shaped``)."""

    turn: int
    query: str
    ids: list[str]
    gold: list[bool]
    short: bool = False  # fewer passages than top_k came back
    shaped: dict[str, Any] = field(default_factory=dict)


@dataclass
class Trajectory:
    """One rollout: the prompt messages, the segments written by the model and appended by the environment, the
    searches, per-turn format errors, the answer (None without one) and how it ended (:data:`STATUSES`)."""

    row_id: str
    sample: int
    prompt: list[dict[str, str]]
    segments: list[Segment] = field(default_factory=list)
    searches: list[SearchCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    answer: str | None = None
    status: str = ""
    turns: int = 0
    state: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # a format's own (not saved)

    @property
    def text(self) -> str:
        """The completion: everything after the prompt (model turns and ``<information>`` blocks)."""
        return "".join(s.text for s in self.segments)

    @property
    def gold_found(self) -> bool:
        return any(any(c.gold) for c in self.searches)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("state", None)
        d["segments"] = [{"source": s.source, "text": s.text} for s in self.segments]
        for s in d["searches"]:  # an empty {} would be a struct without fields: pandas / polars cannot write it back
            s["shaped"] = s["shaped"] or None
        return d


def _counter(backend: Any) -> tuple[Callable[[str], int], str]:
    tok = getattr(backend, "tokenizer", None)
    if tok is not None and callable(getattr(tok, "encode", None)):
        return (lambda s: len(tok.encode(s, add_special_tokens=False))), "tokens"
    return (lambda s: (len(s) + 3) // 4), "characters / 4"


def _check_backend(backend: Any) -> None:
    import inspect

    try:
        params = inspect.signature(backend.generate).parameters
    except (TypeError, ValueError):  # pragma: no cover
        params = {}
    if "stop" not in params:
        raise ConfigError(f"the {getattr(backend, 'name', type(backend).__name__)} backend cannot stop at "
                          "</search>: its generate() takes no stop=",
                          hint="use a backend of the toolkit (vllm, openai, transformers, scripted)")


def run_rollouts(backend: Any, rows: Iterable[dict[str, Any]], retriever: Retriever, sampling: Any, *,
                 n: int = 1, config: RolloutConfig | None = None, difficulty: SearchDifficulty | None = None,
                 on_turn: Callable[[int, int], None] | None = None, fmt: Any = None) -> list[Trajectory]:
    """``n`` trajectories per row (row order, then sample order). ``sampling``: the per-turn sampling settings
    (:class:`~rag_curriculum.generation.SamplingConfig`; its ``n`` is ignored: each trajectory samples once per
    turn; ``max_tokens`` bounds one turn). ``on_turn(turn, active)`` reports progress. ``fmt``: the turn format
    (how a turn stops and is parsed, how observations are rendered; default :class:`SearchR1Format`).

    Args:
        backend: a generation backend that takes per-prompt ``seeds`` and ``stop`` (every built-in one does).
        rows: the questions: dicts with ``id``, ``question`` and ``answers`` (a shard row, a FlashRAG row).
        retriever: what the searches ask (:func:`open_retriever`).
        sampling: the per-turn sampling settings (see above).
        n: trajectories per row.
        config: the environment's settings (None: :class:`RolloutConfig`'s defaults).
        difficulty: how searches are made harder (hard negatives, gold withheld; None: as retrieved).
        on_turn: see above.
        fmt: see above.

    Returns:
        The trajectories: segments, searches (queries, passage ids, gold flags), format errors, the answer and how
        each ended (``answer``, ``turn_budget``, ``context_budget``, ``format_error``).

    Raises:
        ConfigError: a backend whose ``generate`` takes no ``stop`` (it could not stop at ``</search>``).
        GenerationError: a backend that returns the wrong number of completions.
        RetrieverError: a retriever that cannot answer.
        UnknownNameError: an unknown template.

    Examples:
        >>> from rag_curriculum.agents import Hit, run_rollouts
        >>> from rag_curriculum.generation import SamplingConfig, get_backend
        >>> class Fixed:
        ...     def search(self, queries, k):
        ...         return [[Hit("d1", "Paris", "Paris is the capital of France.")] for _ in queries]
        ...     def describe(self):
        ...         return {"kind": "fixed"}
        >>> def script(messages, n, seed):   # a scripted model: search once, then answer
        ...     searched = messages[-1]["role"] == "assistant"
        ...     return "<answer> Paris </answer>" if searched else "<search> capital of France </search>"
        >>> rows = [{"id": "q1", "question": "What is the capital of France?", "answers": ["Paris"]}]
        >>> [t] = run_rollouts(get_backend("scripted", script=script), rows, Fixed(), SamplingConfig(max_tokens=50))
        >>> t.answer, t.status, [s.query for s in t.searches], t.searches[0].ids
        ('Paris', 'answer', ['capital of France'], ['d1'])
    """
    from dataclasses import replace

    cfg = config or RolloutConfig()
    fmt = fmt or SearchR1Format()
    stop = list(fmt.stop)
    shape = difficulty or SearchDifficulty()
    template = get_agent_template(cfg.template)
    _check_backend(backend)
    count, _unit = _counter(backend)
    views = [RowView(r) for r in rows]
    trajs = [Trajectory(v.id, s, template.render(v.question)) for v in views for s in range(n)]
    view_of = [v for v in views for _ in range(n)]
    prompt_len = [count(t.prompt[-1]["content"]) for t in trajs]
    used = list(prompt_len)
    one = replace(sampling, n=1)
    active = list(range(len(trajs)))
    for turn in range(cfg.max_turns):
        if not active:
            break
        if on_turn is not None:
            on_turn(turn, len(active))
        prompts = []
        for i in active:
            t = trajs[i]
            msgs = list(t.prompt)
            if t.segments:
                msgs.append({"role": "assistant", "content": t.text})
            prompts.append(msgs)
        seeds = [derive_seed(cfg.seed, trajs[i].row_id, trajs[i].sample, turn, bits=63) for i in active]
        outs = backend.generate(prompts, one, seeds=seeds, stop=stop)
        if len(outs) != len(active):
            raise GenerationError(f"the backend returned {len(outs)} completion lists for {len(active)} prompts")
        searches: list[tuple[int, str]] = []
        still: list[int] = []
        for i, out in zip(active, outs, strict=True):
            text = cut_at_stop(out[0] if out else "", stop)
            step, query = _model_turn(trajs[i], text, turn, i, used, cfg=cfg, fmt=fmt, count=count)
            if step == "search":
                searches.append((i, query))
            elif step == "continue":
                still.append(i)
        if searches:
            still += _run_searches(searches, trajs, view_of, used, retriever, shape, cfg=cfg, fmt=fmt, count=count)
        active = sorted(still)
    for t in trajs:  # pragma: no cover - every path above sets a status
        if not t.status:
            t.status = "turn_budget"
    return trajs


def _model_turn(t: Trajectory, text: str, turn: int, i: int, used: list[int], *, cfg: RolloutConfig, fmt: Any,
                count: Callable[[str], int]) -> tuple[str, str]:
    """Record the model's turn ``text`` in trajectory ``t`` (number ``i``; ``used[i]``, its tokens so far) and say
    what follows: ``("search", query)``, ``("continue", "")`` (a local action's or an invalid turn's observation
    was added) or ``("end", "")`` (its status is set: an answer, a budget spent, a format error with
    ``on_invalid=stop``)."""
    t.segments.append(Segment("model", text))
    t.turns += 1
    used[i] += count(text)
    parsed = fmt.parse(text)
    if parsed.error is not None:
        t.errors.append(parsed.error)
    if parsed.action == "answer":
        t.answer, t.status = parsed.content, "answer"
    elif used[i] >= cfg.max_context_tokens:
        t.status = "context_budget"
    elif turn + 1 >= cfg.max_turns:
        t.status = "turn_budget"
    elif parsed.action == "search":
        return "search", parsed.content
    elif parsed.action is not None:  # a local action of the format (ReAct's Lookup)
        return _observe(t, fmt.act(parsed, t), i, used, cfg=cfg, count=count), ""
    elif cfg.on_invalid == "stop":
        t.status = "format_error"
    else:
        feedback = fmt.invalid(parsed, t)
        t.segments.append(Segment("env", feedback))
        used[i] += count(feedback)
        return "continue", ""
    return "end", ""


def _observe(t: Trajectory, text: str, i: int, used: list[int], *, cfg: RolloutConfig,
             count: Callable[[str], int]) -> str:
    """Add the environment's ``text`` to trajectory ``t``; ``"end"`` when it spends the context budget."""
    t.segments.append(Segment("env", text))
    used[i] += count(text)
    if used[i] >= cfg.max_context_tokens:
        t.status = "context_budget"
        return "end"
    return "continue"


def _run_searches(searches: list[tuple[int, str]], trajs: list[Trajectory], view_of: list[RowView], used: list[int],
                  retriever: Retriever, shape: SearchDifficulty, *, cfg: RolloutConfig, fmt: Any,
                  count: Callable[[str], int]) -> list[int]:
    """One retriever call for the turn's searches (``(trajectory number, query)``), each result shaped by the
    row's search difficulty and shown to its trajectory; the numbers of the trajectories that go on."""
    k = cfg.top_k
    extra = max(shape.extra(k, view_of[i]) for i, _ in searches)
    results = retriever.search([q for _, q in searches], k + extra)
    if len(results) != len(searches):
        raise GenerationError(f"the retriever returned {len(results)} result lists for {len(searches)} queries")
    still = []
    for (i, query), hits in zip(searches, results, strict=True):
        t, view = trajs[i], view_of[i]
        rng = random.Random(derive_seed(shape.seed, t.row_id, t.sample, t.turns, "search"))
        shown, shaped = shape.apply(list(hits), k, view, rng)
        t.searches.append(SearchCall(t.turns, query, [h.id for h in shown], [view.is_gold(h) for h in shown],
                                     short=len(shown) < k, shaped=shaped))
        if _observe(t, fmt.observe(shown, t), i, used, cfg=cfg, count=count) == "continue":
            still.append(i)
    return still


def summarize(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """Counts over trajectories: statuses, format errors by type, searches per trajectory, gold recall (the share of
    trajectories whose searches returned a gold passage), short results."""
    from collections import Counter

    n = len(trajs) or 1
    return {
        "trajectories": len(trajs),
        "status": dict(Counter(t.status for t in trajs)),
        "format_errors": dict(Counter(e for t in trajs for e in t.errors)),
        "searches_per_trajectory": sum(len(t.searches) for t in trajs) / n,
        "gold_found": sum(t.gold_found for t in trajs) / n,
        "short_results": sum(c.short for t in trajs for c in t.searches),
    }
