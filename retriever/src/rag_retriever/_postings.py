"""The BM25 index's postings, compressed, and the compiled search that decodes them (numba, cached on disk; the same
functions run as plain Python where numba is not installed: slow, the same answers).

**Format.** Each term's postings (the passages holding it, ascending, with the term's frequency there) are cut into
blocks of :data:`BLOCK` postings; a block stores its passages as gaps (minus one) and its frequencies (minus one),
each list bit-packed at the width of its largest value, in 32-bit words. Per block: its last passage (to skip
blocks unread), where its words start, the two widths, and the most any of its postings can score (block-max
pruning); per term: its first block, its document frequency and the most it can score. Scores are computed in
the loop from the frequency and the passage's length, exactly as the index's scoring preset computes them
(:class:`Scoring`), never stored: a posting costs about 1 to 2 bytes where a stored float32 score and int32 passage
took 8.

**Search.** Exact top ``k``, two strategies with the same answers (tests/retrieval/test_index_flat.py,
tests/retrieval/test_bm25_lucene.py), chosen by the index's size (:meth:`PostingsIndex.strategy`):

* a window of passages at a time (the default from :data:`WINDOWED_FROM` passages,
  :func:`window_many`): in each window of :data:`SEARCH_WINDOW` passages the lists whose bounds there sum
  short of the ``k``-th best score so far are left aside, the others' postings summed in an accumulator of the
  window's size (it stays in the cache, where the term-at-a-time accumulators, 10 bytes a passage, do not once an
  index has millions of passages), then each passage touched is looked up in the lists left aside, a list at a time,
  dropped as soon as it falls short; faster than term at a time on large indexes only (the figures:
  docs/benchmarks.md, bench/bench_bm25_strategies.py);
* term at a time with pruning (the default otherwise, :func:`pruned_many`): the terms by
  the most they can add, every posting of each summed until the terms left could not lift an untouched passage to
  the ``k``-th best score so far (kept in a heap of ``k`` as postings are added), then only the passages that still
  could are looked up in the rest, a list at a time, each dropped as soon as its score so far, the most its block of
  the list can add and the lists after fall short (the candidates are kept ascending by merging the first lists'
  runs, not by sorting: numba's sort took as long as the rest of a query at 5.2M passages).

Ties are broken by the tie key (the lower passage id, or for the Lucene preset Lucene's order: the ``id`` string's
bytes); bounds are compared with a margin wider than float rounding. An exhaustive sum serves the bm25s variants that
score passages without the word (bm25l, bm25+).
"""

from __future__ import annotations

import itertools
import json
import math
import mmap
import threading
from typing import Any

from ._bm25_parts import BM25Error, _pool, write_vocab
from ._integrity import load_npy

try:  # compiled by numba where it is installed; the same functions run as plain Python otherwise
    import numba
except ImportError:  # pragma: no cover
    numba = None

BLOCK = 128  # postings per block
RANGE_POSTINGS = 1 << 26  # postings put in term order at once by a build (8 bytes each: 512 MB)
RANGE_CHUNKS = 4096  # the slices of the vocabulary a build's ranges are made of
SEARCH_WINDOW = 16384  # passages a window of the windowed search (its accumulator stays in cache)
WINDOWED_FROM = 1 << 20  # passages from which the search goes a window at a time (below: term at a time,
#                          its accumulators, 10 bytes a passage, in the cache: faster there)
PREFETCH = 16  # postings ahead whose accumulator, mark and length the first phase asks the memory for
INLINE = True  # the small helpers inlined into the search (faster; longer to compile once)

# the search's strategies (:meth:`PostingsIndex.strategy`)
EVERY_POSTING, TERM_AT_A_TIME, WINDOWED = 0, 1, 2
# scoring presets (the kernels' ``mode``)
BM25S, LUCENE = 0, 1
# bm25s's methods (the kernels' ``method``)
METHOD_CODES = {"lucene": 0, "robertson": 0, "atire": 1, "bm25l": 2, "bm25+": 3}


# -- bit packing ------------------------------------------------------------------------------------------------
def _bits(v):
    n = 0
    while v:
        v >>= 1
        n += 1
    return n


def _bytes(n, wd, wf):
    """Bytes a block of ``n`` postings takes: its gaps (``wd`` bits each) and frequencies (``wf``), packed."""
    return (n * (wd + wf) + 7) >> 3


#: Block maxima are stored as 16-bit steps of 1/1024 on a log scale from QMIN: a bound a hair above the true maximum.
QMIN = 1e-6
QLOG = math.log1p(1.0 / 1024.0)


def _qmax(q):
    """The bound a stored block maximum stands for (0 for 0)."""
    if q == 0:
        return 0.0
    return QMIN * math.exp(q * QLOG)


def _pack(values, n, w, words, bit):
    """``values[:n]``, ``w`` bits each, into ``words`` from bit ``bit`` (zeroed beforehand)."""
    if w == 0:
        return
    w = np_int64(w)  # as in _unpack
    bit = np_int64(bit)
    for i in range(n):
        v = values[i]
        wi = bit >> 5
        sh = bit & 31
        words[wi] |= (v << sh) & 0xFFFFFFFF
        if sh + w > 32:
            words[wi + 1] |= v >> (32 - sh)
        bit += w


def _unpack(words, bit, n, w, out):
    """``n`` values of ``w`` bits from bit ``bit`` of ``words``."""
    if w == 0:
        for i in range(n):
            out[i] = 0
        return
    # int64 widths and positions: without numba, numpy's rules would keep a uint8 width's sums in uint8
    w = np_int64(w)
    bit = np_int64(bit)
    mask = (1 << w) - 1
    for i in range(n):
        wi = bit >> 5
        two = np_int64(words[wi]) | (np_int64(words[wi + 1]) << 32)  # the stream is padded with a word at its end
        out[i] = (two >> (bit & 31)) & mask
        bit += w


def encode(docs, tfs, term_starts, block_first, block_last, block_off, block_bits, words, scratch):
    """Encode every term's postings (``docs`` / ``tfs`` term after term, ``term_starts`` their bounds) into blocks:
    with ``words`` None, only the blocks' word offsets (``block_off``, the total last) and widths are filled (the
    sizing pass); otherwise the words themselves. ``block_first[t]``: term ``t``'s first block."""
    gaps = scratch[0]
    fr = scratch[1]
    for t in range(term_starts.shape[0] - 1):
        s, e = term_starts[t], term_starts[t + 1]
        prev = -1
        blk = block_first[t]
        for a in range(s, e, BLOCK):
            z = min(e, a + BLOCK)
            n = z - a
            mg = 0
            mf = 0
            for i in range(n):
                dv = np_int64(docs[a + i])
                g = dv - prev - 1
                prev = dv
                gaps[i] = g
                f = tfs[a + i] - 1
                fr[i] = f
                if g > mg:
                    mg = g
                if f > mf:
                    mf = f
            wd = _bits(mg) if n > 1 else 0  # one posting: its passage is the block's last, no gap stored
            wf = _bits(mf)
            if words.shape[0] == 0:
                block_bits[blk, 0] = wd
                block_bits[blk, 1] = wf
                block_last[blk] = prev
                block_off[blk + 1] = np_int64(block_off[blk]) + _bytes(n, wd, wf)
            else:
                bit = np_int64(block_off[blk]) * 8
                _pack(gaps, n, wd, words, bit)
                _pack(fr, n, wf, words, bit + n * wd)
            blk += 1


def decode_block(words, block_off, block_bits, block_last, blk, first, n, docs_out, tfs_out):
    """Block ``blk`` (``first``: its term's first block; ``n``: its postings) into ``docs_out`` / ``tfs_out``."""
    wd = np_int64(block_bits[blk, 0])
    wf = np_int64(block_bits[blk, 1])
    bit = np_int64(block_off[blk]) * 8
    _unpack(words, bit + n * wd, n, wf, tfs_out)
    for i in range(n):
        tfs_out[i] += 1
    if n == 1:  # a block of one posting stores no gap: its passage is its last
        docs_out[0] = np_int64(block_last[blk])
        return
    _unpack(words, bit, n, wd, docs_out)
    d = np_int64(-1) if blk == first else np_int64(block_last[blk - 1])
    for i in range(n):
        d += docs_out[i] + 1
        docs_out[i] = d
    if d != np_int64(block_last[blk]):  # its gaps must end at its recorded last passage (every passage then below)
        raise ValueError(BAD_BLOCK)


#: What a kernel raises when a block's gaps do not end at the block's recorded last passage (words.npy crafted or
#: damaged): the search names the block (:meth:`PostingsIndex._bad_block`).
BAD_BLOCK = "a block of words.npy does not decode to its recorded last passage"


def np_int64(v):  # replaced by numba's int64 when compiled
    return int(v)


def _prefetch(arr, i):  # replaced by a prefetch instruction when compiled (kernels()): here, nothing
    return None


# -- scoring ----------------------------------------------------------------------------------------------------
def _score(mode, method, w, idf, nonocc, tf, dl, cache, avg, k1, b, delta):
    """One posting's score, float32, as the preset computes it: ``w`` the term's weight (Lucene: boost x idf,
    float32), ``idf`` the term's float32 idf (bm25s), ``dl`` the passage's length (bm25s) or norm byte (Lucene)."""
    if mode == LUCENE:
        v = f32(f32(tf) * cache[dl])
        return f32(w - f32(w / f32(f32(1.0) + v)))
    t = f64(f32(tf))
    ld = f64(dl)
    if method == 0:  # lucene / robertson: tf / (k1 * ((1 - b) + b * l_d / l_avg) + tf), float64
        tfc = t / (k1 * ((1.0 - b) + b * ld / avg) + t)
    elif method == 1:  # atire: the numerator in float32 (NumPy's weak Python scalar), the rest float64
        tfc = f64(f32(f32(tf) * f32(k1 + 1.0))) / (t + k1 * (1.0 - b + b * ld / avg))
    elif method == 2:  # bm25l
        c = t / (1.0 - b + b * ld / avg)
        tfc = ((k1 + 1.0) * (c + delta)) / (k1 + c + delta)
    else:  # bm25+: the numerator in float32
        tfc = (f64(f32(f32(k1 + 1.0) * f32(tf))) / (k1 * (1.0 - b + b * ld / avg) + t)) + delta
    s = f64(idf) * tfc
    if method >= 2:
        s = s - f64(nonocc)
    return f32(s)


def f32(v):  # replaced by numba's float32 when compiled
    import numpy as np

    return np.float32(v)


def f64(v):
    return float(v)


def lucene_value_bound(vmax, w):
    """The most a Lucene term of weight ``w`` can score, from the largest ``freq * cache[norm]`` of its postings (a
    score grows with it), in float64 (a bound, not the float32 score)."""
    return w - w / (1.0 + vmax)


# -- the top k ----------------------------------------------------------------------------------------------------
def _worse(s1, k1_, s2, k2_):
    return s1 < s2 or (s1 == s2 and k1_ > k2_)


def _sift_down(vals, keys, ids, n, j):
    while True:
        c = 2 * j + 1
        if c >= n:
            return
        if c + 1 < n and _worse(vals[c + 1], keys[c + 1], vals[c], keys[c]):
            c += 1
        if _worse(vals[c], keys[c], vals[j], keys[j]):
            vals[j], vals[c] = vals[c], vals[j]
            keys[j], keys[c] = keys[c], keys[j]
            ids[j], ids[c] = ids[c], ids[j]
            j = c
        else:
            return


def _push(vals, keys, ids, n, k, s, key, d):
    """Offer (score ``s``, tie key ``key``, passage ``d``) to the heap of the ``k`` best (its root the worst)."""
    if n < k:
        j = n
        vals[j] = s
        keys[j] = key
        ids[j] = d
        while j > 0:
            p = (j - 1) // 2
            if _worse(vals[j], keys[j], vals[p], keys[p]):
                vals[j], vals[p] = vals[p], vals[j]
                keys[j], keys[p] = keys[p], keys[j]
                ids[j], ids[p] = ids[p], ids[j]
                j = p
            else:
                break
        return n + 1
    if _worse(vals[0], keys[0], s, key):
        vals[0] = s
        keys[0] = key
        ids[0] = d
        _sift_down(vals, keys, ids, n, 0)
    return n


def _heap(k):
    """An empty heap of the ``k`` best: their scores, tie keys and passages."""
    return np.empty(k, np.float32), np.empty(k, np.int64), np.empty(k, np.int64)


def _push_untouched(mark, num_docs, s0, vals, keys, ids, n, k):
    """bm25s ranks every passage: the untouched ones (``mark`` unset), each scoring ``s0``, offered to the heap by
    lower id as long as one can still enter (then a higher id cannot either). Returns the heap's size."""
    d = 0
    while d < num_docs:
        if not mark[d]:
            if n < k or _worse(vals[0], keys[0], s0, d):
                n = _push(vals, keys, ids, n, k, s0, d, d)
            else:
                break
        d += 1
    return n


