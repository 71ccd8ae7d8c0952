"""The BM25 kind's compiled search (numba), cached on disk (``cache=True``): a process compiles it once per machine
and loads it from the cache after that, so a server is healthy in seconds. Imported only when numba is installed
and chosen (:func:`rag_curriculum.retrieval._bm25.backend`).

Two searches, the same answers (exact: every score is bm25s's float32 sum, each passage's terms added in the
query's order; the ``k`` best with ties broken by the lower passage id, a heap keyed on (score, -id)):

* **WAND** (Broder et al.'s dynamic pruning, as Lucene prunes): the query's posting lists, each with the most its
  term can add (each column's largest score, stored at build time), walked document at a time in order of their
  current passage; a passage whose terms together cannot reach the current ``k``-th score (less a margin larger
  than float32's rounding) is skipped, the lists behind it jumping ahead (by galloping search) to the first passage
  that could; a passage that may is scored exactly. A query costs the postings it must look at, not the corpus.
  Used when every score in the query's columns is positive (BM25's usual case).
* **Exhaustive**: every passage's score summed column by column (bm25s's own loop), then the heap over all of them:
  for variants with negative or zero scores in a column, or a score for passages without the word (bm25l, bm25+).

Both release the GIL (``nogil``): a batch runs on a pool of Python threads, slices of it at once
(:meth:`rag_curriculum.retrieval._bm25.BM25Searcher.search`), so no second, parallel compilation is needed.
"""

from __future__ import annotations

import numpy as np
from numba import njit


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
def _push(vals, ids, n, k, s, d):
    """Offer (score s, id d) to the heap of the ``k`` best (its root the worst); the heap's new size."""
    if n < k:
        j = n
        vals[j] = s
        ids[j] = d
        while j > 0:
            p = (j - 1) // 2
            if _worse(vals[j], ids[j], vals[p], ids[p]):
                vals[j], vals[p] = vals[p], vals[j]
                ids[j], ids[p] = ids[p], ids[j]
                j = p
            else:
                break
        return n + 1
    if _worse(vals[0], ids[0], s, d):
        vals[0] = s
        ids[0] = d
        _sift_down(vals, ids, n, 0)
    return n


@njit(cache=True, nogil=True)
def _pop_all(vals, ids, n, out_vals, out_ids):
    for m in range(n - 1, -1, -1):  # the worst into the last free slot
        out_vals[m] = vals[0]
        out_ids[m] = ids[0]
        vals[0] = vals[m]
        ids[0] = ids[m]
        _sift_down(vals, ids, m, 0)


@njit(cache=True, nogil=True)
def _lower_bound(indices, lo, hi, d):
    while lo < hi:
        mid = (lo + hi) >> 1
        if indices[mid] < d:
            lo = mid + 1
        else:
            hi = mid
    return lo


# -- exhaustive -------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _exhaustive_one(q, k, offset, data, indptr, indices, scores, out_vals, out_ids):
    scores[:] = 0
    for t in q:
        for j in range(indptr[t], indptr[t + 1]):
            scores[indices[j]] += data[j]
    vals = np.empty(k, scores.dtype)
    ids = np.empty(k, np.int64)
    n = 0
    for i in range(scores.shape[0]):
        n = _push(vals, ids, n, k, scores[i] + offset, i)
    _pop_all(vals, ids, n, out_vals, out_ids)


@njit(cache=True, nogil=True)
def exhaustive(flat, ptr, k, data, indptr, indices, num_docs, offsets, out_vals, out_ids):
    scores = np.zeros(num_docs, data.dtype)
    for i in range(ptr.shape[0] - 1):
        if ptr[i + 1] > ptr[i]:
            _exhaustive_one(flat[ptr[i]:ptr[i + 1]], k, offsets[i], data, indptr, indices, scores, out_vals[i],
                            out_ids[i])


# -- WAND -------------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _exact(q, d, data, indptr, indices):
    """Passage ``d``'s score as bm25s sums it: its entry in each of the query's columns, in the query's order."""
    s = data[0] - data[0]  # a float32 zero: the sum stays float32, as bm25s sums
    for t in q:
        j = _lower_bound(indices, indptr[t], indptr[t + 1], d)
        if j < indptr[t + 1] and indices[j] == d:
            s += data[j]
    return s


