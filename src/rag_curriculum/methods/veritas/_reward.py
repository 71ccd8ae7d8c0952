"""VERITAS (Xu et al., "Beyond Correctness: Rewarding Faithful Reasoning in Retrieval-Augmented Generation";
``../shared/papers/veritas.txt`` sections 3 to 5, appendices B and G; docs/veritas.md): the faithfulness of a
Search-R1 trajectory, as metrics and as the reward of Eq. 1.

**Turns and pairs.** A trajectory (the blocks ``<think>``, ``<search>``, ``<information>``, ``<answer>`` in
order) is split into turns at each ``<information>`` block the environment appended: turn ``t`` is what the model
wrote (its think blocks, then its search or answer) and the information that answered it. Two kinds of pairs are
read off the turns (section 3.3):

* ``think_search``: each ``<search>`` with the *latest* ``<think>`` before it in the same turn (the "immediately
  preceding thought process"); a search with no think before it in its turn is a pair with its think *missing*;
* ``info_think``: each ``<information>`` with the *first* ``<think>`` after it, before the model's next search or
  answer ("the thinking block following an information block"); an information block the model answered without
  a think is a pair with its think *missing*; an information block after which the trajectory ended (a budget
  stopped it: the model never wrote again) gives no pair.

A missing block scores ``missing_value`` (default 0.0: a search nobody reasoned about, evidence nobody thought
about, is not faithful) without asking the judge.

**Think-Answer** (section 3.3, regex-based): the final answer's key entities, taken as the tokens of the answer
after SQuAD normalisation (lower case; punctuation and the articles a / an / the dropped), are joined into a
regex (``\\b`` tok1 ``\\s+`` tok2 ... ``\\b``, each token escaped) and searched in the normalised text of the
*scope*: ``last_think`` (default: "the latest preceding thinking block", the paper's definition), ``all_thinks``
(every think before the answer) or ``trajectory`` (everything before the answer, information blocks included: the
paper's procedure, "we then search for this pattern within the agent's trajectory"). ``match="tokens"`` asks for
every token anywhere in the scope instead of the phrase. No answer, or no think before it with ``last_think``:
0.0.

**Info-Think and Think-Search** are judged by an LLM (:class:`VeritasJudge`) with the paper's prompts verbatim
(appendix B, Tables 3 and 4; :data:`THINK_SEARCH_PROMPT`, :data:`INFO_THINK_PROMPT`), whose ``{input_string}`` is
the pair's two blocks in their tags, one per line (``<information>...</information>\\n<think>...</think>``,
``<think>...</think>\\n<search>...</search>``). A reply is read as 0 or 1 (``"1"``, ``"Score: 1"``; a reply
holding both digits, or neither, is a judge failure). With ``votes=k`` the judge samples k replies and takes the
majority of the readable ones (a tie is 0: not clearly faithful) or their mean (``vote="mean"``). A pair whose
every vote is unreadable scores ``judge_failure_value`` (default 0.0; None leaves the pair out of the mean). The
trajectory's score is the mean over its pairs (``aggregate="mean"``, default; ``all``: 1 only when every pair is
1; ``last``: the last pair's); a trajectory without any pair (no search, the paper's zero-search case) scores
``no_search_value`` (default 0.0, so that not searching never earns the faithfulness reward).

**The reward** (Eq. 1): R = w_EM R_EM + w_info-think R_info-think + w_think-answer R_think-answer, with R_EM
Search-R1's exact match of the last ``<answer>`` and the paper's final weights 0.9 / 0.05 / 0.02
(:data:`PAPER_WEIGHTS`); ``think_search`` can be weighted too (0 by default: the paper does not train on it).

>>> t = ("<think>Who directed Jaws?</think><search>Jaws director</search>\\n\\n<information>Doc 1(Title: Jaws) "
...      "Jaws was directed by Steven Spielberg.</information>\\n\\n<think>So it is Steven Spielberg.</think>"
...      "<answer>Steven Spielberg</answer>")
>>> [(p.kind, p.turn, p.first[:8], p.second) for p in trajectory_pairs(t)]
[('think_search', 0, 'Who dire', 'Jaws director'), ('info_think', 1, 'Doc 1(Ti', 'So it is Steven Spielberg.')]
>>> think_answer(t), think_answer(t.replace("So it is Steven Spielberg.", "So it is him."))
(1.0, 0.0)
>>> r = VeritasReward(weights={"info_think": 0.0})
>>> r([t], answers=[["Steven Spielberg"]])
[0.92]
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, NamedTuple

from ..._metrics import answer_scores, normalize_answer
from ..._plumbing import AsDict, derive_seed, jsonl_records
from ...errors import ConfigError
from ...generation import SamplingConfig
from ...grammar import parse_trajectory
from ...rewards import completion_text, log_means, trajectory_batch, trajectory_record
from ..craft import CraftJudge

__all__ = [
    "INFO_THINK_PROMPT",
    "KINDS",
    "PAPER_WEIGHTS",
    "THINK_SEARCH_PROMPT",
    "Pair",
    "PairVerdict",
    "VeritasBreakdown",
    "VeritasJudge",
    "VeritasReward",
    "agreement",
    "cohen_kappa",
    "read_label",
    "read_labels",
    "split_turns",
    "think_answer",
    "trajectory_blocks",
    "trajectory_pairs",
]

#: Appendix B, Table 3 (Think-Search), verbatim; ``{input_string}`` is the (think, search) pair.
THINK_SEARCH_PROMPT = (
    "You are a helpful judge. The content between <think></think> is a language model's reasoning process after "
    "receiving new information. The content between <search></search> is the search query generated by this model "
    "after its reasoning process. Output 1 if the search query is clearly based on and follows from its reasoning "
    "process. Output 0 if the search query does not align with or follow from its reasoning process. The content "
    "is:\n\n{input_string}."
)

#: Appendix B, Table 4 (Information-Think), verbatim; ``{input_string}`` is the (information, think) pair.
INFO_THINK_PROMPT = (
    "You will be given some content containing the information from a retriever and the thinking process of a "
    "language model. The content between <information></information> is the retrieved information given by a "
    "retriever. The content between <think></think> is language model's reasoning process after seeing the "
    "retrieved information.\n\nPlease judge whether the language model considers the retrieved information. "
    "Output 1 if the reasoning process considers the retrieved information. Output 0 if the reasoning process does "
    "not consider the retrieved information. The content is:\n\n{input_string}.\n\nPlease only output the score "
    "number."
)

KINDS = ("info_think", "think_search")
#: Section 5.1: "w_EM = 0.9, w_info-think = 0.05, and w_think-ans = 0.02".
PAPER_WEIGHTS: dict[str, float] = {"em": 0.9, "info_think": 0.05, "think_answer": 0.02, "think_search": 0.0}
TERMS = tuple(PAPER_WEIGHTS)
SCOPES = ("last_think", "all_thinks", "trajectory")
MATCHES = ("phrase", "tokens")
AGGREGATES = ("mean", "all", "last")
VOTES = ("majority", "mean")

_BLOCK = re.compile(r"<(think|search|information|answer)>(.*?)</\1>", re.DOTALL)
_INFO = re.compile(r"<information>(.*?)</information>", re.DOTALL)


# -- turns and pairs ---------------------------------------------------------------------------------------------
def trajectory_blocks(completion: Any, trajectory: Mapping[str, Any] | None = None) -> list[tuple[str, str]]:
    """The ``(tag, content)`` blocks of a trajectory, in order, contents stripped.

    With the rollout's record (``trajectory`` with ``segments``: what the model wrote and what the environment
    appended), only the environment's ``<information>`` blocks count as information: one the model wrote itself
    (a forged retrieval) is dropped. Without it, the completion text is parsed as Search-R1 parses it.

    >>> segs = [{"source": "model", "text": "<think>a</think><information>fake</information><search>q</search>"},
    ...         {"source": "env", "text": "\\n\\n<information>real</information>\\n\\n"}]
    >>> trajectory_blocks("", {"segments": segs})
    [('think', 'a'), ('search', 'q'), ('information', 'real')]
    """
    trajectory = trajectory_record(trajectory)
    segments = trajectory.get("segments") if trajectory is not None else None
    if not segments:
        return parse_trajectory(completion_text(completion)).blocks
    out: list[tuple[str, str]] = []
    for seg in segments:
        source, text = seg["source"], seg["text"]
        if source == "env":
            out.extend(("information", m.group(1).strip()) for m in _INFO.finditer(text or ""))
        else:
            out.extend(
                (m.group(1), m.group(2).strip())
                for m in _BLOCK.finditer(text or "")
                if m.group(1) != "information"
            )
    return out


class Turn(NamedTuple):
    """One turn: the think blocks the model wrote, its search or answer (None without), the information that
    answered it (None when none came), in the order written."""

    index: int
    thinks: tuple[str, ...]
    search: str | None
    answer: str | None
    information: str | None


def split_turns(blocks: Sequence[tuple[str, str]]) -> list[Turn]:
    """Split blocks into turns at each ``<information>`` block (which closes its turn).

    >>> split_turns([("think", "a"), ("search", "q"), ("information", "i"), ("think", "b"), ("answer", "x")])
    [Turn(index=0, thinks=('a',), search='q', answer=None, information='i'), Turn(index=1, thinks=('b',), search=None, answer='x', information=None)]
    """
    turns: list[Turn] = []
    thinks: list[str] = []
    search = answer = None
    for tag, content in blocks:
        if tag == "think":
            thinks.append(content)
        elif tag == "search":
            search = content if search is None else search
        elif tag == "answer":
            answer = content
        else:
            turns.append(Turn(len(turns), tuple(thinks), search, answer, content))
            thinks, search, answer = [], None, None
    if thinks or search is not None or answer is not None:
        turns.append(Turn(len(turns), tuple(thinks), search, answer, None))
    return turns


class Pair(NamedTuple):
    """A pair of blocks to judge: ``kind`` (``info_think`` or ``think_search``), the turn of its second block, the
    first block (information, or think) and the second (think, or search); a block the trajectory lacks is None."""

    kind: str
    turn: int
    first: str | None
    second: str | None

    @property
    def complete(self) -> bool:
        return self.first is not None and self.second is not None

    def input_string(self) -> str:
        """The judge's ``{input_string}``: the two blocks in their tags, one per line."""
        a, b = ("information", "think") if self.kind == "info_think" else ("think", "search")
        return f"<{a}>{self.first or ''}</{a}>\n<{b}>{self.second or ''}</{b}>"