def _pop_all(vals, keys, ids, n, out_vals, out_ids):
    for m in range(n - 1, -1, -1):
        out_vals[m] = vals[0]
        out_ids[m] = ids[0]
        vals[0] = vals[m]
        keys[0] = keys[m]
        ids[0] = ids[m]
        _sift_down(vals, keys, ids, m, 0)


def decode_docs(words, block_off, block_bits, block_last, blk, first, n, docs_out):
    """Only the passages of block ``blk`` (a lookup needs a frequency only where it finds its passage:
    :func:`tf_at`)."""
    if n == 1:
        docs_out[0] = np_int64(block_last[blk])
        return
    wd = np_int64(block_bits[blk, 0])
    _unpack(words, np_int64(block_off[blk]) * 8, n, wd, docs_out)
    d = np_int64(-1) if blk == first else np_int64(block_last[blk - 1])
    for i in range(n):
        d += docs_out[i] + 1
        docs_out[i] = d
    if d != np_int64(block_last[blk]):
        raise ValueError(BAD_BLOCK)


def tf_at(words, block_off, block_bits, blk, n, p):
    """The frequency of the ``p``-th posting of block ``blk`` (``n`` postings), unpacked alone."""
    wf = np_int64(block_bits[blk, 1])
    if wf == 0:
        return np_int64(1)
    # (int64 throughout, as in _unpack: without numba a NumPy integer here would turn the shift below to int64)
    bit = np_int64(np_int64(block_off[blk]) * 8 + np_int64(n) * np_int64(block_bits[blk, 0]) + np_int64(p) * wf)
    wi = bit >> 5
    two = np_int64(words[wi]) | (np_int64(words[wi + 1]) << 32)
    return ((two >> (bit & 31)) & ((1 << wf) - 1)) + 1


# -- the searches -----------------------------------------------------------------------------------------------
def _seek_block(block_last, lo, hi, d):
    """The first block in [lo, hi) whose last passage is >= d (hi: none)."""
    step = 1
    prev = lo
    j = lo
    while j < hi and block_last[j] < d:
        prev = j + 1
        j = lo + step
        step <<= 1
    if j > hi:
        j = hi
    while prev < j:
        mid = (prev + j) >> 1
        if block_last[mid] < d:
            prev = mid + 1
        else:
            j = mid
    return prev


def _most_postings(flat, ptr, term_df):
    """The most postings one query of the batch reads (its terms' document frequencies summed)."""
    most = 0
    for q in range(ptr.shape[0] - 1):
        tot = 0
        for j in range(ptr[q], ptr[q + 1]):
            tot += term_df[flat[j]]
        if tot > most:
            most = tot
    return most


def _keep(touched, c, d, wide, mark, reach):
    """A touched passage ``d`` kept at ``touched[c]`` when its score can still ``reach`` the ``k`` best, else
    dropped (its ``mark`` and ``wide`` cleared). Returns how many are kept."""
    if reach:
        touched[c] = d
        return c + 1
    mark[d] = False
    wide[d] = 0.0
    return c


def exhaustive_many(flat, ptr, order_flat, order_ptr, weights, offsets, k, mode, method, params, words, block_off,
                    block_bits, block_last, term_first, term_end, term_df, idf, nonocc, doc_len, tie, num_docs, out_vals,
                    out_ids, counts, scores, wide, mark):
    """Every posting of the query scored, term after term in the query's token order (bm25s's own loop: float32
    sums; Lucene: double sums, then float), plus ``offsets[i]`` (the non-occurrence scores bm25l and bm25+ give
    every passage), then the ``k`` best: the passages the query touched, and for bm25s the others (score 0, or the
    offset) by lower id where they can still enter. The cost is the query's postings, not the corpus.
    ``scores`` (float32), ``wide`` (float64, Lucene) and ``mark`` (bool): one per passage, zero, left zero (a
    thread's own, reused)."""
    k1, b, delta, avg = params[0], params[1], params[2], params[3]
    cache = params[4:]
    most = _most_postings(flat, ptr, term_df)
    touched = np.empty(most, np.int64)
    bd = np.empty(BLOCK, np.int64)
    bt = np.empty(BLOCK, np.int64)
    vals, keys, ids = _heap(k)
    for q in range(ptr.shape[0] - 1):
        if ptr[q + 1] == ptr[q]:
            continue
        m = 0
        terms = flat[ptr[q]:ptr[q + 1]]
        for j in range(order_ptr[q], order_ptr[q + 1]):
            u = order_flat[j]
            t = terms[u]
            f = term_first[t]
            for bb in range(f, term_end[t]):
                nb = min(BLOCK, term_df[t] - (bb - f) * BLOCK)
                decode_block(words, block_off, block_bits, block_last, bb, f, nb, bd, bt)
                for x in range(nb):
                    if x + PREFETCH < nb:  # the lines a later posting reads, asked for ahead (a list's passages
                        dn = bd[x + PREFETCH]  # are spread thinly: each read would wait on memory)
                        _prefetch(wide, dn)
                        _prefetch(mark, dn)
                        _prefetch(doc_len, dn)
                    d = bd[x]
                    if not mark[d]:
                        mark[d] = True
                        touched[m] = d
                        m += 1
                    v = _score(mode, method, weights[ptr[q] + u], idf[t], nonocc[t], bt[x], doc_len[d], cache, avg, k1,
                               b, delta)
                    if mode == LUCENE:
                        wide[d] += f64(v)
                    else:
                        scores[d] = f32(scores[d] + v)
        n = 0
        off = offsets[q]
        for x in range(m):
            d = touched[x]
            s = f32(wide[d]) if mode == LUCENE else f32(scores[d] + off)
            key = np_int64(tie[d]) if tie.shape[0] else d
            if n < k or _worse(vals[0], keys[0], s, key):
                n = _push(vals, keys, ids, n, k, s, key, d)
        if mode != LUCENE:  # bm25s ranks every passage: the untouched ones score 0 (plus the offset), lower id first
            n = _push_untouched(mark, num_docs, f32(f32(0.0) + off), vals, keys, ids, n, k)
        for x in range(m):
            d = touched[x]
            mark[d] = False
            scores[d] = 0
            if mode == LUCENE:
                wide[d] = 0
        _pop_all(vals, keys, ids, n, out_vals[q], out_ids[q])
        counts[q] = n


def _offer(vals, ids, n, k, s, d, was):
    """Offer passage ``d``'s score so far ``s`` to a heap of the ``k`` best scores so far, each passage once (its
    root the worst; ties left as they fall: its root is a lower bound of the final ``k``-th score, not the
    ranking). A passage already in it has its entry raised (a score so far only grows). ``was``: its score before
    (float32): an entry is never above it and never below the root, so the heap is searched for ``d`` only when
    ``was`` reaches the root (rarely: the search is O(k), for depths of thousands too)."""
    for i in range(n if n > 0 and was >= vals[0] else 0):
        if ids[i] == d:
            vals[i] = s
            _sift_ids(vals, ids, n, i)  # raised: down towards the leaves
            return n
    if n < k:
        i = n
        vals[i] = s
        ids[i] = d
        while i > 0:
            p = (i - 1) // 2
            if vals[i] < vals[p]:
                vals[i], vals[p] = vals[p], vals[i]
                ids[i], ids[p] = ids[p], ids[i]
                i = p
            else:
                break
        return n + 1
    vals[0] = s
    ids[0] = d
    _sift_ids(vals, ids, n, 0)
    return n


def _sift_ids(vals, ids, n, i):
    """Entry ``i`` of :func:`_offer`'s heap (scores and passages, no tie keys) moved down towards the leaves while a
    child is lower."""
    while True:
        c = 2 * i + 1
        if c >= n:
            return
        if c + 1 < n and vals[c + 1] < vals[c]:
            c += 1
        if vals[c] < vals[i]:
            vals[i], vals[c] = vals[c], vals[i]
            ids[i], ids[c] = ids[c], ids[i]
            i = c
        else:
            return


def _merge_runs(a, buf, starts, r):
    """``a[:starts[r]]``, made of ``r`` ascending runs (``starts[i]`` to ``starts[i + 1]``), sorted in place by
    merging runs pairwise (``buf`` as large: the other side of each pass); ``starts`` is overwritten."""
    src, dst = a, buf
    flips = 0
    while r > 1:
        nr = 0
        i = 0
        while i < r:
            lo = starts[i]
            if i + 1 < r:
                mid, hi = starts[i + 1], starts[i + 2]
                p, p2, w = lo, mid, lo
                while p < mid and p2 < hi:
                    if src[p] <= src[p2]:
                        dst[w] = src[p]
                        p += 1
                    else:
                        dst[w] = src[p2]
                        p2 += 1
                    w += 1
                while p < mid:
                    dst[w] = src[p]
                    p += 1
                    w += 1
                while p2 < hi:
                    dst[w] = src[p2]
                    p2 += 1
                    w += 1
            else:
                for x in range(lo, starts[i + 1]):
                    dst[x] = src[x]
            starts[nr] = lo
            nr += 1
            i += 2
        starts[nr] = starts[r]
        r = nr
        src, dst = dst, src
        flips += 1
    if flips % 2 == 1:
        for x in range(starts[r]):
            a[x] = buf[x]


def _lookup_left(mode, method, j, nt, order, terms, weights, mult, idf, nonocc, rest, theta, rel, m, touched, buf,
                 runs, words, block_off, block_bits, block_last, block_max, term_first, term_end, term_df, doc_len,
                 params, wide, mark, vals, ids, n, k, bd):
    """The pruned searches' second phase, both presets: the ``m`` touched passages (``j`` ascending runs, one a
    list summed whole) that can still reach the ``k``-th best score so far, merged into passage order, then looked
    up in the lists left (``order[j:]``), a list at a time, skipping ahead block by block; a passage is dropped
    (its ``wide`` and ``mark`` cleared) as soon as its score so far, the most its block of the list can add and the
    lists after fall short, its block not decoded. ``terms``: the query's terms (indices into the per-term arrays);
    a Lucene list's weight is ``weights[u]``, a bm25s list's score ``mult[u]`` times its word's score. Returns the
    passages left, the heap's size and the k-th score so far."""
    k1, b, delta, avg = params[0], params[1], params[2], params[3]
    cache = params[4:]
    floor = theta - (abs(theta) * rel + 1e-6)
    c = 0
    for r in range(j):  # (each run stays ascending)
        lo, hi = runs[r], runs[r + 1]
        runs[r] = c
        for x in range(lo, hi):
            d = touched[x]
            c = _keep(touched, c, d, wide, mark, wide[d] + rest[j] >= floor)
    runs[j] = c
    _merge_runs(touched, buf, runs, j)
    m = c
    for jj in range(j, nt):
        u = order[jj]
        t = terms[u]
        w = weights[u]
        after = rest[jj + 1]
        f = term_first[t]
        e = term_end[t]
        bb = f
        nb = 0
        p = 0
        loaded = -1
        bounded = -1  # the block whose bound is ``bound`` (an exp and a division once a block, not once a passage)
        bound = 0.0
        c = 0
        for x in range(m):
            if x + PREFETCH < m:
                _prefetch(wide, touched[x + PREFETCH])
            d = touched[x]
            if bb < e and block_last[bb] < d:
                bb = _seek_block(block_last, bb + 1, e, d)
            if bb < e:
                if bounded != bb:
                    bound = _bound(mode, w, mult[u], block_max[bb])
                    bounded = bb
                if wide[d] + bound + after >= floor:
                    if loaded != bb:
                        nb = min(BLOCK, term_df[t] - (bb - f) * BLOCK)
                        decode_docs(words, block_off, block_bits, block_last, bb, f, nb, bd)
                        loaded = bb
                        p = 0
                    while p < nb and bd[p] < d:
                        p += 1
                    if p < nb and bd[p] == d:
                        tf = tf_at(words, block_off, block_bits, bb, nb, p)
                        was = wide[d]
                        v = was + _posting(mode, method, w, mult[u], idf[t], nonocc[t], tf, doc_len[d], cache, avg,
                                           k1, b, delta)
                        wide[d] = v
                        if f32(v) > vals[0]:
                            n = _offer(vals, ids, n, k, f32(v), d, f32(was))
            # still in reach (past this list's end: it adds nothing)
            c = _keep(touched, c, d, wide, mark, wide[d] + after >= floor)
        m = c
        if f64(vals[0]) > theta:
            theta = f64(vals[0])
            floor = theta - (abs(theta) * rel + 1e-6)
    return m, n, theta


