"""Deprecated: moved to :mod:`rag_curriculum.curricula._schedules` (private); the package's public names are exported
by :mod:`rag_curriculum.curricula`. Importing this module still works, with a DeprecationWarning."""

import warnings

from . import _schedules

warnings.warn("rag_curriculum.curricula.schedules is deprecated: it moved to the private rag_curriculum.curricula._schedules; import the "
              "public names from rag_curriculum.curricula", DeprecationWarning, stacklevel=2)


def __getattr__(name: str):
    return getattr(_schedules, name)
