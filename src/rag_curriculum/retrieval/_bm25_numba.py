"""The BM25 kind's compiled search (numba), cached on disk (``cache=True``): a process compiles it once per machine
and loads it from the cache after that, so a server is healthy in seconds. Imported only when numba is installed
and chosen (:func:`rag_curriculum.retrieval._bm25.backend`).

Per query: the scores of every passage summed column by column over bm25s's score matrix (CSC; the same loop, so
the same float32 sums, as bm25s's numba backend), then the ``k`` best with ties broken by the lower passage id
(a heap keyed on (score, -id); bm25s's own heap compares scores alone, so which of several tied passages it keeps
at the cut is not fixed)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True)
def _score(q, data, indptr, indices, scores):
    for t in q:
        for j in range(indptr[t], indptr[t + 1]):
            scores[indices[j]] += data[j]


@njit(cache=True, nogil=True)
def _worse(s1, i1, s2, i2):
    return s1 < s2 or (s1 == s2 and i1 > i2)


@njit(cache=True, nogil=True)
def _sift_down(vals, ids, n, j):
    while True:
        child = 2 * j + 1
        if child >= n:
            return
        if child + 1 < n and _worse(vals[child + 1], ids[child + 1], vals[child], ids[child]):
            child += 1
        if _worse(vals[child], ids[child], vals[j], ids[j]):
            vals[j], vals[child] = vals[child], vals[j]
            ids[j], ids[child] = ids[child], ids[j]
            j = child
        else:
            return


@njit(cache=True, nogil=True)
def _top_k(scores, k, out_vals, out_ids):
    """The ``k`` best of ``scores`` into ``out_vals`` / ``out_ids``, best first, ties by lower index."""
    vals = np.empty(k, scores.dtype)
    ids = np.empty(k, np.int64)
    n = 0
    for i in range(scores.shape[0]):
        s = scores[i]
        if n < k:  # push, then sift up (the root is the worst: lowest score, then highest id)
            j = n
            vals[j] = s
            ids[j] = i
            n += 1
            while j > 0:
                p = (j - 1) // 2
                if _worse(vals[j], ids[j], vals[p], ids[p]):
                    vals[j], vals[p] = vals[p], vals[j]
                    ids[j], ids[p] = ids[p], ids[j]
                    j = p
                else:
                    break
        elif s > vals[0]:  # better than the worst (an equal score comes later, with a higher id: worse)
            vals[0] = s
            ids[0] = i
            _sift_down(vals, ids, n, 0)
    for m in range(n - 1, -1, -1):  # pop the worst into the last free slot
        out_vals[m] = vals[0]
        out_ids[m] = ids[0]
        vals[0] = vals[m]
        ids[0] = ids[m]
        _sift_down(vals, ids, m, 0)


@njit(cache=True, nogil=True)
def search_serial(flat, ptr, k, data, indptr, indices, num_docs, offsets, out_vals, out_ids):
    scores = np.zeros(num_docs, data.dtype)
    for i in range(ptr.shape[0] - 1):
        if ptr[i + 1] == ptr[i]:
            continue
        scores[:] = 0
        _score(flat[ptr[i]:ptr[i + 1]], data, indptr, indices, scores)
        if offsets[i] != 0:
            scores += offsets[i]
        _top_k(scores, k, out_vals[i], out_ids[i])


@njit(cache=True, parallel=True)
def search_parallel(flat, ptr, k, data, indptr, indices, num_docs, offsets, out_vals, out_ids):
    for i in prange(ptr.shape[0] - 1):
        if ptr[i + 1] == ptr[i]:
            continue
        scores = np.zeros(num_docs, data.dtype)
        _score(flat[ptr[i]:ptr[i + 1]], data, indptr, indices, scores)
        if offsets[i] != 0:
            scores += offsets[i]
        _top_k(scores, k, out_vals[i], out_ids[i])