def _posting(mode, method, w, mu, idf, nonocc, tf, dl, cache, avg, k1, b, delta):
    """A posting's score as the pruned and windowed searches sum it (float64): Lucene's float32 score, or bm25s's
    float32 score times the word's count in the query."""
    if mode == LUCENE:
        return f64(_score(LUCENE, 0, w, f32(0.0), f32(0.0), tf, dl, cache, avg, k1, b, delta))
    return mu * f64(_score(BM25S, method, f32(0.0), idf, nonocc, tf, dl, cache, avg, k1, b, delta))


def _bound(mode, w, mu, q):
    """The most a list's posting can score (float64) under the stored block maximum ``q``."""
    if mode == LUCENE:
        return lucene_value_bound(_qmax(q), f64(w))
    return mu * _qmax(q)


def window_many(flat, ptr, order_flat, order_ptr, weights, k, mode, method, params, words, block_off, block_bits,
                block_last, block_max, term_first, term_end, term_df, idf, nonocc, doc_len, tie, num_docs, acc, hit,
                cand, buf, out_vals, out_ids, counts):
    """The search a window of passages at a time (Lucene's own MaxScore over windows), both presets: in each window
    of ``acc.shape[0]`` passages every list gets the bound of its blocks there; the lists whose bounds, lowest first,
    sum below the ``k``-th best score so far are left out of the window's first pass (no passage they alone hold can
    enter), the others' postings in the window are added up in an accumulator of the window's size (it stays in the
    cache), and the passages touched are then looked up in the lists left out, a list at a time, the highest bound
    first, block by block, each dropped as soon as its score so far plus the bounds of the lists not yet seen falls
    short; a passage that survives every list has its whole score and enters the heap of the ``k`` best. A window
    whose bounds all sum short is skipped, nothing decoded. Sums and bounds in float64, compared with a margin below
    the ``k``-th score; the score that ranks is the preset's own: Lucene's double sum as float32, bm25s's float32 sum
    in the query's word order (from each survivor's frequencies, kept as it is summed). Exact, ties included. A
    bm25s query matched by fewer than ``k`` passages is left to :func:`pruned_many` (it fills up with score-0
    passages): its count here says so."""
    k1, b, delta, avg = params[0], params[1], params[2], params[3]
    cache = params[4:]
    window = acc.shape[0]  # (acc and hit all zero, and left so)
    big = 1
    for q in range(ptr.shape[0] - 1):
        big = max(big, ptr[q + 1] - ptr[q])
    bd = np.empty((big, BLOCK), np.int64)
    bt = np.empty((big, BLOCK), np.int64)
    cb = np.zeros(big, np.int64)  # each list's block at or after the window's first passage
    loaded = np.zeros(big, np.int64)  # the block decoded into bd (-1: none), its postings, the next one to read
    nbk = np.zeros(big, np.int64)
    pos = np.zeros(big, np.int64)
    freqs = np.zeros(big, np.bool_)  # whether bt holds the loaded block's frequencies too
    mult = np.zeros(big, np.float64)  # bm25s: each word's count in the query
    wb = np.zeros(big, np.float64)
    order = np.zeros(big, np.int64)
    nes = np.zeros(big + 1, np.float64)
    runs = np.zeros(big + 1, np.int64)
    tfm = np.zeros((window if mode == BM25S else 0, big), np.int32)  # bm25s: the frequencies of a window's passages
    vals, keys, ids = _heap(k)
    for q in range(ptr.shape[0] - 1):
        lo = ptr[q]
        nt = ptr[q + 1] - lo
        counts[q] = 0
        if nt == 0:
            continue
        for u in range(nt):
            cb[u] = term_first[flat[lo + u]]
            loaded[u] = -1
            mult[u] = 0.0
        for j in range(order_ptr[q], order_ptr[q + 1]):
            mult[order_flat[j]] += 1.0
        rel = max(1e-5, ((nt if mode == LUCENE else order_ptr[q + 1] - order_ptr[q]) + 4) * 2.4e-7)
        n = 0
        floor = -np.inf
        base = 0
        while base < num_docs:
            wend = min(base + window, num_docs) - 1  # (inclusive)
            nxt = num_docs  # the first passage any list may hold past the window (a lower bound)
            total = 0.0
            for u in range(nt):
                t = flat[lo + u]
                f = term_first[t]
                e = term_end[t]
                c = cb[u]
                if c < e and block_last[c] < base:
                    c = _seek_block(block_last, c + 1, e, base)
                    cb[u] = c
                m = 0
                bb = c
                while bb < e and (bb == f or block_last[bb - 1] < wend):  # blocks that may hold window passages
                    if block_max[bb] > m:
                        m = block_max[bb]
                    bb += 1
                if bb < e:
                    nxt = min(nxt, block_last[bb - 1] + 1 if bb > f else 0)
                wb[u] = _bound(mode, weights[lo + u], mult[u], m) if bb > c else 0.0
                total += wb[u]
            if total == 0.0 or (n == k and total < floor):
                base = max(wend + 1, nxt) if total == 0.0 else wend + 1
                continue
            for u in range(nt):  # the lists by their bound here, lowest first
                order[u] = u
                i = u
                while i > 0 and wb[order[i - 1]] > wb[u]:
                    order[i] = order[i - 1]
                    i -= 1
                order[i] = u
            ne = 0  # the lists left out of the first pass: order[:ne], nes[i] their first i bounds summed
            nes[0] = 0.0
            if n == k:
                while ne < nt and nes[ne] + wb[order[ne]] < floor:
                    nes[ne + 1] = nes[ne] + wb[order[ne]]
                    ne += 1
            m = 0
            r = 0
            for i in range(ne, nt):  # first pass: every posting of the other lists in the window
                u = order[i]
                if wb[u] == 0.0:
                    continue
                t = flat[lo + u]
                f = term_first[t]
                e = term_end[t]
                w = weights[lo + u]
                runs[r] = m
                r += 1
                c = cb[u]
                while c < e and (c == f or block_last[c - 1] < wend):
                    if loaded[u] != c or not freqs[u]:
                        nb = min(BLOCK, term_df[t] - (c - f) * BLOCK)
                        decode_block(words, block_off, block_bits, block_last, c, f, nb, bd[u], bt[u])
                        if loaded[u] != c:
                            pos[u] = 0
                        loaded[u] = c
                        freqs[u] = True
                        nbk[u] = nb
                    p = pos[u]
                    nb = nbk[u]
                    while p < nb and bd[u, p] < base:
                        p += 1
                    while p < nb:
                        d = bd[u, p]
                        if d > wend:
                            break
                        o = d - base
                        if not hit[o]:
                            hit[o] = True
                            cand[m] = o
                            m += 1
                            if mode == BM25S:
                                for uu in range(nt):
                                    tfm[o, uu] = 0
                        tf = bt[u, p]
                        acc[o] += _posting(mode, method, w, mult[u], idf[t], nonocc[t], tf, doc_len[d], cache, avg, k1,
                                           b, delta)
                        if mode == BM25S:
                            tfm[o, u] = tf
                        p += 1
                    pos[u] = p
                    if p < nb:
                        break  # the block goes on past the window
                    c += 1
                cb[u] = c
            runs[r] = m
            if m * 8 >= window:  # many: read off the marks in order (cheaper than merging the lists' runs)
                c = 0
                for o in range(window):
                    if hit[o]:
                        cand[c] = o
                        c += 1
            elif r > 1:
                _merge_runs(cand, buf, runs, r)
            c = 0
            for x in range(m):  # the window's touched passages (in passage order) that the lists left out can lift
                o = cand[x]
                if acc[o] + nes[ne] >= floor:
                    cand[c] = o
                    c += 1
                else:
                    acc[o] = 0.0
                    hit[o] = False
            m = c
            for i in range(ne - 1, -1, -1):  # looked up in the lists left out, a list at a time, the highest bound
                u = order[i]  # first, block by block; a passage dropped as soon as it falls short
                t = flat[lo + u]
                f = term_first[t]
                e = term_end[t]
                w = weights[lo + u]
                after = nes[i]
                cc = cb[u]
                bnd_blk = -1
                bnd = 0.0
                c = 0
                for x in range(m):
                    o = cand[x]
                    d = base + o
                    sc = acc[o]
                    if cc < e and block_last[cc] < d:
                        cc = _seek_block(block_last, cc + 1, e, d)
                    if cc < e:
                        if bnd_blk != cc:  # (an exp and a division a block, not a passage)
                            bnd_blk = cc
                            bnd = _bound(mode, w, mult[u], block_max[cc])
                        if sc + bnd + after >= floor:
                            if loaded[u] != cc:  # its passages only: a frequency is read where one is found
                                nb = min(BLOCK, term_df[t] - (cc - f) * BLOCK)
                                decode_docs(words, block_off, block_bits, block_last, cc, f, nb, bd[u])
                                loaded[u] = cc
                                freqs[u] = False
                                nbk[u] = nb
                                pos[u] = 0
                            p = pos[u]
                            nb = nbk[u]
                            while p < nb and bd[u, p] < d:
                                p += 1
                            pos[u] = p
                            if p < nb and bd[u, p] == d:
                                tf = bt[u, p] if freqs[u] else tf_at(words, block_off, block_bits, cc, nb, p)
                                sc += _posting(mode, method, w, mult[u], idf[t], nonocc[t], tf, doc_len[d], cache,
                                               avg, k1, b, delta)
                                acc[o] = sc
                                if mode == BM25S:
                                    tfm[o, u] = tf
                    if sc + after >= floor:  # (a list skipped by its bound: the passage falls short here)
                        cand[c] = o
                        c += 1
                    else:
                        acc[o] = 0.0
                        hit[o] = False
                cb[u] = cc
                m = c
            for x in range(m):  # whole scores: into the heap of the k best
                o = cand[x]
                d = base + o
                whole = acc[o]
                acc[o] = 0.0
                hit[o] = False
                if whole < floor:
                    continue
                if mode == LUCENE:
                    s32 = f32(whole)
                else:
                    s32 = f32(0.0)
                    for jj in range(order_ptr[q], order_ptr[q + 1]):  # bm25s: float32 sums in the word order
                        u = order_flat[jj]
                        if tfm[o, u] > 0:
                            t = flat[lo + u]
                            s32 = f32(s32 + _score(BM25S, method, f32(0.0), idf[t], nonocc[t], np_int64(tfm[o, u]),
                                                   doc_len[d], cache, avg, k1, b, delta))
                key = np_int64(tie[d]) if tie.shape[0] else d
                if n < k or _worse(vals[0], keys[0], s32, key):
                    n = _push(vals, keys, ids, n, k, s32, key, d)
                    if n == k:
                        theta = f64(vals[0])
                        floor = theta - (abs(theta) * rel + 1e-6)
            base = wend + 1
        _pop_all(vals, keys, ids, n, out_vals[q], out_ids[q])
        counts[q] = n


def _lookup_all(t, f, e, df, cand, c, words, block_off, block_bits, block_last, bd, bt, out_tf):
    """Term ``t``'s frequency in each of the ``c`` sorted passages ``cand`` (0 where absent), skipping blocks."""
    bb = f
    nb = 0
    p = 0
    loaded = -1
    for x in range(c):
        out_tf[x] = 0
    if f >= e:  # a term without postings
        return
    for x in range(c):
        d = cand[x]
        if block_last[bb] < d:
            bb = _seek_block(block_last, bb + 1, e, d)
            if bb >= e:
                return
        if loaded != bb:
            nb = min(BLOCK, df - (bb - f) * BLOCK)
            decode_block(words, block_off, block_bits, block_last, bb, f, nb, bd, bt)
            loaded = bb
            p = 0
        while p < nb and bd[p] < d:
            p += 1
        if p < nb and bd[p] == d:
            out_tf[x] = bt[p]


