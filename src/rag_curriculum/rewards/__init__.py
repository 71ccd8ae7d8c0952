"""Rewards and metrics: the RAG-RL completion parser, answer / citation / joint metrics, the RAG-RL reward, and
the registries of output formats and rewards. Importing this package never imports torch, transformers or TRL,
and its names load on first use (module ``__getattr__``), each from its private module: a reward loads what it
needs and nothing of the others.

Metrics (used by partition and eval as well as by the rewards):

* :func:`normalize_answer`, :func:`exact_match`, :func:`answer_f1`: the official SQuAD / HotpotQA definitions,
  maximum over the gold answer and its aliases;
* :func:`citation_scores` (precision, recall, F1 over citation labels), :func:`joint_f1`, :func:`aggregate`.

Scoring: :func:`score_completion`, the one scorer of a completion (the reward's, the partition's and the
evaluation's), with :func:`get_parser` (a template's output format) and :func:`passage_labels`;
:func:`is_abstention` (a final answer that is the abstention answer, :data:`ABSTENTION_ANSWER` by default, checked by
:func:`check_abstention_answer`). The row's columns as every reward reads them, for the engines' adapters and the
adaptive curricula: :func:`row_gold` (the one reader of gold answers), :func:`row_gold_labels`,
:func:`row_answerable`, :func:`verl_answers` (verl's ``ground_truth``) and :func:`completion_text`.

The columns a method's reward reads, checked the same way by every reward: :func:`check_columns`,
:func:`completion_texts`, :func:`batch_answers`, :func:`column_items`, :func:`trajectory_column`,
:func:`trajectory_record` and :func:`log_means` (the logged means of a reward's terms).

The companion methods' rewards (CRAFT, VERITAS, GlobalRAG, Search-R1's) live in their folders,
:mod:`rag_curriculum.methods`, and register in :data:`REWARDS` by name; their names still import from here for one
release, each with a :class:`DeprecationWarning` naming the new place.

Rewards: :class:`RagRlReward` (TRL-style batched callable; :meth:`RagRlReward.score` gives the components),
registered as ``"rag-rl"`` with its components ``"rag-rl-answer"``, ``"rag-rl-citation"``, ``"rag-rl-format"``.
The engines' adapters are in their wings: :func:`rag_curriculum.train.reward_funcs_from_config` builds TRL's reward
functions from a recipe, :mod:`rag_curriculum.verl.rewards` holds verl's ``compute_score`` and the others.

>>> from rag_curriculum.rewards import citation_scores, exact_match, parse_completion
>>> p = parse_completion("<reasoning>...</reasoning><answer>Final answer: the Sun\\nSupporting passages: Sun</answer>")
>>> exact_match(p.answer, ["Sol", "Sun"]), citation_scores(p.citations, ["Sun", "Earth"]).recall
(1.0, 0.5)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._metrics import (
    CitationScores,
    aggregate,
    answer_f1,
    answer_scores,
    citation_key,
    citation_scores,
    exact_match,
    joint_f1,
    normalize_answer,
)
from .._plumbing import lazy_exports, moved_names

# The names imported under TYPE_CHECKING below load on first use, each from its private module: importing one reward
# (verl's reward file loads ``rewards._rag_rl``) loads what that reward needs, not every reward's judge, embedder or
# agent format.
_lazy, __dir__ = lazy_exports(__name__, globals())

#: Names of the companion methods' rewards that moved to :mod:`rag_curriculum.methods` (name -> its new package):
#: imported from here they still work for one release, each with a DeprecationWarning naming the new place.
_MOVED = {
    **dict.fromkeys(("CRAFT_REASONS", "CRAFT_VARIANTS", "CraftAnswerReward", "CraftBoundaryReward", "CraftBreakdown",
                     "CraftEvidenceReward", "CraftFormatReward", "CraftJudge", "CraftJudgeReward", "CraftParse",
                     "CraftReward", "boundary_check", "cited_documents", "parse_craft"),
                    "rag_curriculum.methods.craft"),
    **dict.fromkeys(("GlobalRagBreakdown", "GlobalRagReward", "anneal_weight"),
                    "rag_curriculum.methods.globalrag"),
    **dict.fromkeys(("SearchEmReward", "SearchR1Reward", "search_r1_breakdown", "search_r1_score",
                     "search_r1_sequence", "search_r1_target"),
                    "rag_curriculum.methods.search_r1"),
    **dict.fromkeys(("INFO_THINK_PROMPT", "THINK_SEARCH_PROMPT", "VeritasJudge", "VeritasReward", "agreement",
                     "lexical_judge", "pair_records", "read_labels", "think_answer", "trajectory_pairs"),
                    "rag_curriculum.methods.veritas"),
}
__getattr__ = moved_names(__name__, _MOVED, _lazy)

if TYPE_CHECKING:  # for type checkers and IDEs; at run time these load on first use
    from ._columns import _items as column_items
    from ._columns import (
        batch_answers,
        check_columns,
        completion_text,
        completion_texts,
        log_means,
        passage_labels,
        row_answerable,
        row_gold,
        row_gold_labels,
        trajectory_batch,
        trajectory_column,
        trajectory_record,
        verl_answers,
    )
    from ._formats import FORMATS, OutputFormat, get_format, register_format
    from ._parser import (
        DEFAULT_MAX_CHARS,
        MISSING_TAG,
        REASONS,
        ParsedCompletion,
        find_non_english,
        parse_completion,
        split_citations,
    )
    from ._rag_rl import (
        RagRlAnswerReward,
        RagRlCitationReward,
        RagRlFormatReward,
        RagRlReward,
        RewardBreakdown,
    )
    from ._registry import (
        EVAL_SCORERS,
        REWARDS,
        get_reward,
        parse_reward_spec,
        register_reward,
        reward_entries,
        reward_identity,
        with_model_tokenizer,
    )
    from ._scoring import (
        ABSTENTION_ANSWER,
        CompletionScore,
        check_abstention_answer,
        get_parser,
        is_abstention,
        score_completion,
    )

__all__ = [
    "ABSTENTION_ANSWER",
    "CitationScores",
    "CompletionScore",
    "DEFAULT_MAX_CHARS",
    "FORMATS",
    "MISSING_TAG",
    "OutputFormat",
    "ParsedCompletion",
    "REASONS",
    "EVAL_SCORERS",
    "REWARDS",
    "RagRlAnswerReward",
    "RagRlCitationReward",
    "RagRlFormatReward",
    "RagRlReward",
    "RewardBreakdown",
    "aggregate",
    "answer_f1",
    "answer_scores",
    "batch_answers",
    "check_abstention_answer",
    "check_columns",
    "citation_key",
    "citation_scores",
    "column_items",
    "completion_text",
    "completion_texts",
    "exact_match",
    "find_non_english",
    "get_format",
    "get_parser",
    "get_reward",
    "is_abstention",
    "joint_f1",
    "log_means",
    "normalize_answer",
    "parse_completion",
    "parse_reward_spec",
    "passage_labels",
    "register_format",
    "register_reward",
    "reward_entries",
    "reward_identity",
    "row_answerable",
    "row_gold",
    "row_gold_labels",
    "score_completion",
    "split_citations",
    "trajectory_batch",
    "trajectory_column",
    "trajectory_record",
    "verl_answers",
    "with_model_tokenizer",
]