def trajectory_pairs(
    completion: Any,
    trajectory: Mapping[str, Any] | None = None,
    *,
    kinds: Iterable[str] = ("think_search", "info_think"),
    blocks: Sequence[tuple[str, str]] | None = None,
) -> list[Pair]:
    """The (think, search) and (information, think) pairs of a trajectory, in the order of their second block (see
    the module docstring for the rules).

    >>> trajectory_pairs("<search>q</search><information>i1</information><answer>x</answer>")
    [Pair(kind='think_search', turn=0, first=None, second='q'), Pair(kind='info_think', turn=1, first='i1', second=None)]
    >>> trajectory_pairs("<think>t</think><search>q</search><information>i1</information>")  # ended by a budget
    [Pair(kind='think_search', turn=0, first='t', second='q')]
    """
    want = set(kinds)
    if blocks is None:
        blocks = trajectory_blocks(completion, trajectory)
    out: list[Pair] = []
    turn, info = 0, None  # info: the information block that closed the previous turn
    seen_action = False  # the current turn's search or answer was written
    last_think: str | None = None
    first_think: str | None = None
    pending = False  # an info_think pair waits for this turn's first think
    for tag, content in blocks:
        if tag == "information":
            if pending and "info_think" in want:
                out.append(Pair("info_think", turn, info, first_think))
            turn, info, pending, seen_action, last_think, first_think = (
                turn + 1,
                content,
                True,
                False,
                None,
                None,
            )
            continue
        if tag == "think":
            last_think = content
            if first_think is None and not seen_action:
                first_think = content
            continue
        if tag in ("search", "answer"):
            if pending and "info_think" in want:
                out.append(Pair("info_think", turn, info, first_think))
                pending = False
            if tag == "search" and not seen_action and "think_search" in want:
                out.append(Pair("think_search", turn, last_think, content))
            seen_action = True
    if pending and "info_think" in want and (first_think is not None or seen_action):
        out.append(
            Pair("info_think", turn, info, first_think)
        )  # the last turn thought, or acted without a think
    return out


