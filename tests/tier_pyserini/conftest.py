"""pyserini itself (0.25.0 from the registry: Anserini 0.25.0, Lucene 9.9.1), the BM25 retriever Search-R1 runs,
beside the toolkit's index on the same real-text corpus. These tests run in the environment
``scripts/setup.sh pyserini`` makes::

    bash scripts/setup.sh pyserini && .venv-pyserini/bin/python -m pytest -q -p no:cacheprovider tests/tier_pyserini

Every test skips, saying why, where pyserini is not installed (the main ``.venv``, the other tiers) or where there
is no Java to run it (``java`` on PATH or ``$JAVA_HOME/bin/java``); a Java older than 11 fails, as pyserini would.
pyserini runs in child processes (``bench/pyserini_oracle.py``), so no JVM starts inside pytest.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def pytest_collection_modifyitems(config, items):
    here = [item for item in items if Path(str(item.fspath)).is_relative_to(Path(__file__).parent)]
    if not here:
        return
    reason = None
    if importlib.util.find_spec("pyserini") is None:
        reason = ("pyserini is not installed in this environment: this tier runs in .venv-pyserini "
                  "(bash scripts/setup.sh pyserini)")
    elif _java() is None:
        reason = "no Java here (pyserini runs Lucene in a JVM: a JDK or JRE 11 or later on PATH, or JAVA_HOME)"
    if reason:
        for item in here:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def java_version() -> int:
    out = subprocess.run([_java(), "-version"], capture_output=True, text=True).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    assert m, out
    major = int(m.group(1)) if m.group(1) != "1" else int(m.group(2))
    assert major >= 11, f"pyserini 0.25.0 needs Java 11 or later; this machine's is {major} ({out.splitlines()[0]})"
    return major


@pytest.fixture(scope="session")
def parity_module():
    """bench/bench_lucene_parity.py (the corpus, the oracle's runner, the comparison), imported from bench/."""
    sys.path.insert(0, str(BENCH))
    try:
        import bench_lucene_parity
    finally:
        sys.path.remove(str(BENCH))
    return bench_lucene_parity


@pytest.fixture(scope="session")
def shared_corpus(tmp_path_factory, parity_module) -> tuple[Path, list[dict]]:
    """Every paragraph of ../shared/data pooled and deduplicated (12,061 real Wikipedia paragraphs), in Search-R1's
    layout, and every question (1,200)."""
    corpus, queries = parity_module.shared_corpus(tmp_path_factory.mktemp("shared"))
    return corpus, json.loads(queries.read_text())
