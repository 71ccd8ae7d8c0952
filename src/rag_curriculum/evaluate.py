"""``rag_curriculum.evaluate``: the evaluation API (an alias of :mod:`rag_curriculum.evaluation`)."""

from __future__ import annotations

from .evaluation import *  # noqa: F403
from .evaluation import __all__  # noqa: F401
