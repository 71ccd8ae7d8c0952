"""Schedules and the curriculum builder.

The build runs as stages (``_sources``, ``_plan``, ``_render``, ``_write``; ``_builder`` drives them); those, the
build's config (``_config``), the schedules (``_schedules``) and the leakage check (``_leakage``) are private
modules whose public names are exported here; the prompts' token counts are :mod:`rag_curriculum.lengths`'.
:mod:`~rag_curriculum.curricula.distractors` (distractor sources) and :mod:`~rag_curriculum.curricula.adaptive`
(rendering a row at any level) are public modules.
"""

from typing import TYPE_CHECKING

from .._plumbing import lazy_exports

# The names imported under TYPE_CHECKING below load on first use (the configs load without the build's stages,
# matplotlib or a tokenizer).
__getattr__, __dir__ = lazy_exports(__name__, globals())

if TYPE_CHECKING:  # for type checkers and IDEs
    from ..errors import BuildError
    from ._builder import BuildResult, build_curriculum, build_rows
    from ._config import DEFAULT_K, BuildConfig, SourceSpec, merge_build_flags
    from ._render import select_documents
    from ._schedules import (
        SCHEDULES,
        levels_for,
        linear,
        max_,
        min_max,
        parse_pieces,
        piecewise,
        register_schedule,
    )
    from ._write import same_build

__all__ = [
    "DEFAULT_K", "SCHEDULES", "BuildConfig", "BuildError", "BuildResult", "SourceSpec", "build_curriculum",
    "build_rows", "levels_for", "linear", "max_", "merge_build_flags", "min_max", "parse_pieces", "piecewise", "register_schedule",
    "same_build", "select_documents",
]
