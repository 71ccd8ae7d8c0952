"""Every error the toolkit raises on purpose, in one hierarchy under :class:`CurriculumError`.

Each error says what went wrong and where (the file, the record and the field for bad input); ``hint``, set at the
raise site, says what to do next. The command line prints both (``error: ...`` then ``hint: ...``) and exits with
status 1 (2 for a :class:`UsageError` or an :class:`UnknownNameError`: the command itself is wrong); library callers catch :class:`CurriculumError` (or the standard class it also derives from: a bad value
is a :class:`ValueError`, an unknown name a :class:`KeyError`, so code written against those keeps working). The
kinds both distributions raise (a bad setting, an unknown name, a usage error, an impossible setting, a bad record)
take their messages, fields and the ``hint`` from the error machinery both share (``rag_plumbing._errors``, which
:mod:`rag_retriever.errors` builds on too), under :class:`CurriculumError`: catching it catches none of the
retriever's own errors.

>>> try:
...     raise ConfigError("n = 0: must be >= 1", hint="pass n=1 or more")
... except ValueError as e:
...     (str(e), e.hint)
('n = 0: must be >= 1', 'pass n=1 or more')
"""

from __future__ import annotations

from collections.abc import Sequence

from rag_plumbing import _errors as _base
from rag_plumbing._errors import SkipReport


class CurriculumError(_base.HintedError):
    """Base class of the toolkit's own errors. ``hint``: what to do next (None when the message says it)."""


# --- configuration: settings, names, recipes -----------------------------------------------------------------


class ConfigError(CurriculumError, _base.ConfigError):
    """A setting, option or configuration that cannot be used as given (a bad value, a contradiction)."""


class UnknownNameError(CurriculumError, _base.UnknownNameError):
    """A name that is not registered (a dataset, schedule, template, format, reward, backend or recipe); the
    message lists the known names and the closest one."""


class UsageError(ConfigError, _base.UsageError):
    """The command itself is wrong: a value a setting cannot take, an unknown option, name, recipe or argument. The
    command line exits with status 2 for it, as click does for an option that does not parse; every other refusal
    exits with 1."""


class RecipeError(UsageError):
    """A recipe that cannot be found, composed or bound to its config."""


class SettingError(UsageError, _base.SettingError):
    """A setting with an impossible value (wrong type or out of range): names the setting, the value and what is
    allowed."""


# --- input data -----------------------------------------------------------------------------------------------


class DataError(CurriculumError, _base.DataError):
    """A record that cannot be read faithfully.

    ``kind`` is a short machine name: ``invalid_json`` (truncated or invalid JSON, NaN/Infinity, nesting too
    deep, content after the list), ``invalid_utf8``, ``invalid_parquet``, ``missing_field``, ``wrong_type``,
    ``empty_question``, ``empty_answer``, ``no_gold``, ``dangling_supporting_fact``, ``conflicting_id`` (an id
    reused by a different question); the message names the file, the record and the field (``detail``: the
    message without the place, what a caller that names the place itself re-raises).
    """


class RewardInputError(DataError, ConfigError):
    """A reward function called with an argument it cannot score: a completion that is neither text nor chat
    messages, a column of another length than the completions, a ``trajectory`` (or one of its segments or
    searches) of the wrong shape, a ``gold_plan`` that is not a plan. ``field`` names the argument
    (``completions``, ``trajectory``, ``gold_plan``, a column), ``record`` the completion (its position in the
    batch). Every reward raises it (or the ``NoGoldAnswerError`` of :mod:`rag_curriculum._gold` for the gold
    answers, a :class:`DataError` too) instead of scoring such an input 0. It is a :class:`ConfigError` as well, as
    the refusals it replaces (a column of another length) were."""

    hint = ("pass what TRL passes: completions as strings or lists of chat messages, and every other argument as a "
            "column with one entry per completion, as the toolkit's shards and SearchRollout write them")


class InputIsADirectoryError(CurriculumError, IsADirectoryError):
    """A directory given where one data file is expected (the message names it and says what to pass)."""


class WrongDatasetError(CurriculumError, ValueError):
    """A file that belongs to another dataset (or to none the toolkit knows)."""


class ShardError(CurriculumError):
    """A shard directory that is missing, incomplete, or does not match its manifest."""


class HubError(CurriculumError, OSError):
    """A push to the Hugging Face Hub that the Hub refused or could not take (no login, no write access, no
    network): ``curriculum push``."""


# --- the commands' own refusals ------------------------------------------------------------------------------


class BuildError(CurriculumError):
    """A build that cannot be made as asked (too few questions, leakage, bad options)."""


