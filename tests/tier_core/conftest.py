"""The toolkit with its core dependencies only (``pip install rag-curriculum``, no extras), as on the Ray nodes
of a verl cluster, which only need ``rag_curriculum.rewards.verl``. These tests run in the environment
``scripts/setup_core.sh`` makes::

    bash scripts/setup_core.sh && .venv-core/bin/python -m pytest -q -p no:cacheprovider tests/tier_core

Every test module skips itself where torch, transformers, TRL or vLLM is importable (the main ``.venv``,
``.venv-verl``): there they would prove nothing about a core install.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MUSIQUE_TRAIN = (ROOT.parent / "shared" / "data" / "musique" / "musique_ans_v1.0_train.sample100.jsonl").resolve()


@pytest.fixture(scope="session")
def core_shards(tmp_path_factory) -> Path:
    """A min-max curriculum of the 100 MuSiQue rows, built with the core install."""
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    if not MUSIQUE_TRAIN.is_file():
        pytest.fail(f"{MUSIQUE_TRAIN} not found: these tests need ../shared/data beside the checkout")
    out = tmp_path_factory.mktemp("core-shards") / "musique-min-max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=100)], schedule="min-max",
                                 out=str(out), seed=0, rows_per_shard=40, workers=1))
    return out


@pytest.fixture(scope="session")
def core_rows(core_shards) -> list[dict]:
    import pyarrow.parquet as pq

    from rag_curriculum.shards import shard_files

    return [row for f in shard_files(core_shards) for row in pq.read_table(f).to_pylist()]
