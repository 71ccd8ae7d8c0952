"""The exact ground truth every dense recall figure is measured against (``exact_top_k``: block by block over a
vector file, each block's candidates by a partition) equals a full sort of every score, ties by the lower id."""

import numpy as np
import pytest
from rag_retriever import _dense


@pytest.mark.parametrize("l2", [False, True])
def test_exact_top_k_is_the_full_sort_with_ties(tmp_path, monkeypatch, l2):
    rng = np.random.default_rng(0)
    # whole numbers: every score is exact in float32, so the full product and the blocks' products agree to the
    # bit whatever order BLAS sums in (it sums a 512-row block and the 5,000-row matrix in different orders: tenths
    # scored so differ in the last bit, and what ties in one does not tie in the other)
    x = np.round(rng.standard_normal((5000, 16)) * 4).astype(np.float32)
    x[700:760] = x[3]  # tied rows across the blocks' cut
    x[4100:4130] = x[3]
    q = np.round(rng.standard_normal((40, 16)) * 4).astype(np.float32)
    q[0] = x[3]
    path = tmp_path / "v.f32"
    x.tofile(path)
    monkeypatch.setattr(_dense, "ADD_ROWS", 512)  # ten blocks, the last short
    f = _dense.VectorFile(path, len(x), 16, dtype="<f4")
    assert np.array_equal(f.block(1000, 1100), x[1000:1100])  # read from the file, not the map
    s = _dense._scores(q, x, l2)
    for k in (1, 10, 50):
        want = np.lexsort((np.broadcast_to(np.arange(len(x)), s.shape), -s), axis=1)[:, :k]
        assert np.array_equal(_dense.exact_top_k(f, q, k, l2=l2), want), k
