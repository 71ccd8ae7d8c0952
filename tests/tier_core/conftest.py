"""The toolkit with its core dependencies only (``pip install rag-curriculum``, no extras), as on the Ray nodes
of a verl cluster, which only need ``rag_curriculum.verl.rewards``. These tests run in the environment
``scripts/setup.sh core`` makes::

    bash scripts/setup.sh core && .venv-core/bin/python -m pytest -q -p no:cacheprovider tests/tier_core

Every test module skips itself where torch, transformers, TRL or vLLM is importable (the main ``.venv``,
``.venv-verl``): there they would prove nothing about a core install.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def core_shards(min_max_shards) -> Path:
    """The root conftest's min-max curriculum of the 100 real MuSiQue rows."""
    return min_max_shards


@pytest.fixture(scope="session")
def core_rows(min_max_rows) -> list[dict]:
    return min_max_rows
