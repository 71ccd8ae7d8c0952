"""Progress bars with rates for long work (rich, on stderr); silent when disabled or not on a terminal. Written once,
in the retriever (``rag_retriever._support._progress``), which rag-curriculum requires: these are its names."""

from rag_retriever._support._progress import (
    NARROW_COLUMNS,
    duration_text,
    make_progress,
    maybe_progress,
    rate_text,
    track,
)

__all__ = ["NARROW_COLUMNS", "duration_text", "make_progress", "maybe_progress", "rate_text", "track"]
