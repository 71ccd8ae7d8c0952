"""Schedules and the curriculum builder."""

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
