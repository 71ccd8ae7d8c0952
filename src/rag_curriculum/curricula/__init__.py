"""Schedules and the curriculum builder.

The build runs as stages (``_sources``, ``_plan``, ``_render``, ``_write``; ``_builder`` drives them); those, the
build's config (``_config``), the schedules (``_schedules``) and the leakage check (``_leakage``) are private
modules whose public names are exported here; the prompts' token counts are :mod:`rag_curriculum.lengths`'.
:mod:`~rag_curriculum.curricula.distractors` (distractor sources) and :mod:`~rag_curriculum.curricula.adaptive`
(rendering a row at any level) are public modules.
"""

from typing import TYPE_CHECKING

from .._plumbing import lazy_exports

#: name -> the submodule defining it, imported on first use (the configs load without the build's stages,
#: matplotlib or a tokenizer).
_EXPORTS = {
    "BuildError": "..errors",
    "BuildResult": "._builder",
    "build_curriculum": "._builder",
    "build_rows": "._builder",
    "select_documents": "._render",
    "same_build": "._write",
    "DEFAULT_K": "._config",
    "BuildConfig": "._config",
    "SourceSpec": "._config",
    "merge_build_flags": "._config",
    "SCHEDULES": "._schedules",
    "levels_for": "._schedules",
    "linear": "._schedules",
    "max_": "._schedules",
    "min_max": "._schedules",
    "parse_pieces": "._schedules",
    "piecewise": "._schedules",
    "register_schedule": "._schedules",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

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
