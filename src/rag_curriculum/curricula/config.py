"""Deprecated: moved to :mod:`rag_curriculum.curricula._config` (private); the package's public names are exported
by :mod:`rag_curriculum.curricula`. Importing this module still works, with a DeprecationWarning."""

import warnings

from . import _config

warnings.warn("rag_curriculum.curricula.config is deprecated: it moved to the private rag_curriculum.curricula._config; import the "
              "public names from rag_curriculum.curricula", DeprecationWarning, stacklevel=2)


def __getattr__(name: str):
    return getattr(_config, name)
