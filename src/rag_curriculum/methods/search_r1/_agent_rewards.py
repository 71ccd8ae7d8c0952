"""Rewards of a search agent (Search-R1's ``<search>`` / ``<answer>`` protocol, :mod:`rag_curriculum.agents`).

* ``search-em``: Search-R1's reward (its ``qa_em.py``): the answer is the *last* ``<answer>`` block, normalised the
  SQuAD way (:func:`~rag_curriculum.rewards.normalize_answer`), 1.0 when it matches the gold answer or any alias,
  else 0.0 (no answer: 0.0);
* ``search-f1``: the HotpotQA token F1 of the same answer against the gold answers (maximum over the aliases);
* ``search-gold-found``: 1.0 when one of the trajectory's searches returned a gold passage (the curriculum row's
  gold labels, decided by content), else 0.0: a retrieval signal that comes free with the toolkit's rows;
* ``search-count``: the number of searches the trajectory ran (give it a small negative weight for a penalty,
  a positive one for a bonus, 0 to log it only).

The answer and the searches are read from the ``trajectory`` column the toolkit's rollout function returns
(:class:`~rag_curriculum.train.SearchRollout`: one dict per completion, the environment's record of what was
searched, what came back and which answer it accepted); without it (a completion scored outside a rollout), the
answer is the last ``<answer>`` block of the completion text, as Search-R1 parses it, and there are no searches.
Under TRL's native tool calling (``environment_factory``, :class:`~rag_curriculum.train.SearchEnvironment`) the
searches come from each rollout's environment (TRL passes ``environments``) and the answer is the last ``<answer>``
block of the final assistant message.

Every reward is a frozen, picklable dataclass with a ``__name__`` (TRL names the reward and its logged mean after
it). ``search-em`` also logs the batch means of every component (``search/exact_match``, ``search/f1``,
``search/answered``, ``search/gold_found``, ``search/searches``, ``search/format_errors``) through TRL's
``log_metric``, so a recipe that trains on EM alone still sees them all.

>>> em = SearchEmReward()
>>> done = "<think>t</think><search>q</search>\\n\\n<information>Doc 1(Title: x) y</information>\\n\\n<answer> Paris </answer>"
>>> em([done, "<answer>Lyon</answer>", "no answer"], answers=[["Paris"], ["Paris"], ["Paris"]])
[1.0, 0.0, 0.0]
>>> traj = {"answer": "the Paris", "errors": ["no_action"], "searches": [{"gold": [False, True]}, {"gold": [False]}]}
>>> b = em.score("ignored", ["Paris"], traj)
>>> b.exact_match, b.gold_found, b.searches, b.format_errors
(1.0, 1.0, 2, 1)
>>> SearchCountReward()(["x"], answers=[["Paris"]], trajectory=[traj])
[2.0]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from ..._metrics import answer_scores
from ..._plumbing import AsDict
from ...errors import ConfigError, RewardInputError
from ...grammar import parse_trajectory
from ...rewards import completion_text, log_means, trajectory_batch, trajectory_record

__all__ = ["SearchBreakdown", "SearchCountReward", "SearchEmReward", "SearchF1Reward", "SearchGoldFoundReward"]


@dataclass(frozen=True, slots=True)
class SearchBreakdown(AsDict):
    """One trajectory's scores: EM and F1 of its answer, whether it answered, whether a search found a gold
    passage, how many searches it ran and how many turns had a format error."""

    exact_match: float
    f1: float
    answered: float
    gold_found: float
    searches: int
    format_errors: int


_LOGGED = tuple(f.name for f in fields(SearchBreakdown))  # logged through TRL's log_metric (batch means)


def last_answer(text: str) -> str | None:
    """Search-R1's ``extract_solution``: the content of the last ``<answer>...</answer>`` block, stripped.

    >>> last_answer("<answer>a</answer> then <answer> b </answer>"), last_answer("<answer>open")
    ('b', None)
    """
    return parse_trajectory(text).answer


def from_environments(completions: Sequence[Any], environments: Sequence[Any]) -> list[dict[str, Any]]:
    """Trajectory records of tool-calling rollouts: each environment's searches (its ``record``) and the last
    ``<answer>`` of the completion's final assistant message."""
    if len(environments) != len(completions):
        raise RewardInputError(f"got {len(completions)} completions but {len(environments)} environments",
                               kind="wrong_length", field="environments")
    out = []
    for c, env in zip(completions, environments, strict=True):
        record = getattr(env, "record", None)
        if not isinstance(record, Mapping):
            raise ConfigError(f"the environment {type(env).__name__} keeps no `record` of its searches",
                              hint="use rag_curriculum.train.SearchEnvironment as the environment_factory")
        searches = [dict(x) for x in record.get("searches") or []]
        if isinstance(c, Sequence) and not isinstance(c, str):
            # TRL drops a tool result that would push the completion past max_completion_length (the model never
            # sees it): such a search counts for nothing, and is flagged
            seen = sum(1 for m in c if isinstance(m, Mapping) and m.get("role") == "tool")
            called = [x for x in searches if not x.get("scripted")]  # a scripted first search is no tool message
            for x in called[seen:]:
                x["gold"], x["dropped"] = [False] * len(x.get("gold") or []), True
        out.append({"answer": last_answer(completion_text(c)), "searches": searches, "errors": []})
    return out


