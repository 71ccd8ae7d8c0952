"""The RAG-RL reward (section 3.1): answer + citation + format, each component reported.

* answer: ``gamma_answer * EM``, EM being normalised exact match against the answer or any alias (Eq. 1);
* citation: ``gamma_correct * recall - gamma_incorrect * (number of distinct cited labels that are not gold)``
  (Eq. 2);
* format: ``+gamma_format`` when the completion parses as valid, ``-format_penalty`` (p) otherwise (Eq. 3);
* total: their sum.

Unanswerable rows (``answerable`` false, ``curriculum build --unanswerable-fraction``): the row's answer is the
abstention answer (``abstention_answer``, default ``"unanswerable"``), so the answer term is
``gamma_answer * 1[the final answer is the abstention answer]``, the paper's 5 * 1[EM] unchanged; citing nothing
(with an answer stated) earns the full recall term ``gamma_correct`` and no penalty, and every label cited is an
incorrect citation (``-gamma_incorrect`` each, recall 0). On an answerable row, abstaining costs
``abstain_penalty`` on the answer term (default 0: the paper's reward, where an abstention is a wrong answer and
already never beats a wrong guess that cites nothing; see docs/unanswerable.md). The row's ``answerable`` comes
from the ``answerable`` column, else ``reward_model.ground_truth.answerable``; a row without it (shards built before
the field existed) is answerable.

The paper sets gamma_answer = 5, gamma_correct = 5, gamma_incorrect = 2 and leaves gamma_format and p open. The
defaults here are gamma_format = p = 1: the valid/invalid swing (2) is worth one incorrect citation and 40% of a
correct answer, so correctness outweighs formatting as the paper asks, yet in a GRPO group where answers and
citations tie the format still separates the completions. Answer and citation rewards are computed on what the
parser extracts even when the format is invalid (the three terms are independent, as in the paper's sum).

>>> r = RagRlReward()
>>> done = "<reasoning>...</reasoning>\\n<answer>\\nFinal answer: Paris\\nSupporting passages: France, Ohio\\n</answer>"
>>> b = r.score(done, answers=["Paris"], gold_labels=["France", "Paris"])
>>> b.answer, b.citation, b.format, b.total
(5.0, 0.5, 1.0, 6.5)
>>> r([done, "Paris"], answers=[["Paris"], ["Paris"]], gold_labels=[["France"], ["France"]])
[9.0, -1.0]
>>> abstain = "<reasoning>...</reasoning>\\n<answer>\\nFinal answer: Unanswerable\\nSupporting passages:\\n</answer>"
>>> [r.score(abstain, ["unanswerable"], [], answerable=False).total, r.score(abstain, ["Paris"], ["France"]).total]
[11.0, 1.0]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from .._metrics import _normalized_answers
from .._plumbing import AsDict
from ..errors import ConfigError
from ._columns import (
    batch_answers,
    check_columns,
    completion_text,
    completion_texts,
    log_means,
    row_answerable,
    row_gold_labels,
)
from ._formats import FORMATS
from ._parser import DEFAULT_MAX_CHARS
from ._scoring import (
    ABSTENTION_ANSWER,
    check_abstention_answer,
    is_abstention,
    passage_labels,
    score_completion,
)

__all__ = [
    "RagRlAnswerReward",
    "RagRlCitationReward",
    "RagRlFormatReward",
    "RagRlReward",
    "RewardBreakdown",
]


@dataclass(frozen=True, slots=True)
class RewardBreakdown(AsDict):
    """One completion's reward: the total, the three components, and the metrics behind them."""

    total: float
    answer: float
    citation: float
    format: float
    exact_match: float
    answer_f1: float
    citation_precision: float
    citation_recall: float
    citation_f1: float
    num_cited: int
    num_incorrect: int
    format_valid: bool
    format_reason: str | None
    abstained: bool = False
    """The final answer is the abstention answer (on any row)."""
    answerable: bool = True
    """The row's ``answerable`` (False: an unanswerable row)."""


# Metrics logged through TRL's ``log_metric`` (batch means), by breakdown attribute.
_LOGGED = (
    "answer", "citation", "format", "exact_match", "answer_f1", "citation_precision", "citation_recall",
    "citation_f1", "num_incorrect", "format_valid", "abstained",
)