# -- Think-Answer --------------------------------------------------------------------------------------------------
def _scope_text(blocks: Sequence[tuple[str, str]], scope: str) -> str | None:
    """The text before the final answer that the answer is looked for in (None when the scope is empty)."""
    last = max((i for i, (t, _) in enumerate(blocks) if t == "answer"), default=None)
    if last is None:
        return None
    before = blocks[:last]
    if scope == "last_think":
        thinks = [c for t, c in before if t == "think"]
        return thinks[-1] if thinks else None
    if scope == "all_thinks":
        thinks = [c for t, c in before if t == "think"]
        return "\n".join(thinks) if thinks else None
    return "\n".join(c for t, c in before if t != "answer") or None


def think_answer(
    completion: Any,
    trajectory: Mapping[str, Any] | None = None,
    *,
    scope: str = "last_think",
    match: str = "phrase",
    blocks: Sequence[tuple[str, str]] | None = None,
) -> float:
    """Think-Answer faithfulness (section 3.3): 1.0 when the final answer's key entities are found in the scope
    (see the module docstring), else 0.0.

    >>> t = "<think>The capital is Paris, France.</think><answer>Paris</answer>"
    >>> think_answer(t), think_answer("<answer>Paris</answer>"), think_answer(t.replace("Paris,", "Lyon,"))
    (1.0, 0.0, 0.0)
    >>> think_answer("<think>born in Washington, D.C.</think><answer>washington dc</answer>")
    1.0
    >>> think_answer("<think>Paris of France</think><answer>France, Paris</answer>", match="tokens")
    1.0
    """
    if blocks is None:
        blocks = trajectory_blocks(completion, trajectory)
    answers = [c for t, c in blocks if t == "answer"]
    if not answers:
        return 0.0
    tokens = normalize_answer(answers[-1]).split()
    if not tokens:
        tokens = answers[-1].lower().split()  # an answer made only of articles / punctuation: its raw words
    if not tokens:
        return 0.0
    text = _scope_text(blocks, scope)
    if not text:
        return 0.0
    norm = normalize_answer(text)
    if match == "tokens":
        words = set(norm.split())
        return 1.0 if all(tok in words for tok in tokens) else 0.0
    pattern = r"(?<!\S)" + r"\s+".join(re.escape(tok) for tok in tokens) + r"(?!\S)"
    return 1.0 if re.search(pattern, norm) else 0.0


# -- the judge ------------------------------------------------------------------------------------------------------
_DIGIT = re.compile(r"(?<![\w.])([01])(?![\w]|\.\d)")