@njit(cache=True, nogil=True)
def _gallop(indices, lo, hi, d):
    """The first position in [lo, hi) whose passage is >= d, searching outward from lo (short skips are cheap)."""
    step = 1
    prev = lo
    j = lo
    while j < hi and indices[j] < d:
        prev = j + 1
        j = lo + step
        step <<= 1
    if j > hi:
        j = hi
    return _lower_bound(indices, prev, j, d)


@njit(cache=True, nogil=True)
def _wand_one(q, k, data, indptr, indices, num_docs, colmax, out_vals, out_ids):
    # the query's distinct terms and how often each occurs (a short loop: np.unique would double the compile time)
    u = np.empty(q.shape[0], np.int64)
    mult = np.zeros(q.shape[0], np.int64)
    nt = 0
    for t in q:
        j = 0
        while j < nt and u[j] != t:
            j += 1
        if j == nt:
            u[nt] = t
            nt += 1
        mult[j] += 1
    u = u[:nt]
    big = np.int64(num_docs) + 1
    ub = np.empty(nt, np.float64)
    pos = np.empty(nt, np.int64)
    end = np.empty(nt, np.int64)
    cur = np.empty(nt, np.int64)
    for i in range(nt):
        ub[i] = mult[i] * np.float64(colmax[u[i]])
        pos[i] = indptr[u[i]]
        end[i] = indptr[u[i] + 1]
        cur[i] = np.int64(indices[pos[i]]) if pos[i] < end[i] else big
    order = np.arange(nt)
    rel = max(1e-5, (q.shape[0] + 4) * 2.4e-7)  # above float32's rounding of a sum of the query's terms
    vals = np.empty(k, data.dtype)
    ids = np.empty(k, np.int64)
    n = 0
    floor = -np.inf  # a passage whose bound is below this cannot enter the k best
    while True:
        for a in range(1, nt):  # the lists by their current passage (nearly sorted already)
            x = order[a]
            b = a - 1
            while b >= 0 and cur[order[b]] > cur[x]:
                order[b + 1] = order[b]
                b -= 1
            order[b + 1] = x
        acc = 0.0
        pivot = -1
        for j in range(nt):  # the first list at which the bounds so far reach the floor
            i = order[j]
            if cur[i] == big:
                break
            acc += ub[i]
            if acc >= floor:
                pivot = j
                break
        if pivot < 0:
            break
        pd = cur[order[pivot]]
        if cur[order[0]] == pd:  # every list before the pivot is at pd: score it
            s = 0.0
            j = 0
            while j < nt and cur[order[j]] == pd:
                i = order[j]
                s += mult[i] * np.float64(data[pos[i]])
                j += 1
            if s >= floor:
                n = _push(vals, ids, n, k, _exact(q, pd, data, indptr, indices), pd)
                if n == k:
                    theta = np.float64(vals[0])
                    floor = theta - (abs(theta) * rel + 1e-6)
            for jj in range(j):
                i = order[jj]
                pos[i] += 1
                cur[i] = np.int64(indices[pos[i]]) if pos[i] < end[i] else big
        else:  # no passage before pd can reach the floor: the lists behind jump to pd
            for jj in range(pivot):
                i = order[jj]
                if cur[i] < pd:
                    pos[i] = _gallop(indices, pos[i], end[i], pd)
                    cur[i] = np.int64(indices[pos[i]]) if pos[i] < end[i] else big
    # fewer than k passages hold a query word: the lowest ids holding none (score 0) fill the list
    i = 0
    while n < k and i < num_docs:
        hit = False
        for t in u:
            j = _lower_bound(indices, indptr[t], indptr[t + 1], i)
            if j < indptr[t + 1] and indices[j] == i:
                hit = True
                break
        if not hit:
            n = _push(vals, ids, n, k, data[0] - data[0], i)
        i += 1
    _pop_all(vals, ids, n, out_vals, out_ids)


@njit(cache=True, nogil=True)
def wand(flat, ptr, k, data, indptr, indices, num_docs, colmax, out_vals, out_ids):
    for i in range(ptr.shape[0] - 1):
        if ptr[i + 1] > ptr[i]:
            _wand_one(flat[ptr[i]:ptr[i + 1]], k, data, indptr, indices, num_docs, colmax, out_vals[i], out_ids[i])
