"""Progress bars with rates for long work (rich, on stderr); silent when disabled or not on a terminal. Written once,
in ``rag_plumbing._progress`` (./plumbing, which rag-curriculum and rag-retriever require): these are its names."""

from rag_plumbing._progress import (
    NARROW_COLUMNS,
    duration_text,
    make_progress,
    maybe_progress,
    rate_text,
    track,
)

__all__ = ["NARROW_COLUMNS", "duration_text", "make_progress", "maybe_progress", "rate_text", "track"]
