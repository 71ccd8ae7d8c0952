"""Deprecated: moved to :mod:`rag_curriculum.generation._openai_backend` (private); the package's public names are exported
by :mod:`rag_curriculum.generation`. Importing this module still works, with a DeprecationWarning."""

import warnings

from . import _openai_backend

warnings.warn("rag_curriculum.generation.openai_backend is deprecated: it moved to the private rag_curriculum.generation._openai_backend; import the "
              "public names from rag_curriculum.generation", DeprecationWarning, stacklevel=2)


def __getattr__(name: str):
    return getattr(_openai_backend, name)
