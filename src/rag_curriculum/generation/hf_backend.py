"""Deprecated: moved to :mod:`rag_curriculum.generation._hf_backend` (private); the package's public names are exported
by :mod:`rag_curriculum.generation`. Importing this module still works, with a DeprecationWarning."""

import warnings

from . import _hf_backend

warnings.warn("rag_curriculum.generation.hf_backend is deprecated: it moved to the private rag_curriculum.generation._hf_backend; import the "
              "public names from rag_curriculum.generation", DeprecationWarning, stacklevel=2)


def __getattr__(name: str):
    return getattr(_hf_backend, name)