#: The largest of the reward's constants: the sum of its terms, times a weight of at most 1e6, stays finite.
MAX_CONSTANT = 1e6


def _check_weight(name: str, value: Any) -> None:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0
            or value > MAX_CONSTANT):
        raise ConfigError(
            f"{name} must be a finite number >= 0 and at most {MAX_CONSTANT:g}, got {value!r}; it is a magnitude "
            "(penalties are subtracted)",
            hint=f"set {name} to 0 to switch the term off (the paper: gamma_answer 5, gamma_correct 5, "
                 "gamma_incorrect 2)")


@dataclass(frozen=True)
class RagRlReward:
    """The RAG-RL reward as a picklable, batched TRL reward function (returns the total per completion).

    Call it the TRL way, ``reward(completions=..., answers=..., gold_labels=..., passages=..., **other_columns)``,
    or get the components with :meth:`score` (one completion) and :meth:`components` (a batch). Missing
    ``answers`` / ``gold_labels`` columns are read from ``reward_model["ground_truth"]``; passage labels (for
    labels that contain commas) from ``passages``, else ``extra_info["labels"]``.

    Raises:
        ConfigError: a weight that is negative or not finite, a ``max_chars`` that is not a positive integer, or
            an empty abstention answer (when the reward is made).
        UnknownNameError: an ``output_format`` that is not registered.

    Examples:
        >>> from rag_curriculum import RagRlReward
        >>> reward = RagRlReward()
        >>> text = ("<reasoning>\\nAda was born in Rome, which Romulus founded.\\n</reasoning>\\n<answer>\\n"
        ...         "Final answer: Romulus\\nSupporting passages: Ada, Rome\\n</answer>")
        >>> reward(completions=[text], answers=[["Romulus"]], gold_labels=[["Ada", "Rome"]])   # 5 + 5 + 1
        [11.0]
        >>> b = reward.score(text, ["Romulus"], ["Ada"], labels=["Ada", "Rome", "Paris"])
        >>> b.answer, b.citation, b.format, b.num_incorrect   # Rome is cited but not gold: 5 * 1 - 2 * 1
        (5.0, 3.0, 1.0, 1)

        In TRL: ``GRPOTrainer(..., reward_funcs=[RagRlReward()])``; the toolkit's shards carry the columns it reads.
    """

    gamma_answer: float = 5.0
    """Eq. 1: reward for an exact match of the final answer (paper: 5)."""
    gamma_correct: float = 5.0
    """Eq. 2: multiplies citation recall (paper: 5)."""
    gamma_incorrect: float = 2.0
    """Eq. 2: subtracted per distinct cited label that is not gold (paper: 2)."""
    gamma_format: float = 1.0
    """Eq. 3: reward for a valid format (not given in the paper; see the module docstring)."""
    format_penalty: float = 1.0
    """Eq. 3: p, subtracted for an invalid format (not given in the paper; see the module docstring)."""
    max_chars: int = DEFAULT_MAX_CHARS
    """Completions longer than this many characters have an invalid format ("excessive text")."""
    output_format: str = "rag-rl"
    """Name of the output format (parser) in the format registry."""
    log_components: bool = True
    """Log batch means of every component through TRL's ``log_metric`` (and format reasons via ``log_extra``)."""
    abstention_answer: str = ABSTENTION_ANSWER
    """The final answer that abstains (normalised as the official EM); unanswerable rows expect it, so it must be
    the build's ``abstention_answer`` (recorded in the manifest)."""
    abstain_penalty: float = 0.0
    """Subtracted from the answer term when a completion abstains on an answerable row (default 0: the paper's
    reward unchanged; see the module docstring)."""

    __name__: ClassVar[str] = "rag_rl"  # TRL names the reward (and its logged mean) after this
    component: ClassVar[str] = "total"

    def __post_init__(self) -> None:
        for name in ("gamma_answer", "gamma_correct", "gamma_incorrect", "gamma_format", "format_penalty",
                     "abstain_penalty"):
            _check_weight(name, getattr(self, name))
        check_abstention_answer(self.abstention_answer)
        if isinstance(self.max_chars, bool) or not isinstance(self.max_chars, int) or self.max_chars < 1:
            raise ConfigError(f"max_chars must be a positive integer (characters), got {self.max_chars!r}")
        if self.output_format not in FORMATS:
            FORMATS.get(self.output_format)  # raises with a "did you mean"

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def score(
        self,
        completion: Any,
        answers: Sequence[str] | str,
        gold_labels: Sequence[str],
        labels: Sequence[str] | None = None,
        *,
        answerable: bool = True,
    ) -> RewardBreakdown:
        """The reward of one completion, with its components.

        ``labels`` are all passage labels of the row (gold labels are always known labels too); ``answerable``
        False scores an unanswerable row (see the module docstring).

        Args:
            completion: the completion: text, or chat messages (the last assistant message is scored).
            answers: the gold answer and its aliases (or one answer as a string).
            gold_labels: the labels of the gold passages.
            labels: every passage label of the row (None: the gold labels only).
            answerable: False for an unanswerable row, which expects the abstention answer.

        Returns:
            The total and its components (answer, citation, format), with the metrics behind them (exact match,
            answer F1, citation precision / recall / F1, citations counted, the format's validity and reason).

        Raises:
            ConfigError: an unanswerable row whose answers are not this reward's ``abstention_answer``.
            RewardInputError: a completion that is neither text nor chat messages.
        """
        gold = tuple(gold_labels)
        known = tuple(labels) + gold if labels is not None else gold
        if not answerable:
            self._check_unanswerable_row(answers)
        text, _, valid, reason, em, f1, precision, recall, cf1, n_cited, n_incorrect = score_completion(
            completion_text(completion), answers, gold, known, parse=FORMATS.get(self.output_format).parse,
            max_chars=self.max_chars, answerable=answerable)
        if not text:  # an empty answer earns nothing
            em = f1 = 0.0
        abstained = is_abstention(text, self.abstention_answer)
        answer = self.gamma_answer * em
        if abstained and answerable and not em:
            answer -= self.abstain_penalty
        citation = self.gamma_correct * recall - self.gamma_incorrect * n_incorrect
        fmt = self.gamma_format if valid else -self.format_penalty
        return RewardBreakdown(
            answer + citation + fmt, answer, citation, fmt, em, f1, precision, recall, cf1, n_cited,
            n_incorrect, valid, reason, abstained, answerable,
        )

    def _check_unanswerable_row(self, answers: Sequence[str] | str) -> None:
        """An unanswerable row must expect this reward's abstention answer (else the build and the reward
        disagree, and abstaining would never be rewarded)."""
        golds = _normalized_answers((answers,) if isinstance(answers, str) else tuple(answers))
        if _normalized_answers((self.abstention_answer,))[0] not in golds:
            raise ConfigError(
                f"an unanswerable row (answerable=false) expects the answer(s) {list(golds)!r} but the reward's "
                f"abstention_answer is {self.abstention_answer!r}",
                hint="set the reward's abstention_answer to the build's (its manifest records "
                     "config.abstention_answer)")

    def components(
        self,
        completions: Sequence[Any],
        answers: Sequence[Any] | None = None,
        gold_labels: Sequence[Any] | None = None,
        passages: Sequence[Any] | None = None,
        *,
        reward_model: Sequence[Any] | None = None,
        extra_info: Sequence[Any] | None = None,
        answerable: Sequence[Any] | None = None,
        golden_answers: Sequence[Any] | None = None,
        id: Sequence[Any] | None = None,
    ) -> list[RewardBreakdown]:
        """Per-completion breakdowns of a batch; the columns are lists with one entry per completion. The gold
        answers come from ``answers``, ``golden_answers`` or ``reward_model`` (:func:`~._columns.batch_answers`:
        a row without any is an error naming it).

        Args:
            completions: the batch's completions (text or chat messages).
            answers: each row's gold answers.
            gold_labels: each row's gold passage labels (None: from ``reward_model``).
            passages: each row's passages (their labels are the known labels).
            reward_model: verl's column (``ground_truth``: answers and gold labels).
            extra_info: verl's column (``labels``: the passage labels when ``passages`` is absent).
            answerable: each row's ``answerable`` flag (None: answerable).
            golden_answers: FlashRAG's and Search-R1's name for the gold answers.
            id: the rows' ids, named in errors.

        Returns:
            One :class:`RewardBreakdown` per completion, in order.

        Raises:
            RewardInputError: a column of another length than ``completions``, a completion that is neither text
                nor chat messages, or a row without gold answers.
            ConfigError: an unanswerable row whose answers are not this reward's ``abstention_answer``.
        """
        n = check_columns(completions, {"gold_labels": gold_labels, "passages": passages, "extra_info": extra_info,
                                        "answerable": answerable}, who="the RAG-RL reward")
        texts = completion_texts(completions)
        golds = batch_answers(n, answers, reward_model, golden_answers, ids=id, who="the RAG-RL reward")
        none = (None,) * n  # an absent column reads as None in every row
        score = self.score
        return [
            score(completion, gold, row_gold_labels(g, rm), passage_labels(p, x), answerable=row_answerable(ok, rm))
            for completion, gold, g, p, rm, x, ok in zip(
                texts, golds, none if gold_labels is None else gold_labels,
                none if passages is None else passages, none if reward_model is None else reward_model,
                none if extra_info is None else extra_info, none if answerable is None else answerable,
                strict=True)
        ]

    def __call__(
        self,
        completions: Sequence[Any],
        answers: Sequence[Any] | None = None,
        gold_labels: Sequence[Any] | None = None,
        passages: Sequence[Any] | None = None,
        *,
        reward_model: Sequence[Any] | None = None,
        extra_info: Sequence[Any] | None = None,
        answerable: Sequence[Any] | None = None,
        golden_answers: Sequence[Any] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        log_extra: Callable[[str, list], None] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        """TRL reward function: one float per completion (``self.component`` of each breakdown).

        Args:
            completions: the batch's completions (text or chat messages).
            answers: each row's gold answers.
            gold_labels: each row's gold passage labels.
            passages: each row's passages.
            reward_model: verl's column.
            extra_info: verl's column.
            answerable: each row's ``answerable`` flag.
            golden_answers: FlashRAG's and Search-R1's name for the gold answers.
            log_metric: TRL's metric logger: the batch means of every component are logged through it.
            log_extra: TRL's per-completion logger: the format reasons.
            **kwargs: the other columns TRL passes (ignored; ``id`` is named in errors).

        Returns:
            The reward of each completion (the total; one component for the component classes).

        Raises:
            RewardInputError: see :meth:`components`.
        """
        breakdowns = self.components(
            completions, answers, gold_labels, passages, reward_model=reward_model, extra_info=extra_info,
            answerable=answerable, golden_answers=golden_answers, id=kwargs.get("id"),
        )
        if self.log_components and breakdowns:
            self._log(breakdowns, log_metric, log_extra)
        component = self.component
        return [getattr(b, component) for b in breakdowns]

    def _log(self, breakdowns: list[RewardBreakdown], log_metric: Callable | None, log_extra: Callable | None) -> None:
        if log_metric is not None:
            log_means(log_metric, self.__name__, breakdowns, _LOGGED)
        if log_extra is not None:
            log_extra(f"{self.__name__}/format_reason", [b.format_reason or "" for b in breakdowns])


@dataclass(frozen=True)
class RagRlAnswerReward(RagRlReward):
    """The answer component alone (for per-component ``reward_weights`` in TRL)."""

    log_components: bool = False
    __name__: ClassVar[str] = "rag_rl_answer"
    component: ClassVar[str] = "answer"


@dataclass(frozen=True)
class RagRlCitationReward(RagRlReward):
    """The citation component alone (for per-component ``reward_weights`` in TRL)."""

    log_components: bool = False
    __name__: ClassVar[str] = "rag_rl_citation"
    component: ClassVar[str] = "citation"


@dataclass(frozen=True)
class RagRlFormatReward(RagRlReward):
    """The format component alone (for per-component ``reward_weights`` in TRL)."""

    log_components: bool = False
    __name__: ClassVar[str] = "rag_rl_format"
    component: ClassVar[str] = "format"