def read_label(reply: str | None) -> int | None:
    """A judge reply as 0 or 1; None when it holds neither digit, or both (the prompt asks for the number only).

    >>> [read_label(r) for r in ("1", " 0\\n", "Score: 1.", "1 (the query follows)", "0 or 1", "0.5", "yes", None)]
    [1, 0, 1, 1, None, None, None, None]
    """
    found = {m.group(1) for m in _DIGIT.finditer(reply or "")}
    return int(found.pop()) if len(found) == 1 else None


class PairVerdict(NamedTuple):
    """The judge's verdict on one pair: ``score`` (the vote, in [0, 1]; None when every vote was unreadable),
    each vote's label (None: unreadable), whether the replies came from the cache, and the replies."""

    score: float | None
    votes: tuple[int | None, ...]
    cached: bool
    replies: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return self.score is None


@dataclass
class VeritasJudge:
    """The VERITAS judge (section 3.3 and appendix B) through any generation backend of the toolkit, with the
    CRAFT judge's machinery (:class:`~rag_curriculum.rewards.CraftJudge`: the backend built on first use,
    the verdict cache on disk keyed by the SHA-256 of the prompt and the judge's identity).

    ``backend``: ``openai`` (an API such as Claude-3.7-Sonnet's through an OpenAI-compatible gateway, or a ``vllm
    serve`` of the distilled reward model), ``vllm`` / ``transformers`` (a local model), ``scripted``, or a backend
    object. ``votes``: replies sampled per pair (k-vote; the cache key holds k). The prompts are the paper's
    (``info_think_prompt`` / ``think_search_prompt``: a file holding another text with ``{input_string}``).
    """

    backend: Any = "openai"
    model: str | None = None
    backend_args: dict[str, Any] = field(default_factory=dict)
    cache_dir: str | None = "outputs/judge-cache"
    votes: int = 1
    vote: str = "majority"
    temperature: float = 0.0
    max_tokens: int = 16
    seed: int = 0
    info_think_prompt: str | None = None
    think_search_prompt: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.votes, bool) or not isinstance(self.votes, int) or self.votes < 1:
            raise ConfigError(
                f"judge votes must be an integer >= 1, got {self.votes!r}",
                hint="votes=3 samples three replies per pair and takes the majority",
            )
        if self.vote not in VOTES:
            raise ConfigError(f"judge vote must be majority or mean, got {self.vote!r}")
        if self.votes > 1 and self.temperature == 0 and self.backend != "scripted":
            logging.getLogger(__name__).warning(
                "votes=%d at temperature 0: the votes of a deterministic judge agree; "
                "set judge temperature > 0 to sample",
                self.votes,
            )
        # the CRAFT judge validates the backend and model, builds the backend lazily and owns the cache I/O
        self._engine = CraftJudge(
            backend=self.backend,
            model=self.model,
            backend_args=dict(self.backend_args),
            cache_dir=self.cache_dir,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            seed=self.seed,
        )
        self._templates = {
            "info_think": _read_prompt(self.info_think_prompt, INFO_THINK_PROMPT),
            "think_search": _read_prompt(self.think_search_prompt, THINK_SEARCH_PROMPT),
        }
        self.calls = 0  # prompts sent to the backend (cache misses)

    def messages(self, pair: Pair) -> list[dict[str, str]]:
        """The judge prompt of one pair (one user message)."""
        return [
            {
                "role": "user",
                "content": self._templates[pair.kind].replace("{input_string}", pair.input_string()),
            }
        ]

    def key(self, messages: list[dict[str, str]]) -> str:
        base = self._engine.key(messages)
        return hashlib.sha256(f"{base}:votes={self.votes}".encode()).hexdigest()

    def identity(self) -> dict[str, Any]:
        return {**self._engine.identity(), "votes": self.votes}

    def judge(self, pairs: Sequence[Pair]) -> list[PairVerdict]:
        """Verdicts for complete pairs (one batched backend call for every distinct prompt not in the cache)."""
        for p in pairs:
            if not p.complete:
                raise ConfigError(
                    f"a {p.kind} pair of turn {p.turn} misses a block: it is scored without the judge"
                )
        prompts = [self.messages(p) for p in pairs]
        keys = [self.key(m) for m in prompts]
        replies: dict[str, list[str]] = {}
        hits: set[str] = set()
        todo: dict[str, list[dict[str, str]]] = {}
        for k, m in zip(keys, prompts, strict=True):
            if k in replies or k in todo:
                continue
            cached = self._engine._lookup(k)
            got = _decode_replies(cached) if cached is not None else None
            if got is not None and len(got) == self.votes:
                replies[k] = got
                hits.add(k)
            else:
                todo[k] = m
        if todo:
            sampling = SamplingConfig(
                n=self.votes, temperature=self.temperature, max_tokens=self.max_tokens, seed=self.seed
            )
            backend = self._engine._backend()
            kwargs = {}
            if _takes_seeds(backend):  # a pair's votes depend on its content and the seed, not on its batch
                kwargs["seeds"] = [derive_seed(self.seed, k, bits=63) for k in todo]
            outs = backend.generate(list(todo.values()), sampling, **kwargs)
            if len(outs) != len(todo):
                raise ConfigError(
                    f"the judge backend returned {len(outs)} reply lists for {len(todo)} prompts"
                )
            self.calls += len(todo)
            for (k, m), out in zip(todo.items(), outs, strict=True):
                got = [str(r) for r in list(out)[: self.votes]]
                got += [""] * (self.votes - len(got))  # a missing reply is an unreadable vote
                self._engine._store(k, json.dumps(got), m)
                replies[k] = got
        return [self._verdict(replies[k], k in hits) for k in keys]

    def _verdict(self, replies: list[str], cached: bool) -> PairVerdict:
        votes = tuple(read_label(r) for r in replies)
        readable = [v for v in votes if v is not None]
        if not readable:
            return PairVerdict(None, votes, cached, tuple(replies))
        if self.vote == "mean":
            score = sum(readable) / len(readable)
        else:
            ones = sum(readable)
            score = 1.0 if ones * 2 > len(readable) else 0.0  # a tie is 0: not clearly faithful
        return PairVerdict(score, votes, cached, tuple(replies))


