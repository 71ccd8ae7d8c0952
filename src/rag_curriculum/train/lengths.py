"""Deprecated: moved to :mod:`rag_curriculum.train._lengths` (private); the package's public names are exported
by :mod:`rag_curriculum.train`. Importing this module still works, with a DeprecationWarning."""

import warnings

from . import _lengths

warnings.warn("rag_curriculum.train.lengths is deprecated: it moved to the private rag_curriculum.train._lengths; import the "
              "public names from rag_curriculum.train", DeprecationWarning, stacklevel=2)


def __getattr__(name: str):
    return getattr(_lengths, name)
