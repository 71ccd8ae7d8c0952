"""Deprecated: moved to :mod:`rag_curriculum.train._agent_adaptive` (private); the package's public names are exported
by :mod:`rag_curriculum.train`. Importing this module still works, with a DeprecationWarning."""

import warnings

from . import _agent_adaptive

warnings.warn("rag_curriculum.train.agent_adaptive is deprecated: it moved to the private rag_curriculum.train._agent_adaptive; import the "
              "public names from rag_curriculum.train", DeprecationWarning, stacklevel=2)


def __getattr__(name: str):
    return getattr(_agent_adaptive, name)