class ModelFileError(CurriculumError, ValueError):
    """A model file that cannot be used: a ``.gguf`` file that is missing, not GGUF, truncated or damaged, or of an
    architecture the installed transformers cannot read."""


class TokenizerError(CurriculumError):
    """A tokenizer that cannot be loaded or used to count prompt tokens."""


class PartitionError(CurriculumError):
    """A partition that cannot run as asked (bad input, options, or results of another run)."""


class ProfileError(CurriculumError):
    """A level profile that cannot be made or used as asked (not a finished profile, a level with no scored
    question, a profile of other questions or another model than the build's)."""


class EvalError(CurriculumError):
    """An evaluation that cannot run as asked (bad inputs, results made with other settings)."""


# --- generation -----------------------------------------------------------------------------------------------


class GenerationError(CurriculumError):
    """A generation backend that cannot do what it was asked (bad settings, a server that keeps failing)."""


class PromptTooLongError(GenerationError):
    """Some prompts do not fit the model's context. ``indices`` are their positions in the call; ``results``,
    when the backend already generated the other prompts, holds their completions (None at ``indices``)."""

    def __init__(self, indices: Sequence[int], *, limit: int | None = None,
                 results: list[list[str] | None] | None = None, detail: str = "") -> None:
        self.indices = sorted(set(indices))
        self.limit = limit
        self.results = results
        shown = ", ".join(map(str, self.indices[:10])) + (" ..." if len(self.indices) > 10 else "")
        lim = f" of {limit} tokens" if limit else ""
        super().__init__(f"{len(self.indices)} prompt(s) longer than the model's context{lim} (positions {shown})"
                         + (f": {detail}" if detail else ""))


class IdenticalSamplesError(GenerationError):
    """With temperature > 0 and n > 1, the n samples of most questions came back identical: the server or backend
    most likely ignores the sampling parameters (decodes greedily), so pass@n would really be a greedy pass@1.
    Raised by the runner before the offending chunk is written."""

    def __init__(self, message: str, *, identical: int, judged: int) -> None:
        self.identical = identical
        self.judged = judged
        super().__init__(message)


class EngineError(GenerationError):
    """The Ray engine (``--engine ray``) could not do the work: Ray is not installed, the cluster cannot be reached
    or lacks the resources asked for, or a call's chunks failed on every retry (the message names the chunks and
    the last cause)."""


class RunMismatchError(CurriculumError):
    """A work directory made by a run with other settings (another model, sampling, input or chunking)."""


class IncompleteRunError(CurriculumError):
    """Results were asked for while some chunks are not done yet."""

    def __init__(self, message: str, missing: Sequence[int]) -> None:
        super().__init__(message)
        self.missing = list(missing)


# --- training -------------------------------------------------------------------------------------------------


class BatchError(CurriculumError, ValueError):
    """A batch that TRL cannot make (or that does not match the prompts per step asked for)."""

    hint = "batch.prompts_per_step / batch.per_device_completions / the number of processes set the batch"
    #: The values a refused layout could change to, by setting (each accepted by the same check); empty otherwise.
    offered: dict[str, list[int]] = {}  # noqa: RUF012 - set per instance where a layout is refused


class CurriculumOrderError(CurriculumError):
    """A setting (or an observed step) that breaks the curriculum order, under ``data.order_policy=refuse``."""

    hint = ("curriculum order is what this toolkit keeps: fix the setting, or data.order_policy=warn to go on (a "
            "--dry-run reports order problems as errors under either policy)")


class DivergedError(CurriculumError):
    """A training step whose loss or gradient norm is not finite: the update put NaN or inf into the weights, and the
    run stops before it saves them."""

    hint = ("in bf16 try float32 (a recipe's grpo.bf16=false), else a lower learning rate; the last checkpoint saved "
            "before this step (if any) is intact")


class PromptLengthError(CurriculumError):
    """A curriculum with prompts longer than a run's limits (the engine would truncate or drop them)."""

    hint = ("an engine would truncate these prompts (their system prompt and first passages go first) or drop them, "
            "and they are the hardest rows of the curriculum: raise the limit named above")


__all__ = ["BatchError", "BuildError", "ConfigError", "CurriculumError", "CurriculumOrderError", "DataError",
           "DivergedError", "EngineError", "EvalError", "GenerationError", "HubError", "IdenticalSamplesError",
           "IncompleteRunError", "InputIsADirectoryError", "ModelFileError", "PartitionError", "ProfileError",
           "PromptLengthError", "PromptTooLongError", "RecipeError", "RewardInputError", "RunMismatchError",
           "SettingError", "ShardError", "SkipReport", "TokenizerError", "UnknownNameError", "UsageError",
           "WrongDatasetError"]
