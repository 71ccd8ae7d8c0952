"""The BM25 postings without numba (an environment with bm25s but not numba, as verl's tier has): the same kernels run
as plain Python and must write the same bytes and rank the same passages as the compiled ones. NumPy's own scalar
rules differ from numba's (a uint8 width's sums stay uint8), which once made this build overflow."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import MUSIQUE_TRAIN

pytest.importorskip("numba")

SCRIPT = """
import sys
sys.modules["numba"] = None  # as if numba were not installed
from rag_retriever import IndexConfig, build_index
build_index(IndexConfig(dataset="musique", input=sys.argv[1], out=sys.argv[2], depth=10, bm25=sys.argv[3]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["bm25s", "lucene"])
def test_the_plain_python_postings_equal_the_compiled_ones(preset, shared_data, tmp_path):
    from rag_retriever import IndexConfig, build_index

    compiled = tmp_path / "compiled"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(compiled), depth=10, bm25=preset))
    plain = tmp_path / "plain"
    src = Path(__file__).resolve().parents[2] / "src"
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(MUSIQUE_TRAIN), str(plain), preset], capture_output=True,
                       text=True, env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    files = sorted(p.name for p in (compiled / "bm25").iterdir())
    assert files == sorted(p.name for p in (plain / "bm25").iterdir())
    for name in files:
        assert (compiled / "bm25" / name).read_bytes() == (plain / "bm25" / name).read_bytes(), name
    for name in ("ranked_ids.npy", "ranked_scores.npy"):
        assert np.array_equal(np.load(compiled / name), np.load(plain / name)), name
