"""Deprecated: moved to :mod:`rag_curriculum.curricula._leakage` (private); the package's public names are exported
by :mod:`rag_curriculum.curricula`. Importing this module still works, with a DeprecationWarning."""

import warnings

from . import _leakage

warnings.warn("rag_curriculum.curricula.leakage is deprecated: it moved to the private rag_curriculum.curricula._leakage; import the "
              "public names from rag_curriculum.curricula", DeprecationWarning, stacklevel=2)


def __getattr__(name: str):
    return getattr(_leakage, name)