def _takes_seeds(backend: Any) -> bool:
    try:
        params = inspect.signature(backend.generate).parameters
    except (TypeError, ValueError, AttributeError):  # pragma: no cover
        return False
    return "seeds" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _decode_replies(stored: str) -> list[str] | None:
    try:
        got = json.loads(stored)
    except ValueError:
        return None
    return [str(r) for r in got] if isinstance(got, list) else None


def _read_prompt(path: str | None, default: str) -> str:
    if not path:
        return default
    from pathlib import Path

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(
            f"cannot read the judge prompt {path}: {e.strerror}",
            hint="give a text file holding {input_string}",
        ) from None
    if "{input_string}" not in text:
        raise ConfigError(
            f"the judge prompt {path} has no {{input_string}}",
            hint="the pair is put where {input_string} stands, as in the paper's Tables 3 and 4",
        )
    return text


# -- the reward ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class VeritasBreakdown(AsDict):
    """One trajectory's VERITAS scores: the total (Eq. 1), each term (None where not computed: a judged term
    without a judge), and what they rest on."""

    total: float
    em: float
    info_think: float | None
    think_answer: float
    think_search: float | None
    f1: float
    answered: float
    info_think_pairs: int
    think_search_pairs: int
    judge_failures: int
    missing_blocks: int
    no_search: bool


_LOGGED = tuple(f.name for f in fields(VeritasBreakdown) if f.name != "total")  # logged by batch means