def pruned_many(flat, ptr, order_flat, order_ptr, weights, k, mode, method, params, words, block_off, block_bits,
                block_last, block_max, term_first, term_end, term_df, term_max, idf, nonocc, doc_len, tie, num_docs,
                out_vals, out_ids, counts, wide, mark):
    """The search term at a time with pruning, both presets: the terms by the most they can add, highest first,
    every posting of each added up (a passage's sum so far in double: Lucene sums its clauses so, in any order; for
    bm25s it only chooses the candidates) until the terms left could not lift an untouched passage to the ``k``-th
    best score so far; then the touched passages that could still reach it are looked up in the lists left, one list
    at a time (:func:`_lookup_left`): a passage whose score so far, plus the most its block of the list can add, plus
    the lists after, falls short is dropped without its block decoded, so the passages left shrink list by list. The
    ``k``-th best score so far (a lower bound of the final one) is kept as postings are added, in a heap of ``k``.
    Then the ``k`` best among the passages left: the Lucene preset's by their sums (Lucene's tie order included,
    :func:`_finish_lucene`), the bm25s preset's by their exact scores summed as bm25s sums them
    (:func:`_finish_bm25s`). Exact. ``wide`` (float64) and ``mark`` (bool): one per passage, zero, left zero (a
    thread's own, reused)."""
    k1, b, delta, avg = params[0], params[1], params[2], params[3]
    cache = params[4:]
    most = _most_postings(flat, ptr, term_df)
    touched = np.empty(most, np.int64)
    buf = np.empty(most, np.int64)
    bd = np.empty(BLOCK, np.int64)
    bt = np.empty(BLOCK, np.int64)
    vals, keys, ids = _heap(k)
    for q in range(ptr.shape[0] - 1):
        lo = ptr[q]
        nt = ptr[q + 1] - lo
        if nt == 0:
            continue
        mult = np.zeros(nt, np.int64)  # each term's count in the query (bm25s adds a repeated word again)
        for j in range(order_ptr[q], order_ptr[q + 1]):
            mult[order_flat[j]] += 1
        ub = np.empty(nt, np.float64)
        for j in range(nt):
            if mode == LUCENE:
                ub[j] = lucene_value_bound(f64(term_max[flat[lo + j]]), f64(weights[lo + j]))
            else:
                ub[j] = mult[j] * f64(term_max[flat[lo + j]])
        order = np.argsort(-ub)
        rest = np.zeros(nt + 1, np.float64)  # rest[j]: the bounds of order[j..] summed
        for j in range(nt - 1, -1, -1):
            rest[j] = rest[j + 1] + ub[order[j]]
        rel = max(1e-5, ((nt if mode == LUCENE else order_ptr[q + 1] - order_ptr[q]) + 4) * 2.4e-7)
        runs = np.zeros(nt + 1, np.int64)  # phase A's lists' new passages: one ascending run each
        m = 0
        j = 0
        n = 0  # the heap of the k best so far
        theta = -np.inf
        while j < nt:  # phase A: every posting of the terms with the highest bounds
            u = order[j]
            t = flat[lo + u]
            w = weights[lo + u]
            f = term_first[t]
            runs[j] = m
            for bb in range(f, term_end[t]):
                nb = min(BLOCK, term_df[t] - (bb - f) * BLOCK)
                decode_block(words, block_off, block_bits, block_last, bb, f, nb, bd, bt)
                for x in range(nb):
                    if x + PREFETCH < nb:  # the lines a later posting reads, asked for ahead (a list's passages
                        dn = bd[x + PREFETCH]  # are spread thinly: each read would wait on memory)
                        _prefetch(wide, dn)
                        _prefetch(mark, dn)
                        _prefetch(doc_len, dn)
                    d = bd[x]
                    if not mark[d]:
                        mark[d] = True
                        touched[m] = d
                        m += 1
                    was = wide[d]
                    v = was + _posting(mode, method, w, mult[u], idf[t], nonocc[t], bt[x], doc_len[d], cache, avg, k1,
                                       b, delta)
                    wide[d] = v
                    if n < k or f32(v) > vals[0]:
                        n = _offer(vals, ids, n, k, f32(v), d, f32(was))
            j += 1
            runs[j] = m
            if j < nt and n == k:
                theta = f64(vals[0])
                if rest[j] < theta - (abs(theta) * rel + 1e-6):
                    break
        if j < nt:  # phase B: the touched passages that can still make it, looked up in the lists left
            m, n, theta = _lookup_left(mode, method, j, nt, order, flat[lo:lo + nt], weights[lo:lo + nt], mult, idf,
                                       nonocc, rest, theta, rel, m, touched, buf, runs, words, block_off, block_bits,
                                       block_last, block_max, term_first, term_end, term_df, doc_len, params, wide,
                                       mark, vals, ids, n, k, bd)
        if mode == LUCENE:
            n = _finish_lucene(m, touched, wide, mark, tie, vals, keys, ids, k)
        else:
            n = _finish_bm25s(q, m, n, theta, rel, touched, flat, ptr, order_flat, order_ptr, method, params, words,
                              block_off, block_bits, block_last, term_first, term_end, term_df, idf, nonocc, doc_len,
                              num_docs, wide, mark, vals, keys, ids, k, bd, bt)
        _pop_all(vals, keys, ids, n, out_vals[q], out_ids[q])
        counts[q] = n


def _finish_lucene(m, touched, wide, mark, tie, vals, keys, ids, k):
    """The Lucene preset's ``k`` best of the ``m`` passages left (their sums, in float; ties in Lucene's order),
    ``wide`` and ``mark`` cleared. Returns how many."""
    n = 0
    for x in range(m):
        d = touched[x]
        sc = f32(wide[d])
        key = np_int64(tie[d]) if tie.shape[0] else d
        if n < k or _worse(vals[0], keys[0], sc, key):
            n = _push(vals, keys, ids, n, k, sc, key, d)
        mark[d] = False
        wide[d] = 0.0
    return n


def _finish_bm25s(q, m, n, theta, rel, touched, flat, ptr, order_flat, order_ptr, method, params, words, block_off,
                  block_bits, block_last, term_first, term_end, term_df, idf, nonocc, doc_len, num_docs, wide, mark,
                  vals, keys, ids, k, bd, bt):
    """The bm25s preset's ``k`` best of the ``m`` passages left: those within the margin of the ``k``-th double
    sum, each scored exactly as bm25s sums it (float32, in the query's word order), then the untouched passages at
    score 0 by lower id where they can still enter; ``wide`` and ``mark`` cleared. Returns how many."""
    k1, b, delta, avg = params[0], params[1], params[2], params[3]
    cache = params[4:]
    lo = ptr[q]
    nt = ptr[q + 1] - lo
    if m > k and n == k:  # every list summed: only the passages within the margin of the k-th need exact scores
        if f64(vals[0]) > theta:
            theta = f64(vals[0])
        floor = theta - (abs(theta) * rel + 1e-6)
        c = 0
        for x in range(m):
            d = touched[x]
            c = _keep(touched, c, d, wide, mark, wide[d] >= floor)
        m = c
    c = m
    for x in range(m):
        wide[touched[x]] = 0.0
    cand = np.sort(touched[:c])
    tf = np.empty((nt, c), np.int64)
    for u in range(nt):  # each candidate's frequency in every list, for its exact score
        t = flat[lo + u]
        _lookup_all(t, term_first[t], term_end[t], term_df[t], cand, c, words, block_off, block_bits, block_last,
                    bd, bt, tf[u])
    n = 0
    for x in range(c):
        d = cand[x]
        sc = f32(0.0)
        for jj in range(order_ptr[q], order_ptr[q + 1]):  # bm25s: float32 sums in the query's word order
            u = order_flat[jj]
            if tf[u, x] > 0:
                t = flat[lo + u]
                sc = f32(sc + _score(BM25S, method, f32(0.0), idf[t], nonocc[t], tf[u, x], doc_len[d], cache,
                                     avg, k1, b, delta))
        if n < k or _worse(vals[0], keys[0], sc, d):
            n = _push(vals, keys, ids, n, k, sc, d, d)
    n = _push_untouched(mark, num_docs, f32(0.0), vals, keys, ids, n, k)  # the untouched passages: score 0
    for x in range(c):
        mark[cand[x]] = False
    return n


def tie_adjust(vals, counts):
    """In place, the scores pyserini's ``LuceneSearcher.search`` returns for ranked lists (Anserini's
    ``ScoreTiesAdjusterReranker``): each rounded to 1e-4 (``Math.round(score * 1e4) / 1e4`` in double, then
    float), and in a run of scores each within 1e-4 of the one before, the i-th after the run's first lowered by
    ``1e-6 * i`` (float)."""
    for q in range(vals.shape[0]):
        dup = 0
        for i in range(counts[q]):
            vals[q, i] = f32(np.floor(f64(vals[q, i]) * 10000.0 + 0.5) / 10000.0)
            if i == 0 or f32(vals[q, i - 1] - vals[q, i]) > f32(1e-4):
                dup = 0
            else:
                dup += 1
                vals[q, i] = f32(vals[q, i] - f32(f32(1e-6) * f32(dup)))


def term_bounds(words, block_off, block_bits, block_last, term_first, term_df, mode, method, params, idf, nonocc,
                doc_len, block_max):
    """Each block's largest score (bm25s: the float32 score; Lucene: the largest ``float32(freq * cache[norm])``,
    from which a query's weight gives the bound)."""
    k1, b, delta, avg = params[0], params[1], params[2], params[3]
    cache = params[4:]
    bd = np.empty(BLOCK, np.int64)
    bt = np.empty(BLOCK, np.int64)
    for t in range(term_df.shape[0]):
        f = term_first[t]
        for bb in range(f, term_first[t + 1]):
            nb = min(BLOCK, term_df[t] - (bb - f) * BLOCK)
            decode_block(words, block_off, block_bits, block_last, bb, f, nb, bd, bt)
            m = f32(-np.inf)
            for x in range(nb):
                if mode == LUCENE:
                    v = f32(f32(bt[x]) * cache[doc_len[bd[x]]])
                else:
                    v = _score(mode, method, f32(0.0), idf[t], nonocc[t], bt[x], doc_len[bd[x]], cache, avg, k1, b,
                               delta)
                if v > m:
                    m = v
            block_max[bb] = m


def _varint_at(blob, p):
    """(value, next position) of the varint at ``p``."""
    n = 0
    shift = 0
    while True:
        byte = np_int64(blob[p])
        p += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return n, p


def vocab_find(blob, off, key, block):
    """The id of the word ``key`` (UTF-8 bytes) in the front-coded vocabulary (``blob``; ``off``: each block's start,
    then the end; ``block`` words a block), or -1: a binary search over the blocks' first words, then the block
    walked with how much of ``key`` the word before matched (a word sharing less with its predecessor than that
    is past ``key``)."""
    nk = key.shape[0]
    lo = 0
    hi = off.shape[0] - 1
    while lo < hi:  # the first block whose first word is > key
        mid = (lo + hi) >> 1
        n, p = _varint_at(blob, off[mid] + 1)
        c = 0
        i = 0
        while i < n and i < nk:
            if blob[p + i] != key[i]:
                c = -1 if blob[p + i] < key[i] else 1
                break
            i += 1
        if c == 0:
            c = -1 if n < nk else (1 if n > nk else 0)
        if c <= 0:
            lo = mid + 1
        else:
            hi = mid
    if lo == 0:
        return -1
    b = lo - 1
    p = off[b]
    end = off[b + 1]
    m = 0  # bytes of key the word before matched
    j = 0
    while p < end:
        shared = np_int64(blob[p])
        n, p = _varint_at(blob, p + 1)
        if shared == 255 and m > 255:  # a shared prefix capped at 255: compare from there
            m = 255
        if shared > m:  # shares with key what the word before did, and is as far below it
            p += n
            j += 1
            continue
        if shared < m:  # past key
            return -1
        i = 0
        while i < n and m + i < nk and blob[p + i] == key[m + i]:
            i += 1
        if i == n and m + i == nk:
            return b * block + j
        if m + i == nk or (i < n and blob[p + i] > key[m + i]):  # key is a prefix of it, or it is above key
            return -1
        m += i
        p += n
        j += 1
    return -1


def vocab_check(blob, off, block, count):
    """Walk every word of the front-coded vocabulary (``off``: each block's start, then the end; ``count`` words,
    ``block`` a block) within the bounds :func:`vocab_find` reads without checking: each word's shared prefix no
    longer than the word before (none for a block's first), its length's varint and its bytes inside its block, a
    full block's words (the last block's rest). Returns -1, or the byte position of the first word that is not."""
    nb = off.shape[0] - 1
    for b in range(nb):
        p = np_int64(off[b])
        end = np_int64(off[b + 1])
        want = block if b < nb - 1 else count - np_int64(b) * block
        prev = np_int64(0)
        j = 0
        while p < end:
            at = p
            if j >= want:
                return at
            shared = np_int64(blob[p])
            p += 1
            if (j == 0 and shared != 0) or shared > prev:
                return at
            n = np_int64(0)
            shift = 0
            while True:
                if p >= end or shift > 56:
                    return at
                byte = np_int64(blob[p])
                p += 1
                n |= (byte & 0x7F) << shift
                shift += 7
                if byte < 0x80:
                    break
            if n > end - p:
                return at
            p += n
            prev = shared + n
            j += 1
        if j != want:
            return end
    return -1


