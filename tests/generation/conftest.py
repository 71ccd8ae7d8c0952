from __future__ import annotations

import pytest

from rag_curriculum.generation import runner


@pytest.fixture
def runner_bars(monkeypatch) -> list:
    """Every progress bar the generation runner makes in the test, in order (the runner's own bar, recorded)."""
    bars: list = []

    class Bar(runner._Bar):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            bars.append(self)

    monkeypatch.setattr(runner, "_Bar", Bar)
    return bars