def _number(name: str, value: Any, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(
            f"VERITAS {name} must be a finite number{' or null' if allow_none else ''}, got {value!r}",
            hint="the paper's weights: em 0.9, info_think 0.05, think_answer 0.02 (section 5.1)",
        )
    return float(value)


@dataclass(frozen=True)
class VeritasReward:
    """The VERITAS reward (Eq. 1) as a batched, picklable TRL reward function returning the total per trajectory;
    :meth:`components` gives every term. Reads the ``answers`` (or ``reward_model``) column and, when the
    toolkit's rollout function made the completions, the ``trajectory`` column (see :func:`trajectory_blocks`)."""

    weights: Mapping[str, float] | None = None
    """Weight per term (em, info_think, think_answer, think_search); unset terms take :data:`PAPER_WEIGHTS`."""
    judge: Any = None
    """The Info-Think / Think-Search judge: a mapping of :class:`VeritasJudge` options or a VeritasJudge. Needed
    when info_think or think_search has a weight (or is the component returned)."""
    think_answer_scope: str = "last_think"
    think_answer_match: str = "phrase"
    aggregate: str = "mean"
    no_search_value: float = 0.0
    judge_failure_value: float | None = 0.0
    missing_value: float | None = 0.0
    think_search: bool = False
    """Judge Think-Search even at weight 0 (evaluation: the paper's third metric); with a judge, Info-Think is
    always judged (and logged)."""
    log_components: bool = True
    """Log the batch mean of every term through TRL's ``log_metric`` (under ``veritas/``)."""

    __name__: ClassVar[str] = "veritas"
    component: ClassVar[str] = "total"
    _judge: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, value, choices in (
            ("think_answer_scope", self.think_answer_scope, SCOPES),
            ("think_answer_match", self.think_answer_match, MATCHES),
            ("aggregate", self.aggregate, AGGREGATES),
        ):
            if value not in choices:
                raise ConfigError(f"VERITAS {name} must be one of {', '.join(choices)}, got {value!r}")
        weights = dict(PAPER_WEIGHTS)
        for k, v in (self.weights or {}).items():
            if k not in TERMS:
                raise ConfigError(f"weights: unknown VERITAS term {k!r}; terms are {', '.join(TERMS)}")
            w = _number(f"weight {k}", v)
            if w is None or w < 0:
                raise ConfigError(f"VERITAS weight {k} must be >= 0, got {v!r}")
            weights[k] = w
        object.__setattr__(self, "weights", weights)
        _number("no_search_value", self.no_search_value)
        _number("judge_failure_value", self.judge_failure_value, allow_none=True)
        _number("missing_value", self.missing_value, allow_none=True)
        if self.judge is not None:
            j = self.judge if isinstance(self.judge, VeritasJudge) else VeritasJudge(**dict(self.judge))
            object.__setattr__(self, "_judge", j)
        for term in self.judged_terms():
            if self._judge is None:
                raise ConfigError(
                    f"the VERITAS {term} term needs a judge",
                    hint="give judge={backend: openai, model: ..., backend_args: {base_url: ...}} "
                    f"(or weights: {{{term}: 0}})",
                )

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.init)

    def judged_terms(self) -> tuple[str, ...]:
        """The judged terms this reward computes: those with a weight, and the one it returns."""
        on = {
            "info_think": self._judge is not None,
            "think_search": self._judge is not None and self.think_search,
        }
        return tuple(t for t in KINDS if self.weights[t] > 0 or self.component == t or on[t])

    # -- scoring ---------------------------------------------------------------------------------------------------
    def _aggregate(self, scores: list[float]) -> float:
        if not scores:
            return self.no_search_value
        if self.aggregate == "all":
            return 1.0 if all(s >= 1.0 for s in scores) else 0.0
        if self.aggregate == "last":
            return scores[-1]
        return sum(scores) / len(scores)

    def score(
        self, completion: Any, answers: Sequence[str] | str, trajectory: Mapping[str, Any] | None = None
    ) -> VeritasBreakdown:
        """The VERITAS scores of one trajectory."""
        return self._breakdowns([(completion, answers, trajectory)])[0]

    def _breakdowns(self, rows: Sequence[tuple[Any, Any, Any]]) -> list[VeritasBreakdown]:
        judged = self.judged_terms()
        parsed = []
        rows = [(c, a, trajectory_record(t)) for c, a, t in rows]
        for completion, _, traj in rows:
            blocks = trajectory_blocks(completion, traj)
            pairs = trajectory_pairs(completion, traj, kinds=judged, blocks=blocks) if judged else []
            parsed.append((blocks, pairs))
        todo = [(i, j) for i, (_, pairs) in enumerate(parsed) for j, p in enumerate(pairs) if p.complete]
        verdicts: dict[tuple[int, int], PairVerdict] = {}
        if todo:
            got = self._judge.judge([parsed[i][1][j] for i, j in todo])
            verdicts = dict(zip(todo, got, strict=True))
        out = []
        w = self.weights
        for i, ((_completion, answers, traj), (blocks, pairs)) in enumerate(zip(rows, parsed, strict=True)):
            if isinstance(traj, Mapping) and "answer" in traj:
                answer = traj.get("answer")
            else:
                found = [c for t, c in blocks if t == "answer"]
                answer = found[-1] if found else None
            em, f1 = answer_scores(answer, answers) if answer else (0.0, 0.0)
            ta = think_answer(
                None, blocks=blocks, scope=self.think_answer_scope, match=self.think_answer_match
            )
            per_kind: dict[str, list[float]] = {k: [] for k in KINDS}
            failures = missing = 0
            for j, p in enumerate(pairs):
                if not p.complete:
                    missing += 1
                    if self.missing_value is not None:
                        per_kind[p.kind].append(self.missing_value)
                    continue
                v = verdicts[(i, j)]
                if v.failed:
                    failures += 1
                    if self.judge_failure_value is not None:
                        per_kind[p.kind].append(self.judge_failure_value)
                else:
                    per_kind[p.kind].append(v.score)
            n_kind = {k: sum(p.kind == k for p in pairs) for k in KINDS}
            it = self._aggregate(per_kind["info_think"]) if "info_think" in judged else None
            ts = self._aggregate(per_kind["think_search"]) if "think_search" in judged else None
            values = {"em": em, "info_think": it or 0.0, "think_answer": ta, "think_search": ts or 0.0}
            total = sum(w[t] * values[t] for t in TERMS if w[t])
            out.append(
                VeritasBreakdown(
                    total,
                    em,
                    it,
                    ta,
                    ts,
                    f1,
                    float(answer is not None),
                    n_kind["info_think"],
                    n_kind["think_search"],
                    failures,
                    missing,
                    not any(t == "search" for t, _ in blocks),
                )
            )
        return out

    def components(
        self,
        completions: Sequence[Any],
        answers: Sequence[Any] | None = None,
        *,
        reward_model: Sequence[Any] | None = None,
        trajectory: Sequence[Any] | None = None,
        golden_answers: Sequence[Any] | None = None,
        id: Sequence[Any] | None = None,
    ) -> list[VeritasBreakdown]:
        """Per-trajectory breakdowns of a batch (one judge call for the batch)."""
        return self._breakdowns(trajectory_batch(completions, answers, reward_model, golden_answers, trajectory,
                                                 ids=id, who="the VERITAS reward"))

    def __call__(
        self,
        completions: Sequence[Any],
        answers: Sequence[Any] | None = None,
        *,
        reward_model: Sequence[Any] | None = None,
        trajectory: Sequence[Any] | None = None,
        golden_answers: Sequence[Any] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        """TRL reward function: one float per completion (``self.component`` of each breakdown)."""
        scores = self.components(completions, answers, reward_model=reward_model, trajectory=trajectory,
                                 golden_answers=golden_answers, id=kwargs.get("id"))
        if self.log_components and log_metric is not None and scores:
            log_means(log_metric, "veritas", scores, _LOGGED)
        component = self.component
        return [float(getattr(b, component) or 0.0) for b in scores]


@dataclass(frozen=True)
class VeritasEmReward(VeritasReward):
    """R_EM alone: Search-R1's exact match of the last answer."""

    log_components: bool = False
    __name__: ClassVar[str] = "veritas_em"
    component: ClassVar[str] = "em"


@dataclass(frozen=True)
class VeritasInfoThinkReward(VeritasReward):
    """R_info-think alone: the judge's Information-Think faithfulness, aggregated over the pairs."""

    log_components: bool = False
    __name__: ClassVar[str] = "veritas_info_think"
    component: ClassVar[str] = "info_think"


@dataclass(frozen=True)
class VeritasThinkAnswerReward(VeritasReward):
    """R_think-answer alone: the regex Think-Answer faithfulness (no judge)."""

    log_components: bool = False
    __name__: ClassVar[str] = "veritas_think_answer"
    component: ClassVar[str] = "think_answer"


@dataclass(frozen=True)
class VeritasThinkSearchReward(VeritasReward):
    """Think-Search faithfulness alone (the paper evaluates it, and does not train on it)."""

    log_components: bool = False
    __name__: ClassVar[str] = "veritas_think_search"
    component: ClassVar[str] = "think_search"


# -- labels and agreement ------------------------------------------------------------------------------------------
def pair_records(
    trajectories: Iterable[Mapping[str, Any]],
    *,
    kinds: Iterable[str] = KINDS,
    judge: VeritasJudge | None = None,
) -> list[dict[str, Any]]:
    """The judge pairs of trajectories as records for labelling or distilling a reward model (the paper's 27K
    pipeline): ``id`` (``ROW/SAMPLE/KIND/TURN``), ``row_id``, ``sample``, ``kind``, ``turn``, ``input_string``,
    ``prompt`` (the judge prompt, verbatim) and, with a judge, ``label`` (0 / 1, the vote; None on failure) and
    ``votes``. ``trajectories``: :meth:`Trajectory.to_dict` dicts (or any with ``segments`` or ``text``). Pairs
    missing a block are left out (they are not a judge's to label)."""
    j = judge or VeritasJudge(backend="scripted", cache_dir=None)
    recs = []
    for n, t in enumerate(trajectories):
        row = str(t.get("row_id", n))
        sample = int(t.get("sample", 0) or 0)
        for p in trajectory_pairs(t.get("text", ""), t, kinds=kinds):
            if p.complete:
                recs.append(
                    {
                        "id": f"{row}/{sample}/{p.kind}/{p.turn}",
                        "row_id": row,
                        "sample": sample,
                        "kind": p.kind,
                        "turn": p.turn,
                        "input_string": p.input_string(),
                        "prompt": j.messages(p)[0]["content"],
                    }
                )
    if judge is not None and recs:
        verdicts = judge.judge([Pair(r["kind"], r["turn"], *_split_input(r)) for r in recs])
        for r, v in zip(recs, verdicts, strict=True):
            r["label"] = None if v.score is None else int(v.score >= 0.5)
            r["votes"] = list(v.votes)
    return recs


def _split_input(rec: Mapping[str, Any]) -> tuple[str, str]:
    a, b = ("information", "think") if rec["kind"] == "info_think" else ("think", "search")
    s = rec["input_string"]
    first = s[len(f"<{a}>") : s.index(f"</{a}>\n<{b}>")]
    second = s[s.index(f"</{a}>\n<{b}>") + len(f"</{a}>\n<{b}>") : -len(f"</{b}>")]
    return first, second


def cohen_kappa(a: Sequence[Any], b: Sequence[Any]) -> float:
    """Cohen's kappa of two raters: (p_o - p_e) / (1 - p_e), p_e from each rater's label frequencies; 1.0 when
    both use one and the same label throughout (p_e = 1 and perfect agreement), 0.0 when p_e = 1 otherwise.

    >>> round(cohen_kappa([1, 1, 0, 0, 1, 0], [1, 0, 0, 0, 1, 1]), 4)
    0.3333
    """
    if len(a) != len(b):
        raise ConfigError(f"cohen_kappa: {len(a)} labels against {len(b)}")
    n = len(a)
    if n == 0:
        raise ConfigError("cohen_kappa: no labels")
    from collections import Counter

    po = sum(x == y for x, y in zip(a, b, strict=True)) / n
    ca, cb = Counter(a), Counter(b)
    pe = sum(ca[k] * cb[k] for k in ca) / (n * n)
    if pe == 1.0:
        return 1.0 if po == 1.0 else 0.0
    return (po - pe) / (1 - pe)


def agreement(
    labels: Mapping[str, Any] | Sequence[Any], reference: Mapping[str, Any] | Sequence[Any]
) -> dict[str, Any]:
    """Consistency (the share of equal labels: the paper's "Consistent Ratio") and Cohen's kappa of ``labels``
    against ``reference`` (Tables 7 to 9). Two mappings are matched by key (keys in only one are counted, never
    compared); two sequences by position. Unlabelled entries (None) are counted and left out.

    >>> agreement({"a": 1, "b": 0, "c": 1, "d": None}, {"a": 1, "b": 1, "c": 1, "d": 0, "e": 1})
    {'n': 3, 'consistency': 0.6667, 'kappa': 0.0, 'unlabelled': 1, 'only_labels': 0, 'only_reference': 1}
    """
    if isinstance(labels, Mapping) != isinstance(reference, Mapping):
        raise ConfigError(
            "agreement: give two mappings (matched by id) or two sequences (matched by position)"
        )
    if isinstance(labels, Mapping):
        keys = [k for k in labels if k in reference]
        only_l = sum(k not in reference for k in labels)
        only_r = sum(k not in labels for k in reference)
        pairs = [(labels[k], reference[k]) for k in keys]
    else:
        if len(labels) != len(reference):
            raise ConfigError(f"agreement: {len(labels)} labels against {len(reference)} references")
        only_l = only_r = 0
        pairs = list(zip(labels, reference, strict=True))
    both = [(x, y) for x, y in pairs if x is not None and y is not None]
    if not both:
        raise ConfigError("agreement: no entry is labelled on both sides")
    xs, ys = [x for x, _ in both], [y for _, y in both]
    return {
        "n": len(both),
        "consistency": round(sum(x == y for x, y in both) / len(both), 4),
        "kappa": round(cohen_kappa(xs, ys), 4),
        "unlabelled": len(pairs) - len(both),
        "only_labels": only_l,
        "only_reference": only_r,
    }


# -- a judge without a model, for smoke runs ------------------------------------------------------------------------
_WORD = re.compile(r"[a-z0-9]{4,}")


def lexical_judge(messages: Sequence[Mapping[str, str]], n: int, seed: int) -> list[str]:
    """A stand-in judge for the scripted backend (``backend: scripted, model:
    rag_curriculum.methods.veritas:lexical_judge``): it answers the paper's two prompts by word overlap, "1" when
    the think shares a word of four or more letters with the information (Info-Think) or the search with the think
    (Think-Search), else "0". For CPU smoke runs and demos of the pipeline: **not** the paper's judge.

    >>> pair = Pair("info_think", 1, "Doc 1(Title: Jaws) directed by Spielberg", "So Spielberg.")
    >>> lexical_judge([{"role": "user", "content": INFO_THINK_PROMPT.replace("{input_string}", pair.input_string())}],
    ...               1, 0)
    ['1']
    """
    text = messages[-1]["content"]
    if "</information>\n<think>" in text:  # Info-Think: the last <information> of the prompt is the pair's
        first, _, rest = text.rsplit("<information>", 1)[-1].partition("</information>\n<think>")
        second = rest.split("</think>", 1)[0]
    elif "</think>\n<search>" in text:  # Think-Search
        head, _, rest = text.partition("</think>\n<search>")
        first, second = head.rsplit("<think>", 1)[-1], rest.split("</search>", 1)[0]
    else:
        return ["0"] * n
    a = set(_WORD.findall(first.lower()))
    b = set(_WORD.findall(second.lower()))
    return ["1" if a & b else "0"] * n


def read_labels(path: str | Any, *, field: str = "label") -> dict[str, int | None]:
    """Labels by ``id`` from a JSONL file (the pair records of ``pairs/``, labelled by a judge, a person or another
    model): each line an object with ``id`` and ``field`` (0, 1 or null). A line that is not such an object is an
    error naming the file, the line and the field; an id seen twice too.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "ref.jsonl"
    >>> _ = p.write_text('{"id": "a", "label": 1}\\n{"id": "b", "label": null}\\n')
    >>> read_labels(p)
    {'a': 1, 'b': None}
    """
    from pathlib import Path

    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ConfigError(f"cannot read the labels {p}: {e.strerror}") from None
    out: dict[str, int | None] = {}
    def bad(n: int, e: ValueError) -> Exception:
        return ConfigError(f"{p}, line {n}: not valid JSON ({e})", hint="one JSON object per line")

    for n, rec in jsonl_records(lines, bad):
        if not isinstance(rec, dict) or "id" not in rec:
            raise ConfigError(
                f"{p}, line {n}: no 'id' field", hint="each line needs the pair's id (pairs/*.jsonl)"
            )
        value = rec.get(field)
        if isinstance(value, bool) or value not in (0, 1, None):
            raise ConfigError(
                f"{p}, line {n} (id {rec['id']!r}): field {field!r} is {value!r}, not 0, 1 or null"
            )
        key = str(rec["id"])
        if key in out:
            raise ConfigError(f"{p}, line {n}: id {key!r} appears twice")
        out[key] = value
    return out
