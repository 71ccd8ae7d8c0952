"""Deprecated: moved to :mod:`rag_curriculum.curricula._lengths` (private); the package's public names are exported
by :mod:`rag_curriculum.curricula`. Importing this module still works, with a DeprecationWarning."""

import warnings

from . import _lengths

warnings.warn("rag_curriculum.curricula.lengths is deprecated: it moved to the private rag_curriculum.curricula._lengths; import the "
              "public names from rag_curriculum.curricula", DeprecationWarning, stacklevel=2)


def __getattr__(name: str):
    return getattr(_lengths, name)
