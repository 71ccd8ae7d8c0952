"""Deprecated: moved to :mod:`rag_curriculum.generation._ray_engine` (private); the package's public names are exported
by :mod:`rag_curriculum.generation`. Importing this module still works, with a DeprecationWarning."""

import warnings

from . import _ray_engine

warnings.warn("rag_curriculum.generation.ray_engine is deprecated: it moved to the private rag_curriculum.generation._ray_engine; import the "
              "public names from rag_curriculum.generation", DeprecationWarning, stacklevel=2)


def __getattr__(name: str):
    return getattr(_ray_engine, name)
