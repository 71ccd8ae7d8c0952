"""Counts, tails and collector pauses shared by the build, the partition, the loaders' statistics and training."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["gc_paused"]


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector (restoring its state after): a build or a whole-file parse makes
    millions of small acyclic objects, and the full collections their allocation keeps triggering would
    otherwise cost more than the work itself (and touch every page a forked worker shares copy-on-write)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
