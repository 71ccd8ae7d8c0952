"""Scripted "models" for the Ray tests (module-level functions, so Ray workers import them by name), and helpers."""

from __future__ import annotations

import contextlib
import os
import random
import time
from pathlib import Path

SLOW_SECONDS = 0.25  # per prompt, for the tests that act while calls are under way


def seeded_answers(messages, n, seed):
    """A deterministic stand-in for a sampled model: a question's samples depend on its seed only."""
    r = random.Random(seed)
    return [f"<reasoning>\n{r.random():.6f}\n</reasoning>\n<answer>\nFinal answer: "
            f"{r.choice(['Renfield', 'June 6', 'zzzq', 'Dodge County', 'qqq'])}\nSupporting passages: x\n</answer>"
            for _ in range(n)]


def slow_answers(messages, n, seed):
    time.sleep(SLOW_SECONDS)
    return seeded_answers(messages, n, seed)


def failing_answers(messages, n, seed, *, bad_seed):
    """Raises an unexpected error (not one of the toolkit's) for the question sampled with ``bad_seed``."""
    if seed == bad_seed:
        raise RuntimeError("simulated engine failure")
    return seeded_answers(messages, n, seed)


@contextlib.contextmanager
def inside(d: Path):
    """Run in ``d`` with ``--out out``: configs record OUT as given, so runs to compare write to folders named alike."""
    d.mkdir(parents=True, exist_ok=True)
    old = os.getcwd()
    os.chdir(d)
    try:
        yield Path("out")
    finally:
        os.chdir(old)


def tree(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and not p.name.endswith(".lock")}  # locks (filelock) stay