def _searches(trajectory: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(trajectory.get("searches") or [])  # checked by trajectory_record: every entry a dict


@dataclass(frozen=True)
class SearchEmReward:
    """Search-R1's exact-match reward as a batched TRL reward function; see the module docstring. The other search
    rewards are this class returning another component."""

    log_components: bool = True
    """Log the batch mean of every component through TRL's ``log_metric`` (under ``search/``)."""

    __name__: ClassVar[str] = "search_em"
    component: ClassVar[str] = "exact_match"

    def score(self, completion: Any, answers: Sequence[str] | str,
              trajectory: Mapping[str, Any] | None = None) -> SearchBreakdown:
        """The scores of one completion (``trajectory``: the rollout's record of it, when there is one)."""
        trajectory = trajectory_record(trajectory)
        if trajectory is not None:
            answer = trajectory.get("answer")
            searches = _searches(trajectory)
            errors = len(trajectory.get("errors") or [])
        else:
            answer, searches, errors = last_answer(completion_text(completion)), [], 0
        em, f1 = answer_scores(answer, answers) if answer else (0.0, 0.0)
        gold = float(any(any(s.get("gold") or []) for s in searches))
        return SearchBreakdown(em, f1, float(answer is not None), gold, len(searches), errors)

    def components(self, completions: Sequence[Any], answers: Sequence[Any] | None = None, *,
                   reward_model: Sequence[Any] | None = None,
                   trajectory: Sequence[Any] | None = None, golden_answers: Sequence[Any] | None = None,
                   id: Sequence[Any] | None = None) -> list[SearchBreakdown]:
        """Per-completion breakdowns of a batch; the columns hold one entry per completion. The gold answers come
        from ``answers``, ``golden_answers`` or ``reward_model`` (Search-R1's ``ground_truth.target`` too); a row
        without any is an error naming it (:func:`~._columns.batch_answers`)."""
        rows = trajectory_batch(completions, answers, reward_model, golden_answers, trajectory, ids=id,
                                who="the search rewards")
        return [self.score(c, gold, t) for c, gold, t in rows]

    def __call__(self, completions: Sequence[Any], answers: Sequence[Any] | None = None, *,
                 reward_model: Sequence[Any] | None = None, trajectory: Sequence[Any] | None = None,
                 golden_answers: Sequence[Any] | None = None,
                 log_metric: Callable[[str, float], None] | None = None, environments: Sequence[Any] | None = None,
                 **kwargs: Any) -> list[float]:
        """TRL reward function: one float per completion (``self.component`` of each breakdown)."""
        if trajectory is None and environments is not None:
            trajectory = from_environments(completions, environments)
        scores = self.components(completions, answers, reward_model=reward_model, trajectory=trajectory,
                                 golden_answers=golden_answers, id=kwargs.get("id"))
        if self.log_components and log_metric is not None and scores:
            log_means(log_metric, "search", scores, _LOGGED)
        component = self.component
        return [float(getattr(b, component)) for b in scores]


@dataclass(frozen=True)
class SearchF1Reward(SearchEmReward):
    """The token F1 of the last answer (HotpotQA's, maximum over the aliases)."""

    log_components: bool = False
    __name__: ClassVar[str] = "search_f1"
    component: ClassVar[str] = "f1"


@dataclass(frozen=True)
class SearchGoldFoundReward(SearchEmReward):
    """1.0 when a search of the trajectory returned a gold passage of the row (needs the ``trajectory`` column)."""

    log_components: bool = False
    __name__: ClassVar[str] = "search_gold_found"
    component: ClassVar[str] = "gold_found"


@dataclass(frozen=True)
class SearchCountReward(SearchEmReward):
    """The number of searches the trajectory ran: a penalty or a bonus through its weight (needs the ``trajectory``
    column)."""

    log_components: bool = False
    __name__: ClassVar[str] = "search_count"
    component: ClassVar[str] = "searches"
