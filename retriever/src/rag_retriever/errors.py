"""Every error the retriever raises on purpose, under :class:`RetrieverError`.

Each says what went wrong and where (the file, the line and the field for a bad corpus line); ``hint``, set where
it is raised, says what to do next. ``rag-retriever`` prints both (``error: ...`` then ``hint: ...``) and exits with
status 1 (2 for a :class:`UsageError` or an :class:`UnknownNameError`: the command itself is wrong). Each also
derives from the standard class it is a case of (a bad value is a :class:`ValueError`, an unknown name a
:class:`KeyError`), so code written against those keeps working. Their messages, fields and ``hint`` come from
``rag_plumbing._errors``, which rag-curriculum's errors build on too.

>>> e = DataError("not JSON", kind="invalid_json", path="corpus.jsonl", record="line 3", hint="fix the line")
>>> (str(e), e.detail, e.hint, isinstance(e, ValueError))
('corpus.jsonl, line 3: not JSON', 'not JSON', 'fix the line', True)
"""

from __future__ import annotations

from rag_plumbing import _errors as _base
from rag_plumbing._errors import SkipReport


class RetrieverError(_base.HintedError):
    """Base class of the retriever's own errors. ``hint``: what to do next (None when the message says it)."""


class ConfigError(RetrieverError, _base.ConfigError):
    """A setting or option that cannot be used as given (a bad value, a contradiction)."""


class UnknownNameError(RetrieverError, _base.UnknownNameError):
    """A name that is not registered (a retriever kind); the message lists the known names and the closest one."""


class UsageError(ConfigError, _base.UsageError):
    """The command itself is wrong: a value a setting cannot take, an option of another kind. The command line
    exits with status 2 for it."""


class SettingError(UsageError, _base.SettingError):
    """A setting with an impossible value (wrong type or out of range): names the setting, the value and what is
    allowed."""


class DataError(RetrieverError, _base.DataError):
    """A corpus line (or dataset record) that cannot be read faithfully. ``kind`` is a short machine name
    (``invalid_json``, ``invalid_utf8``, ``missing_field``, ``wrong_type``, ``empty_text``, ``conflicting_id``,
    ``corpus``, ``empty_corpus``); the message names the file, the record and the field."""


class IndexError_(RetrieverError):
    """An index folder that cannot be read, written or trusted as asked: not an index, of another format, damaged
    (a file changed since its manifest), or being written by another run. (Named with a trailing underscore, not to
    shadow the built-in ``IndexError``; :data:`RetrievalIndexError` is its public name.)"""


RetrievalIndexError = IndexError_


class EngineError(RetrieverError):
    """Ray (``--engine ray``) could not do the work: Ray is not installed, the cluster cannot be reached or lacks the
    resources asked for, or the work failed on every retry."""


__all__ = ["ConfigError", "DataError", "EngineError", "IndexError_", "RetrievalIndexError", "RetrieverError",
           "SettingError", "SkipReport", "UnknownNameError", "UsageError"]