def scan_postings(first, last_n, bits, block_last, nd, off):
    """The postings' arrays in one pass, as :func:`check_arrays` checks them with NumPy (this is its fast path: no
    temporaries): ``first`` from 0, never down, ending at the blocks' count; ``last_n`` 1 to :data:`BLOCK` where a
    term has blocks; widths at most 32 bits; each term's ``block_last`` rising, below ``nd``. Fills ``off`` (the
    blocks' byte offsets, then the end: :func:`block_offsets`). Returns (0, the postings) or (1, 0): something
    is out of bounds (NumPy then names it)."""
    nb = block_last.shape[0]
    if first[0] != 0 or np_int64(first[first.shape[0] - 1]) != nb:
        return 1, 0
    total = np_int64(0)
    off[0] = 0
    for t in range(first.shape[0] - 1):
        f = np_int64(first[t])
        e = np_int64(first[t + 1])
        if e < f or e > nb:
            return 1, 0
        if e == f:
            continue
        ln = np_int64(last_n[t])
        if ln < 1 or ln > BLOCK:
            return 1, 0
        total += (e - f - 1) * BLOCK + ln
        prev = np_int64(-1)
        for b in range(f, e):
            wd = np_int64(bits[b, 0])
            wf = np_int64(bits[b, 1])
            last = np_int64(block_last[b])
            if wd > 32 or wf > 32 or last >= nd or last <= prev:
                return 1, 0
            prev = last
            n = BLOCK if b < e - 1 else ln
            off[b + 1] = off[b] + ((n * (wd + wf) + 7) >> 3)
    return 0, total


def tie_check(tie, nd, seen):
    """The first position of ``tie`` whose rank is ``nd`` or more or seen before (``seen``: ``nd`` False), or -1:
    ``tie`` a permutation of ``0 .. nd - 1``."""
    for i in range(tie.shape[0]):
        r = np_int64(tie[i])
        if r >= nd or seen[r]:
            return i
        seen[r] = True
    return -1


def term_maxima(block_max, first, end, out):
    """Each term's largest block maximum (its ``[first, end)`` blocks, stored quantized; 0 for none), float64."""
    for i in range(first.shape[0]):
        m = 0
        for bb in range(first[i], end[i]):
            if block_max[bb] > m:
                m = block_max[bb]
        out[i] = _qmax(m)


import numpy as np  # noqa: E402  (the kernels read it as a global)

_KERNELS: dict[str, Any] | None = None


def _prefetch_instruction() -> Any:
    """``_prefetch(arr, i)`` compiled: LLVM's ``llvm.prefetch`` of ``arr[i]``'s address (a hint: no load, no fault).
    The intrinsic's name carries its pointer type as the IR llvmlite writes spells it: ``p0i8`` for a typed ``i8*``
    (LLVM 14 to 16 read it so; later ones upgrade it), ``p0`` for an opaque ``ptr``. Chosen from that spelling, not
    by compiling a probe: a probe cost every process that searches 0.7 s of LLVM start-up, the search itself being
    loaded from numba's cache."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
    name = "llvm.prefetch.p0" if str(i8p) == "ptr" else "llvm.prefetch.p0i8"

    @intrinsic
    def prefetch(typingctx, arr, idx):
        def codegen(context, builder, signature, args):
            aryty = signature.args[0]
            ary = context.make_array(aryty)(context, builder, args[0])
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                                name)
            # read (0), keep in every cache level (3), data (1)
            builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
            return context.get_dummy_value()

        return types.void(arr, idx), codegen

    return prefetch


def kernels() -> dict[str, Any]:
    """The kernels, compiled by numba (cached on disk) where it is installed."""
    global _KERNELS
    if _KERNELS is None:
        g = globals()
        names = ("_varint_at", "vocab_find", "vocab_check", "scan_postings", "tie_check", "_bits", "_bytes", "_qmax", "_pack", "_unpack", "encode", "decode_block", "decode_docs", "tf_at", "_score", "lucene_value_bound",
                 "_worse", "_sift_down", "_push", "_heap", "_push_untouched", "_pop_all", "_seek_block", "_most_postings", "_keep", "exhaustive_many", "_sift_ids", "_offer", "_merge_runs", "_lookup_left",
                 "_posting", "_bound", "window_many", "_lookup_all", "pruned_many", "_finish_lucene", "_finish_bm25s",
                 "tie_adjust", "term_bounds",
                 "term_maxima")
        try:
            from numba import float32, float64, int64, njit
        except ImportError:
            pass
        else:
            g["f32"], g["f64"], g["np_int64"] = float32, float64, int64
            g["_prefetch"] = _prefetch_instruction()
            small = ("_bits", "_bytes", "_qmax", "_unpack", "tf_at", "_score", "lucene_value_bound", "_worse",
                     "_posting", "_bound", "_keep", "_sift_ids")
            for name in names:
                g[name] = njit(cache=True, nogil=True, inline="always" if name in small and INLINE else "never")(g[name])
        _KERNELS = {name: g[name] for name in names}
    return _KERNELS


# -- build ------------------------------------------------------------------------------------------------------


def int_to_byte4(n: Any) -> Any:
    """Lucene's ``SmallFloat.intToByte4`` on an int64 array: a length as one byte (exact below 24, then 4
    significant bits)."""
    n = np.asarray(n, dtype=np.int64)
    free = 255 - _long_to_int4(np.array([2**31 - 1]))[0]  # NUM_FREE_VALUES: 24
    small = n < free
    out = np.where(small, n, 0)
    big = n[~small] - free
    out[~small] = free + _long_to_int4(big)
    return out.astype(np.uint8)


def _long_to_int4(i: Any) -> Any:
    i = np.asarray(i, dtype=np.int64)
    nbits = np.where(i > 0, np.floor(np.log2(np.maximum(i, 1))).astype(np.int64) + 1, 0)
    # exact bit length (log2 can round up near powers of two)
    nbits = np.where((nbits > 0) & ((np.int64(1) << np.maximum(nbits - 1, 0)) > i), nbits - 1, nbits)
    nbits = np.where((np.int64(1) << np.minimum(nbits, 62)) <= i, nbits + 1, nbits)
    shift = np.maximum(nbits - 4, 0)
    enc = ((i >> shift) & 7) | ((shift + 1) << 3)
    return np.where(nbits < 4, i, enc)


def byte4_to_int(b: Any) -> Any:
    """Lucene's ``SmallFloat.byte4ToInt``: the length a norm byte stands for (``LENGTH_TABLE``)."""
    b = np.asarray(b, dtype=np.int64)
    free = 24
    i = b - free
    bits = i & 7
    shift = (i >> 3) - 1
    dec = np.where(shift == -1, bits, (bits | 8) << np.maximum(shift, 0))
    return np.where(b < free, b, free + dec)


def lucene_cache(k1: float, b: float, avgdl: Any) -> Any:
    """Lucene's 256 per-norm factors ``1 / (k1 * ((1 - b) + b * LENGTH_TABLE[i] / avgdl))``, float32 throughout."""
    f = np.float32
    k1, b, avgdl = f(k1), f(b), f(avgdl)
    table = byte4_to_int(np.arange(256)).astype(np.float32)
    with np.errstate(divide="ignore"):
        return (f(1) / (k1 * ((f(1) - b) + (b * table) / avgdl))).astype(np.float32)


def _pairs(tokens: Any, offsets: Any, lengths: Any, s: int, e: int, n_docs: int, perm: Any):
    """The distinct (term, document) pairs of documents ``s .. e-1`` as keys ``term * n_docs + document``, sorted
    (by term, then document), and each pair's frequency (``perm``: the terms' new ids)."""
    d = np.repeat(np.arange(s, e, dtype=np.int64), lengths[s:e])
    t = perm[np.asarray(tokens[offsets[s]:offsets[e]], dtype=np.int64)]
    return np.unique(t * max(n_docs, 1) + d, return_counts=True)


