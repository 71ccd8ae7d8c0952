"""Schedules and the curriculum builder."""

from typing import TYPE_CHECKING

from .._plumbing import lazy_exports

#: name -> the submodule defining it, imported on first use (the configs load without the build's stages,
#: matplotlib or a tokenizer).
_EXPORTS = {
    "BuildError": ".builder",
    "BuildResult": ".builder",
    "build_curriculum": ".builder",
    "select_documents": ".builder",
    "DEFAULT_K": ".config",
    "BuildConfig": ".config",
    "SourceSpec": ".config",
    "SCHEDULES": ".schedules",
    "levels_for": ".schedules",
    "linear": ".schedules",
    "max_": ".schedules",
    "min_max": ".schedules",
    "parse_pieces": ".schedules",
    "piecewise": ".schedules",
    "register_schedule": ".schedules",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

if TYPE_CHECKING:  # for type checkers and IDEs
    from .builder import (
        BuildError,
        BuildResult,
        build_curriculum,
        select_documents,
    )
    from .config import DEFAULT_K, BuildConfig, SourceSpec
    from .schedules import (
        SCHEDULES,
        levels_for,
        linear,
        max_,
        min_max,
        parse_pieces,
        piecewise,
        register_schedule,
    )

__all__ = [
    "DEFAULT_K", "SCHEDULES", "BuildConfig", "BuildError", "BuildResult", "SourceSpec", "build_curriculum",
    "levels_for", "linear", "max_", "min_max", "parse_pieces", "piecewise", "register_schedule", "select_documents",
]
