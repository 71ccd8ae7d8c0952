"""Deprecated: moved to :mod:`rag_curriculum.generation._base` (private); the package's public names are exported
by :mod:`rag_curriculum.generation`. Importing this module still works, with a DeprecationWarning."""

import warnings

from . import _base

warnings.warn("rag_curriculum.generation.base is deprecated: it moved to the private rag_curriculum.generation._base; import the "
              "public names from rag_curriculum.generation", DeprecationWarning, stacklevel=2)


def __getattr__(name: str):
    return getattr(_base, name)