def _release(arr: Any) -> None:
    """Drop the pages a memory-mapped array has touched from this process's resident memory (they stay in the page
    cache, and are read back from there if touched again; a dirty page of a shared file mapping keeps its data):
    the build reads its temporary files once, and their mapped pages would otherwise count as its memory."""
    base = arr
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "_mmap", None) or getattr(base, "base", None)
    if isinstance(base, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        base.madvise(mmap.MADV_DONTNEED)


def _ranges(at: Any, budget: int) -> list[tuple[int, int]]:
    """Consecutive slices of the vocabulary (``at[c]``: where slice ``c``'s postings start) grouped into ranges of
    at most ``budget`` postings each (a slice larger than that is a range alone): (first slice, end slice) pairs."""
    out, c0 = [], 0
    for c in range(1, len(at)):
        if c - 1 > c0 and at[c] - at[c0] > budget:
            out.append((c0, c - 1))
            c0 = c - 1
    if len(at) > 1:
        out.append((c0, len(at) - 1))
    return out


def write_postings(directory: Any, tokens: Any, lengths: Any, vocab: dict[str, int], params: dict[str, Any], *,
                   doc_ids: list[str] | None = None, docs_per_step: int = 1 << 16,
                   postings_per_range: int = RANGE_POSTINGS, bar: Any = None, task: Any = None) -> dict[str, Any]:
    """The compressed postings of the documents whose term ids are ``tokens`` (flat, ``lengths`` per document; may
    be a memory map), their vocabulary (renumbered in UTF-8 byte order), per-document lengths (bm25s) or norms and
    tie order (Lucene: ``doc_ids``, each document's ``id``), the idf and the bounds, into ``directory``. Returns the
    collection's facts.

    Pass 1 reads the documents a block of ``docs_per_step`` at a time: each block's distinct (term, document) pairs,
    sorted, into a temporary file, with the document frequencies and where each of :data:`RANGE_CHUNKS` slices of
    the vocabulary starts in the block. Pass 2 takes the vocabulary a range of terms at a time (about
    ``postings_per_range`` postings, 8 bytes each in memory: the whole collection's would not fit at Wikipedia's
    size): the range's pairs read back from every block (only that slice of the file), put in term order, encoded,
    and their bytes appended to the postings. The files are the same whatever the two sizes."""
    from pathlib import Path

    k = kernels()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    preset = params.get("preset", "bm25s")
    n_docs, n_vocab = len(lengths), len(vocab)
    lengths = np.asarray(lengths, dtype=np.int64)
    if int(lengths.sum()) != len(tokens) or (len(tokens) and not 0 <= int(np.min(tokens)) <= int(np.max(tokens))
                                             < n_vocab):
        raise BM25Error(f"write_postings: {len(tokens):,} token ids for lengths summing to {int(lengths.sum()):,}, "
                        f"ids in [{int(np.min(tokens)) if len(tokens) else 0}, "
                        f"{int(np.max(tokens)) if len(tokens) else 0}] for a vocabulary of {n_vocab:,}",
                        hint="pass the tokenizer's arrays and its own vocabulary")
    words_sorted = sorted(vocab)  # code point order is UTF-8 byte order (the readers refuse lone surrogates)
    perm = np.empty(n_vocab, dtype=np.int64)
    perm[np.fromiter((vocab[w] for w in words_sorted), dtype=np.int64, count=n_vocab)] = np.arange(n_vocab)
    offsets = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    nd = max(n_docs, 1)
    edges = np.unique(np.linspace(0, n_vocab, min(RANGE_CHUNKS, n_vocab) + 1).astype(np.int64))  # the slices' terms
    # pass 1: each block's distinct (term, document) pairs, sorted, into a temporary file; document frequencies
    df = np.zeros(n_vocab, dtype=np.int64)
    tmp_k, tmp_w = directory / ".pairs.tmp", directory / ".words.tmp"
    sizes, cuts = [], []
    try:
        with open(tmp_k, "wb") as f:
            for s in range(0, n_docs, docs_per_step):
                e = min(n_docs, s + docs_per_step)
                key, tf = _pairs(tokens, offsets, lengths, s, e, n_docs, perm)
                df += np.bincount(key // nd, minlength=n_vocab)
                f.write(key.tobytes())
                f.write(tf.astype(np.int64).tobytes())
                sizes.append(len(key))
                cuts.append(np.searchsorted(key, edges * nd))  # where each slice of the vocabulary starts
                _release(tokens)  # read once: its pages leave this process (mapped pages count as its memory)
                if bar is not None:
                    bar.advance(task, e - s)
        starts = np.zeros(n_vocab + 1, dtype=np.int64)
        np.cumsum(df, out=starts[1:])
        nnz = int(starts[-1])
        nblocks = (df + BLOCK - 1) // BLOCK
        term_first = np.zeros(n_vocab + 1, dtype=np.int64)
        np.cumsum(nblocks, out=term_first[1:])
        nb = int(term_first[-1])
        block_off = np.zeros(nb + 1, dtype=np.int64)
        block_bits = np.zeros((nb, 2), dtype=np.uint8)
        block_last = np.zeros(nb, dtype=np.uint32)
        scratch = np.zeros((2, BLOCK), dtype=np.int64)
        # pass 2, a range of terms at a time: its pairs into term order, encoded, appended
        with open(tmp_w, "wb") as out:
            for c0, c1 in _ranges(starts[edges], postings_per_range):
                t0, t1 = int(edges[c0]), int(edges[c1])
                p0, b0, b1 = int(starts[t0]), int(term_first[t0]), int(term_first[t1])
                docs = np.empty(max(int(starts[t1]) - p0, 1), dtype=np.uint32)
                tfs = np.empty(len(docs), dtype=np.uint32)
                cursor = starts[t0:t1] - p0
                at = 0
                for n, cut in zip(sizes, cuts, strict=True):  # the range's slice of each block, read from the file
                    lo, hi = int(cut[c0]), int(cut[c1])
                    if hi > lo:
                        key = np.fromfile(tmp_k, dtype=np.int64, count=hi - lo, offset=(at + lo) * 8)
                        tf = np.fromfile(tmp_k, dtype=np.int64, count=hi - lo, offset=(at + n + lo) * 8)
                        term = key // nd - t0
                        first = np.concatenate([[0], np.flatnonzero(term[1:] != term[:-1]) + 1])  # each term's run
                        counts = np.diff(np.append(first, len(key)))
                        t_first = term[first]
                        pos = np.repeat(cursor[t_first], counts) + (np.arange(len(key)) - np.repeat(first, counts))
                        docs[pos] = key % nd
                        tfs[pos] = tf
                        cursor[t_first] += counts
                    at += 2 * n
                key = tf = None
                bounds, firsts = starts[t0:t1 + 1] - p0, term_first[t0:t1 + 1] - b0
                # the sizing pass fills the blocks' widths, ends and byte offsets (carried on from the last range's)
                k["encode"](docs, tfs, bounds, firsts, block_last[b0:b1], block_off[b0:b1 + 1], block_bits[b0:b1],
                            np.zeros(0, np.uint32), scratch)
                rel = block_off[b0:b1 + 1] - block_off[b0]
                part = np.zeros((int(rel[-1]) + 3) // 4 + 2, dtype=np.uint32)
                k["encode"](docs, tfs, bounds, firsts, block_last[b0:b1], rel, block_bits[b0:b1], part, scratch)
                out.write(part.view(np.uint8)[:int(rel[-1])].tobytes())
                docs = tfs = part = None
        total = int(block_off[-1])
        words = np.zeros((total + 3) // 4 + 2, dtype=np.uint32)  # padded: a read takes two words
        with open(tmp_w, "rb") as f:  # straight into place (no second copy of the postings in memory)
            if f.readinto(memoryview(words.view(np.uint8)[:total])) != total:
                raise BM25Error(f"{tmp_w}: the encoded postings were cut short", hint="check the disk and build again")
    finally:
        for f in (tmp_k, tmp_w):
            f.unlink(missing_ok=True)
    facts: dict[str, Any] = {"engine": 1, **params, "num_docs": n_docs, "postings": nnz, "blocks": nb}
    if preset == "lucene":
        doc_count = int((lengths > 0).sum())
        sum_ttf = int(lengths.sum())
        avgdl = float(np.float32(sum_ttf / doc_count)) if doc_count else 0.0
        idf = Idf(facts | {"preset": "lucene", "doc_count": doc_count}).many(df)
        doc_len = int_to_byte4(lengths)
        cache = lucene_cache(params["k1"], params["b"], avgdl)
        facts.update(doc_count=doc_count, sum_total_term_freq=sum_ttf, avgdl=avgdl)
        ids = np.asarray(doc_ids if doc_ids is not None else [str(i) for i in range(n_docs)])
        order = np.argsort(ids, kind="stable") if n_docs else np.zeros(0, np.int64)  # code point order = UTF-8's
        tie = np.empty(n_docs, dtype=np.uint32)
        tie[order] = np.arange(n_docs, dtype=np.uint32)
        np.save(directory / "doc_tie.npy", tie)
        nonocc = np.zeros(n_vocab, dtype=np.float32)
        mode, method, avg = LUCENE, 0, avgdl
    else:
        avg = lengths.mean() if n_docs else 0.0  # float64, as bm25s computes it
        facts.update(avgdl=float(avg))
        stats = Idf(facts)
        idf, nonocc = stats.many(df), stats.many(df, nonocc=True)
        doc_len = lengths.astype(np.uint32)
        cache = np.zeros(256, dtype=np.float32)
        mode, method = BM25S, METHOD_CODES[params["method"]]
    kparams = np.concatenate([[params["k1"], params["b"], params.get("delta", 0.0), float(avg)],
                              cache.astype(np.float64)]).astype(np.float64)
    block_max = np.zeros(nb, dtype=np.float32)
    term_df = df.astype(np.uint32)
    k["term_bounds"](words, block_off, block_bits, block_last, term_first, term_df, mode, method, kparams, idf,
                     nonocc, doc_len, block_max)
    small = int(block_off[-1]) < (1 << 32) and nb < (1 << 32)  # 4-byte offsets while they fit
    last_n = np.where(df > 0, df - (nblocks - 1) * BLOCK, 0).astype(np.uint8)  # postings in a term's last block
    for name, arr in (("words.npy", words), ("block_bits.npy", block_bits), ("block_last.npy", block_last),
                      ("block_max.npy", quantize_max(block_max)),
                      ("term_first.npy", term_first.astype(np.uint32) if small else term_first),
                      ("term_last_n.npy", last_n), ("doc_len.npy" if mode == BM25S else "doc_norm.npy", doc_len)):
        np.save(directory / name, arr, allow_pickle=False)
    (directory / "params.json").write_text(json.dumps(facts, indent=1) + "\n")
    write_vocab(directory / "vocab", words_sorted)
    return facts


def block_offsets(term_first: Any, last_n: Any, bits: Any) -> Any:
    """Each block's byte offset in ``words`` (and the end), from what the index stores: a block holds 128 postings
    but a term's last, which holds ``last_n``; its bytes follow from its two widths (:func:`_bytes`). Computed when
    the index is opened (a few hundred milliseconds at ten million blocks) rather than stored."""
    first = np.asarray(term_first, dtype=np.int64)
    nb = int(first[-1])
    n = np.full(nb, BLOCK, dtype=np.int32)
    has = first[1:] > first[:-1]
    n[first[1:][has] - 1] = np.asarray(last_n)[has]
    width = np.asarray(bits)
    size = (n * (width[:, 0].astype(np.int32) + width[:, 1]) + 7) >> 3  # int32: at most 128 x 64 bits
    off = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(size, out=off[1:])
    return off.astype(np.uint32) if off[-1] < (1 << 32) else off


class Crafted(ValueError):
    """An array of a ``bm25/`` directory outside the bounds the compiled search reads it within: ``name`` (the file
    inside ``bm25/``), the value, where, and the bound."""

    def __init__(self, name: str, what: str) -> None:
        super().__init__(f"{name}: {what}")
        self.name, self.what = name, what


def _first_bad(bad: Any) -> int:
    return int(np.flatnonzero(bad)[0])


def _kind(name: str, arr: Any, dtypes: tuple[str, ...], ndim: int, length: int | None = None,
          width: int | None = None, source: str = "") -> None:
    """:class:`Crafted` unless ``arr`` is of one of ``dtypes``, in ``ndim`` dimensions, ``length`` rows (of
    ``width`` columns)."""
    if arr.dtype.name not in dtypes or arr.ndim != ndim:
        raise Crafted(name, f"an array of {arr.dtype.name} in {arr.ndim} dimension(s); the search reads "
                            f"{' or '.join(dtypes)} in {ndim}")
    if length is not None and arr.shape[0] != length:
        raise Crafted(name, f"{arr.shape[0]:,} rows, where {source} makes {length:,}")
    if width is not None and arr.shape[1] != width:
        raise Crafted(name, f"{arr.shape[1]} columns; the search reads {width}")


def check_arrays(ix: PostingsIndex) -> Any:
    """Every array the compiled search reads, checked against the bounds it reads them within (one compiled pass,
    :func:`scan_postings`, and NumPy to name what it finds; without numba NumPy alone): each file's type and shape; ``term_first`` from 0, never down, ending at the
    blocks' count; ``term_last_n`` 1 to 128 where a term has blocks; ``block_bits`` at most 32 bits; ``words`` as
    long as the blocks' widths make it (plus its padding); ``block_last`` below the passages' count and rising
    within each term; the passages' lengths (or norms) and tie order one a passage (the tie order a permutation,
    bm25s's lengths summing to the recorded average). What cannot be checked without decoding every posting
    (each block's gaps ending at its recorded last passage) is checked by the search as it decodes a block.
    :class:`Crafted` names the file, the value and its position. Returns the blocks' byte offsets
    (:func:`block_offsets`), computed once the arrays they come from are checked."""
    nd = ix.num_docs

    kind = _kind
    kind("block_last.npy", ix.block_last, ("uint32",), 1)
    kind("term_first.npy", ix.term_first, ("uint32", "int64", "uint64"), 1)
    if len(ix.term_first) < 1:
        raise Crafted("term_first.npy", "empty; it holds one entry a term, then the blocks' count")
    first = ix.term_first
    if first.dtype.name == "uint64" and int(first.max()) >= 1 << 62:
        at = _first_bad(first >= np.uint64(1 << 62))
        raise Crafted("term_first.npy", f"{int(first[at]):,} at position {at:,}, beyond any block count")
    nb = len(ix.block_last)
    kind("block_bits.npy", ix.block_bits, ("uint8",), 2, nb, 2, "block_last.npy (one a block)")
    kind("block_max.npy", ix.block_max, ("uint16",), 1, nb, source="block_last.npy (one a block)")
    kind("words.npy", ix.words, ("uint32",), 1)
    n_terms = len(first) - 1
    kind("term_last_n.npy", ix.term_last_n, ("uint8",), 1, n_terms, source="term_first.npy (one a term, then the end)")
    last_n = ix.term_last_n
    if ix.compiled:  # one compiled pass, no temporaries; NumPy below only names what it found
        off = np.empty(nb + 1, np.int64)
        code, postings = ix.k["scan_postings"](first, last_n, ix.block_bits, ix.block_last, nd, off)
        if code == 0:
            return _check_rest(ix, off if off[-1] >= (1 << 32) else off.astype(np.uint32), int(postings))
    first = first.astype(np.int64, copy=False)
    if first[0] != 0:
        raise Crafted("term_first.npy", f"{int(first[0]):,} at position 0; the first term's blocks start at 0")
    step = np.diff(first)
    if len(step) and step.min() < 0:
        at = _first_bad(step < 0) + 1
        raise Crafted("term_first.npy", f"{int(first[at]):,} at position {at:,}, below {int(first[at - 1]):,} "
                                        "before it (a term's first block never goes down)")
    if first[-1] != nb:
        raise Crafted("term_first.npy", f"{int(first[-1]):,} at position {n_terms:,} (its last), but block_last.npy "
                                        f"holds {nb:,} blocks")
    has = step > 0
    bad = has & ((last_n < 1) | (last_n > BLOCK))
    if bad.any():
        at = _first_bad(bad)
        raise Crafted("term_last_n.npy", f"{int(last_n[at])} at position {at:,}; a term's last block holds 1 to "
                                         f"{BLOCK} postings")
    wide = ix.block_bits > 32
    if wide.any():
        at = _first_bad(wide.reshape(-1))
        raise Crafted("block_bits.npy", f"{int(ix.block_bits.reshape(-1)[at])} at position [{at // 2:,}, "
                                        f"{at % 2}] (block {at // 2:,}'s {'gap' if at % 2 == 0 else 'frequency'} "
                                        "width); a width is at most 32 bits")
    off = block_offsets(first, last_n, ix.block_bits)
    bl = ix.block_last
    if nb and int(bl.max()) >= nd:
        at = _first_bad(bl >= nd)
        raise Crafted("block_last.npy", f"{int(bl[at]):,} at position {at:,}; the index holds {nd:,} passages "
                                        f"(ids 0 to {nd - 1:,})")
    if nb > 1:
        starts = np.zeros(nb, bool)
        starts[first[:-1][has]] = True  # each term's first block: its last passage may be any
        down = (bl[1:] <= bl[:-1]) & ~starts[1:]
        if down.any():
            at = _first_bad(down) + 1
            raise Crafted("block_last.npy", f"{int(bl[at]):,} at position {at:,}, not above {int(bl[at - 1]):,} "
                                            "before it in the same term (as term_first.npy divides the blocks: a term's blocks rise)")
    postings = int(ix.df(np.flatnonzero(has)).sum()) if n_terms else 0
    return _check_rest(ix, off, postings)


def _check_rest(ix: PostingsIndex, off: Any, postings: int) -> Any:
    """:func:`check_arrays` once the blocks are checked: ``words``' length, the postings' count, the passages'
    arrays. Returns ``off``."""
    nd = ix.num_docs
    kind = _kind
    total = int(off[-1])
    need = (total + 3) // 4 + 2
    if len(ix.words) != need:
        raise Crafted("words.npy", f"{len(ix.words):,} words; the blocks' widths (block_bits.npy) and postings "
                                   f"(term_first.npy, term_last_n.npy) make {need:,} ({total:,} bytes of postings "
                                   "and 2 words of padding)")
    if "postings" in ix.params and postings != int(ix.params["postings"]):
        raise Crafted("term_first.npy", f"its terms' blocks, with term_last_n.npy's postings in their last "
                                        f"blocks, make {postings:,} postings; params.json records "
                                        f"{int(ix.params['postings']):,}")
    if ix.mode == LUCENE:
        kind("doc_norm.npy", ix.doc_len, ("uint8",), 1, nd, source="params.json's num_docs")
        kind("doc_tie.npy", ix.tie, ("uint32",), 1, nd, source="params.json's num_docs")
        tie = ix.tie
        if ix.compiled and ix.k["tie_check"](tie, nd, np.zeros(nd, np.bool_)) < 0:
            return off
        if nd and int(tie.max()) >= nd:
            at = _first_bad(tie >= nd)
            raise Crafted("doc_tie.npy", f"{int(tie[at]):,} at position {at:,}; a tie rank is below {nd:,}")
        seen = np.bincount(tie, minlength=nd) if nd else np.zeros(0, np.int64)
        if nd and seen.max() > 1:
            rank = int(np.flatnonzero(seen > 1)[0])
            at = _first_bad(tie == rank)
            raise Crafted("doc_tie.npy", f"{rank:,} at position {at:,} and again later; each passage has its own "
                                         "tie rank")
    else:
        kind("doc_len.npy", ix.doc_len, ("uint32",), 1, nd, source="params.json's num_docs")
        if nd:
            mean = float(np.asarray(ix.doc_len).mean(dtype=np.float64))
            avg = float(ix.params["avgdl"])
            if abs(mean - avg) > 1e-9 * max(1.0, abs(avg)):
                at = int(np.argmax(ix.doc_len))
                raise Crafted("doc_len.npy", f"its lengths average {mean:.6g} (the largest {int(ix.doc_len[at]):,} "
                                             f"at position {at:,}); params.json records {avg:.6g}")
    return off


def verify_postings(ix: PostingsIndex) -> None:
    """Every posting decoded (``curriculum validate``, ``--verify``; :func:`check_arrays` checked the arrays at
    open): each block's gaps end at its recorded last passage, and no posting scores above its block's stored
    maximum (a lower one would make the pruned search skip a passage that belongs in the ``k`` best).
    :class:`Crafted` names the file and the block."""
    if not ix.compiled:  # (the search without numba reads every posting, bounds checked by NumPy)
        return
    first = np.asarray(ix.term_first, dtype=np.int64)
    t = np.arange(len(first) - 1)
    df = ix.df(t).astype(np.uint32)
    idf = ix.stats.many(df)
    nonocc = ix.stats.many(df, nonocc=True) if ix.exhaustive else np.zeros(len(df), np.float32)
    got = np.zeros(len(ix.block_last), np.float32)
    try:
        ix.k["term_bounds"](ix.words, ix.block_off, ix.block_bits, ix.block_last, first, df, ix.mode, ix.method,
                            ix.kparams, idf, nonocc, ix.doc_len, got)
    except ValueError as e:
        if str(e) != BAD_BLOCK:
            raise
        raise ix._bad_block(t) from None
    want = quantize_max(got)
    low = np.flatnonzero(np.asarray(ix.block_max) < want)
    if len(low):
        b = int(low[0])
        raise Crafted("block_max.npy", f"{int(ix.block_max[b])} at position {b:,}, below the {int(want[b])} its "
                                       "block's postings score (the search would skip passages it must rank)")


def quantize_max(block_max: Any) -> Any:
    """Block maxima as 16-bit steps (see :data:`QMIN`): the smallest step whose bound is at least the maximum."""
    v = np.asarray(block_max, dtype=np.float64)
    q = np.zeros(len(v), dtype=np.int64)
    pos = v > 0
    q[pos] = np.ceil(np.log(np.maximum(v[pos], QMIN) / QMIN) / QLOG).astype(np.int64)
    q[pos] = np.maximum(q[pos], 1)
    low = pos & (QMIN * np.exp(q * QLOG) < v)  # a float rounding below the maximum: one step up
    q[low] += 1
    if (q > 65535).any():
        raise BM25Error("a block's largest score is beyond the 16-bit scale (above 1e22)",
                        hint="a BM25 score that large means broken parameters")
    return q.astype(np.uint16)


class Idf:
    """A term's idf (float32) from its document frequency, as the preset computes it (Lucene's ``BM25Similarity``,
    or bm25s's variant), and bm25l's / bm25+'s score for passages without the term; computed when asked (an index
    stores only the frequencies), the same arithmetic as bm25s's and Lucene's."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params
        self.lucene = params.get("preset", "bm25s") == "lucene"
        self._cache: dict[tuple[int, bool], float] = {}
        if not self.lucene:
            from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer

            self._idf = _select_idf_scorer(params["method"])
            self._nonocc = params["method"] in ("bm25l", "bm25+")
            avg = np.float64(params["avgdl"])
            self._tfc0 = _select_tfc_scorer(params["method"])(tf_array=0, l_d=avg, l_avg=avg, k1=params["k1"],
                                                               b=params["b"], delta=params["delta"])

    def one(self, df: int, *, nonocc: bool = False) -> float:
        key = (df, nonocc)
        got = self._cache.get(key)
        if got is None:
            if not df:
                got = 0.0
            elif self.lucene:
                n = self.params["doc_count"]
                got = 0.0 if nonocc else float(np.float32(math.log(1 + (n - df + 0.5) / (df + 0.5))))
            elif nonocc:
                got = float(np.float32(self._idf(df, N=self.params["num_docs"]) * self._tfc0)) if self._nonocc else 0.0
            else:
                got = float(np.float32(self._idf(df, N=self.params["num_docs"])))
            if len(self._cache) < 1_000_000:
                self._cache[key] = got
        return got

    def many(self, dfs: Any, *, nonocc: bool = False) -> Any:
        vals, inv = np.unique(np.asarray(dfs, dtype=np.int64), return_inverse=True)
        return np.array([self.one(int(v), nonocc=nonocc) for v in vals], dtype=np.float32)[inv].reshape(-1)


# -- search -------------------------------------------------------------------------------------------------------
class PostingsIndex:
    """A ``bm25/`` directory's postings, memory-mapped, and the compiled search over them."""

    def __init__(self, directory: Any, params: dict[str, Any], *, compiled: bool = True, checked: bool = True) -> None:
        from pathlib import Path

        d = Path(directory)
        self.params = params
        self.preset = params.get("preset", "bm25s")
        self.num_docs = int(params["num_docs"])
        load = lambda name: np.asarray(load_npy(d / name))  # noqa: E731  (a plain view: numba types it fast)
        self.words, self.block_bits = load("words.npy"), load("block_bits.npy")
        self.block_last, self.block_max = load("block_last.npy"), load("block_max.npy")
        self.term_first, self.term_last_n = load("term_first.npy"), load("term_last_n.npy")
        self.stats = Idf(params)
        if self.preset == "lucene":
            self.mode, self.method = LUCENE, 0
            self.doc_len = load("doc_norm.npy")
            self.tie = load("doc_tie.npy")
            cache = lucene_cache(params["k1"], params["b"], params["avgdl"])
        else:
            self.mode, self.method = BM25S, METHOD_CODES[params["method"]]
            self.doc_len = load("doc_len.npy")
            self.tie = np.zeros(0, np.uint32)
            cache = np.zeros(256, np.float32)
        self.compiled = compiled
        self.k = kernels() if compiled else {}
        self.checked = checked
        if checked:  # every array within the bounds the compiled search reads it in (check_arrays)
            self.block_off = check_arrays(self)
        else:
            self.block_off = block_offsets(self.term_first, self.term_last_n, self.block_bits)
        self.exhaustive = self.mode == BM25S and self.method >= 2  # bm25l, bm25+: a score for absent words
        self.kparams = np.concatenate([[params["k1"], params["b"], params.get("delta", 0.0), float(params["avgdl"])],
                                       cache.astype(np.float64)]).astype(np.float64)
        self.window = SEARCH_WINDOW
        self._scratch = threading.local()

    def scratch(self) -> tuple[Any, Any, Any]:
        """This thread's accumulators for the term-by-term search (one entry a passage, kept zero between queries:
        allocated once, not per query)."""
        got = getattr(self._scratch, "arrays", None)
        if got is None:
            got = self._scratch.arrays = (np.zeros(self.num_docs, np.float32),
                                          np.zeros(self.num_docs, np.float64),
                                          np.zeros(self.num_docs, np.bool_))
        return got

    def window_scratch(self) -> tuple[Any, Any, Any, Any]:
        """This thread's arrays for the windowed search: a window's accumulator and marks (kept zero between
        queries), its touched passages and a buffer to merge them."""
        got = getattr(self._scratch, "window", None)
        if got is None or got[0].shape[0] != self.window:
            w = self.window
            got = self._scratch.window = (np.zeros(w, np.float64), np.zeros(w, np.bool_), np.empty(w, np.int64),
                                          np.empty(w, np.int64))
        return got

    def terms(self, terms: Any) -> dict[str, Any]:
        """The arrays the search reads of ``terms`` (term ids): first and end block, document frequency, idf,
        non-occurrence score (bm25l, bm25+; 0 for the other methods, computed only for those two) and largest block
        maximum, each an array beside ``terms``."""
        t = np.asarray(terms, dtype=np.int64)
        first = self.term_first[t].astype(np.int64)
        end = self.term_first[t + 1].astype(np.int64)
        df = self._df(t, end - first)
        one, dfs = self.stats.one, df.tolist()
        out = {"first": first, "end": end, "df": df, "idf": np.array([one(x) for x in dfs], np.float32),
               "nonocc": (np.array([one(x, nonocc=True) for x in dfs], np.float32) if self.exhaustive
                          else np.zeros(len(dfs), np.float32)),
               "max": np.zeros(len(t), np.float64)}
        if self.compiled:
            self.k["term_maxima"](self.block_max, first, end, out["max"])
        return out

    def df(self, terms: Any) -> Any:
        """Document frequencies (int64) of ``terms``: 128 a block, the last block's own count."""
        t = np.asarray(terms, dtype=np.int64)
        return self._df(t, self.term_first[t + 1].astype(np.int64) - self.term_first[t].astype(np.int64))

    def _df(self, t: Any, nblocks: Any) -> Any:
        return np.where(nblocks > 0, (nblocks - 1) * BLOCK + self.term_last_n[t].astype(np.int64), 0)

    def _bad_block(self, terms: Any) -> Crafted:
        """The first block of ``terms`` whose gaps do not end at its recorded last passage, named (decoded here
        with NumPy: the compiled search only says that one did not)."""
        for t in np.asarray(terms, dtype=np.int64).tolist():
            f, e = int(self.term_first[t]), int(self.term_first[t + 1])
            df = int(self.df([t])[0])
            prev = -1
            for bb in range(f, e):
                n = min(BLOCK, df - (bb - f) * BLOCK)
                last = int(self.block_last[bb])
                if n > 1:
                    w, bit = int(self.block_bits[bb, 0]), int(self.block_off[bb]) * 8
                    pos = bit + np.arange(n, dtype=np.int64) * w
                    wi = pos >> 5
                    two = self.words[wi].astype(np.uint64) | (self.words[wi + 1].astype(np.uint64) << np.uint64(32))
                    gaps = (two >> (pos & 31).astype(np.uint64)) & np.uint64((1 << w) - 1) if w else np.zeros(n)
                    got = prev + int(gaps.astype(np.int64).sum()) + n
                    if got != last:
                        return Crafted("words.npy", f"block {bb:,} (of term {t:,}) decodes to passages ending at "
                                                    f"{got:,}, where block_last.npy records {last:,} (position "
                                                    f"{bb:,}) and the index holds {self.num_docs:,} passages")
                prev = last
        return Crafted("words.npy", f"a block of terms {np.asarray(terms).tolist()[:8]} does not decode to its "
                                    "recorded last passage")

    def _args(self):
        return (self.words, self.block_off, self.block_bits, self.block_last)

    def warm(self, threads: int = 1) -> None:
        """Compile (or load from the cache) the searches this index's queries take, one query alone and a batch
        across threads: its own strategy (:meth:`strategy`), and for the bm25s preset searched a window at a time the
        term-at-a-time search it finishes a query with when fewer than ``k`` passages match."""
        if not self.compiled:
            return
        live = np.flatnonzero(np.diff(np.asarray(self.term_first[:1 << 16])) > 0)
        if len(live):
            q = ([int(live[0])], [0], [1.0])
            self.search([q], 1, threads=1)
            if self.strategy() == WINDOWED and self.mode == BM25S:
                self.search([q], 1, threads=1, windowed=False)
            if threads > 1:
                self.search([q, q], 1, threads=threads)

    def strategy(self, *, prune: bool = True, windowed: bool | None = None) -> int:
        """How this index's queries are searched: :data:`EVERY_POSTING` (``prune=False``, and always for bm25l /
        bm25+, which score absent words), :data:`WINDOWED` (``windowed=True``; by default from
        :data:`WINDOWED_FROM` passages, where the term-at-a-time accumulators no longer stay in the cache) or
        :data:`TERM_AT_A_TIME` with pruning (``windowed=False``; the default below)."""
        if self.exhaustive or not prune:
            return EVERY_POSTING
        if windowed or (windowed is None and self.num_docs >= WINDOWED_FROM):
            return WINDOWED
        return TERM_AT_A_TIME

    def search(self, parsed: list[tuple[list[int], list[int], list[float]]], k: int, *, threads: int = 1,
               prune: bool = True, windowed: bool | None = None):
        """The ``k`` best passages of each parsed query (its distinct terms, its token order, its boosts): (ids
        int32, scores float32), ids -1 past the end. The strategy (:meth:`strategy`; the same answers from each):
        every posting (``prune=False``, and always for bm25l / bm25+), a window of passages at a time
        (``windowed=True``; by default from :data:`WINDOWED_FROM` passages) or term at a time with pruning
        (``windowed=False``; the default below)."""
        if not self.compiled:
            return numpy_search(self, parsed, k)
        n = len(parsed)
        ids = np.full((n, k), -1, dtype=np.int32)
        scores = np.zeros((n, k), dtype=np.float32)
        live = [i for i, (terms, _, _) in enumerate(parsed) if terms]
        if not live or not k:
            return ids, scores
        uniq, flat, ptr, oflat, optr, boosts = _batch(parsed, live)
        ta = self.terms(uniq)
        weights = (boosts * ta["idf"][flat]).astype(np.float32)  # Lucene: boost x idf, in float32
        vals = np.zeros((len(live), k), dtype=np.float32)
        got = np.full((len(live), k), -1, dtype=np.int64)
        counts = np.zeros(len(live), dtype=np.int64)
        how = self.strategy(prune=prune, windowed=windowed)
        offsets = np.zeros(len(live), dtype=np.float32)
        if self.exhaustive:
            for j in range(len(live)):  # bm25s: the non-occurrence scores of the query's words, a float32 sum
                offsets[j] = ta["nonocc"][flat[ptr[j] + oflat[optr[j]:optr[j + 1]]]].sum()
        common = (ta["first"], ta["end"], ta["df"])

        def pruned(lo: int, hi: int) -> None:
            """Term at a time with pruning, the queries ``lo`` to ``hi``."""
            _, wide, mark = self.scratch()
            self.k["pruned_many"](flat, ptr[lo:hi + 1], oflat, optr[lo:hi + 1], weights, k, self.mode, self.method,
                                  self.kparams, *self._args(), self.block_max, *common, ta["max"], ta["idf"],
                                  ta["nonocc"], self.doc_len, self.tie, self.num_docs, vals[lo:hi], got[lo:hi],
                                  counts[lo:hi], wide, mark)

        def run(rows: tuple[int, int]) -> None:
            """The queries ``lo`` to ``hi``."""
            lo, hi = rows
            if how == TERM_AT_A_TIME:
                pruned(lo, hi)
            elif how == WINDOWED:
                self.k["window_many"](flat, ptr[lo:hi + 1], oflat, optr[lo:hi + 1], weights, k, self.mode,
                                      self.method, self.kparams, *self._args(), self.block_max, *common, ta["idf"],
                                      ta["nonocc"], self.doc_len, self.tie, self.num_docs, *self.window_scratch(),
                                      vals[lo:hi], got[lo:hi], counts[lo:hi])
                if self.mode == BM25S:  # matched by fewer than k: bm25s fills up with score-0 passages
                    for q in np.flatnonzero(counts[lo:hi] < k) + lo:
                        pruned(int(q), int(q) + 1)
            else:
                self.k["exhaustive_many"](flat, ptr[lo:hi + 1], oflat, optr[lo:hi + 1], weights, offsets[lo:hi], k,
                                          self.mode, self.method, self.kparams, *self._args(), *common, ta["idf"],
                                          ta["nonocc"], self.doc_len, self.tie, self.num_docs, vals[lo:hi],
                                          got[lo:hi], counts[lo:hi], *self.scratch())

        m = len(live)
        cuts = [0, m]
        if threads > 1 and m > 1:  # slices of the batch, a few per thread
            parts = min(m, threads * 4)
            cuts = sorted({m * i // parts for i in range(parts + 1)})
        runs = [(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]
        try:
            if threads <= 1 or len(runs) == 1:
                for r in runs:
                    run(r)
            else:
                list(_pool(threads).map(run, runs))
        except ValueError as e:
            if str(e) != BAD_BLOCK:
                raise
            self._scratch = threading.local()  # (a search stopped midway leaves its accumulators dirty)
            raise self._bad_block(uniq) from None
        if self.mode == LUCENE:
            self.k["tie_adjust"](vals, counts)
        hit = got >= 0
        if len(live) == n:  # every query has a term: no rows to pick
            ids[:] = np.where(hit, got, -1)
            scores[:] = np.where(hit, vals, 0)
        else:
            ids[live] = np.where(hit, got, -1).astype(np.int32)
            scores[live] = np.where(hit, vals, 0).astype(np.float32)
        return ids, scores


def _batch(parsed: list[tuple[list[int], list[int], list[float]]], live: list[int]):
    """The ``live`` queries as the kernels read them: the batch's distinct terms ascending (``uniq``), each query's
    terms as indices into them (``flat``, a query's slice ``ptr[j]:ptr[j + 1]``), its token order (``oflat``,
    ``optr``) and its boosts, one per term (float32). One query of distinct terms (what a server's request of one
    question is) takes a shorter path with the same arrays: NumPy's ``unique`` and ``fromiter`` cost more than its
    search on a small index."""
    if len(live) == 1:
        terms, order, boosts = parsed[live[0]]
        m = len(terms)
        if len(set(terms)) == m:
            rank = sorted(range(m), key=terms.__getitem__)
            uniq = np.array([terms[j] for j in rank], dtype=np.int64)
            flat = np.empty(m, dtype=np.int64)
            flat[rank] = np.arange(m, dtype=np.int64)
            return (uniq, flat, np.array([0, m], dtype=np.int64), np.array(order, dtype=np.int64),
                    np.array([0, len(order)], dtype=np.int64), np.array(boosts, dtype=np.float32))
    glob = np.fromiter(itertools.chain.from_iterable(parsed[i][0] for i in live), dtype=np.int64)
    uniq, flat = np.unique(glob, return_inverse=True)  # the batch's terms, and each query's as indices into them
    flat = flat.reshape(-1).astype(np.int64)
    ptr = np.zeros(len(live) + 1, dtype=np.int64)
    np.cumsum([len(parsed[i][0]) for i in live], out=ptr[1:])
    oflat = np.fromiter(itertools.chain.from_iterable(parsed[i][1] for i in live), dtype=np.int64)
    optr = np.zeros(len(live) + 1, dtype=np.int64)
    np.cumsum([len(parsed[i][1]) for i in live], out=optr[1:])
    boosts = np.fromiter(itertools.chain.from_iterable(parsed[i][2] for i in live), dtype=np.float32)
    return uniq, flat, ptr, oflat, optr, boosts


# -- the numpy backend: every passage scored with NumPy (no numba), the same answers ------------------------------
def numpy_postings(ix: PostingsIndex, t: int) -> tuple[Any, Any]:
    """Term ``t``'s postings (passages, frequencies), decoded with NumPy."""
    f, e = int(ix.term_first[t]), int(ix.term_first[t + 1])
    df = int(ix.df([t])[0])
    docs, tfs = [], []
    words = ix.words
    for bb in range(f, e):
        n = min(BLOCK, df - (bb - f) * BLOCK)
        bit = int(ix.block_off[bb]) * 8
        out = []
        for w in (int(ix.block_bits[bb, 0]), int(ix.block_bits[bb, 1])):
            if w == 0:
                out.append(np.zeros(n, np.int64))
                continue
            pos = bit + np.arange(n, dtype=np.int64) * w
            wi = pos >> 5
            two = words[wi].astype(np.uint64) | (words[wi + 1].astype(np.uint64) << np.uint64(32))
            out.append(((two >> (pos & 31).astype(np.uint64)) & np.uint64((1 << w) - 1)).astype(np.int64))
            bit += n * w
        base = -1 if bb == f else int(ix.block_last[bb - 1])
        # a block of one posting stores no gap: its passage is its last
        docs.append(np.array([int(ix.block_last[bb])]) if n == 1 else base + np.cumsum(out[0] + 1))
        if int(docs[-1][-1]) != int(ix.block_last[bb]):
            raise ix._bad_block([t])
        tfs.append(out[1] + 1)
    if not docs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(docs), np.concatenate(tfs)


def numpy_scores(ix: PostingsIndex, t: int, weight: float, docs: Any, tfs: Any) -> Any:
    """The float32 scores of term ``t``'s postings, with NumPy (bm25s: bm25s's own functions, as it scores)."""
    if ix.mode == LUCENE:
        f = np.float32
        cache = lucene_cache(ix.params["k1"], ix.params["b"], ix.params["avgdl"])
        v = tfs.astype(np.float32) * cache[np.asarray(ix.doc_len)[docs]]
        w = f(weight)
        return (w - w / (f(1) + v)).astype(np.float32)
    from bm25s.scoring import _select_tfc_scorer

    p = ix.params
    tfc = _select_tfc_scorer(p["method"])(tf_array=tfs.astype(np.float32), l_d=np.asarray(ix.doc_len)[docs]
                                          .astype(np.int64), l_avg=np.float64(p["avgdl"]), k1=p["k1"], b=p["b"],
                                          delta=p["delta"])
    sc = np.float32(ix.stats.one(int(ix.df([t])[0]))) * tfc
    if ix.exhaustive:
        sc -= np.float32(ix.stats.one(int(ix.df([t])[0]), nonocc=True))
    return sc.astype(np.float32)


def numpy_search(ix: PostingsIndex, parsed: list[tuple[list[int], list[int], list[float]]], k: int):
    """:meth:`PostingsIndex.search` without numba: every passage scored (bm25s: float32 sums in the query's token
    order; Lucene: double sums of the distinct terms, then float), the ``k`` best by score then tie key."""
    n = len(parsed)
    ids = np.full((n, k), -1, dtype=np.int32)
    scores = np.zeros((n, k), dtype=np.float32)
    tie = np.asarray(ix.tie) if ix.mode == LUCENE else np.arange(ix.num_docs)
    for q, (terms, order, boosts) in enumerate(parsed):
        if not terms or not k:
            continue
        posts = [numpy_postings(ix, t) for t in terms]
        if ix.mode == LUCENE:
            acc = np.zeros(ix.num_docs, np.float64)
            hit = np.zeros(ix.num_docs, bool)
            for (docs, tfs), t, boost in zip(posts, terms, boosts, strict=True):
                w = np.float32(boost) * np.float32(ix.stats.one(int(ix.df([t])[0])))
                acc[docs] += numpy_scores(ix, t, w, docs, tfs)
                hit[docs] = True
            total = acc.astype(np.float32)
            cand = np.flatnonzero(hit)
        else:
            total = np.zeros(ix.num_docs, np.float32)
            for u in order:
                docs, tfs = posts[u]
                total[docs] += numpy_scores(ix, terms[u], 0.0, docs, tfs)
            if ix.exhaustive:
                total += np.array([ix.stats.one(int(ix.df([terms[u]])[0]), nonocc=True) for u in order],
                                  np.float32).sum()
            cand = np.arange(ix.num_docs)
        best = cand[np.lexsort((tie[cand], -total[cand]))][:k]
        ids[q, :len(best)] = best
        scores[q, :len(best)] = total[best]
        if ix.mode == LUCENE:
            row = scores[q:q + 1].copy()
            _tie_adjust_py(row, np.array([len(best)]))
            scores[q] = row[0]
    return ids, scores


def _tie_adjust_py(vals: Any, counts: Any) -> None:
    f = np.float32
    for q in range(vals.shape[0]):
        dup = 0
        for i in range(int(counts[q])):
            vals[q, i] = f(np.floor(float(vals[q, i]) * 10000.0 + 0.5) / 10000.0)
            if i == 0 or f(vals[q, i - 1] - vals[q, i]) > f(1e-4):
                dup = 0
            else:
                dup += 1
                vals[q, i] = f(vals[q, i] - f(f(1e-6) * f(dup)))
