"""Deprecated: moved to :mod:`rag_curriculum.train._progress` (private); the package's public names are exported
by :mod:`rag_curriculum.train`. Importing this module still works, with a DeprecationWarning."""

import warnings

from . import _progress

warnings.warn("rag_curriculum.train.progress is deprecated: it moved to the private rag_curriculum.train._progress; import the "
              "public names from rag_curriculum.train", DeprecationWarning, stacklevel=2)


def __getattr__(name: str):
    return getattr(_progress, name)
