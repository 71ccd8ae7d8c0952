"""One local Ray cluster (2 CPUs) for the package's tests, started on first use and shut down after its last test;
without Ray installed the tests that need it skip (the notrain tier)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="package")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="the `ray` extra is needed for --engine ray")
    if ray.is_initialized():  # pragma: no cover - a cluster left by another package's tests
        ray.shutdown()
    # the workers import the test scripts (tests/scaling/_scripts.py) and this checkout's toolkit by name
    path = os.pathsep.join(p for p in (str(TESTS.parent / "src"), str(TESTS), os.environ.get("PYTHONPATH")) if p)
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path, "TOKENIZERS_PARALLELISM": "false",
                                       "HF_HUB_OFFLINE": "1"}})
    yield ray
    ray.shutdown()
