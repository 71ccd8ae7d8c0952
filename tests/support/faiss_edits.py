"""Where the values a FAISS search reads lie in a ``faiss.index`` file (an HNSW graph's levels, offsets, neighbours,
entry point and top level; an IVF index's list sizes, ids, centroids and codes; a scalar quantizer's type, sizes and
trained ranges; a RaBitQ quantizer's sizes, metric, query bits and its codes' factors; the header's trained flag;
a PQ's codebook and sizes and an OPQ rotation, :func:`pq_files`), found by looking for each array's bytes as FAISS
wrote them (its length as 8 bytes, then its values), so that a test can plant a value there the way someone who
knows the format would."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

IS_TRAINED = 32  # the header: fourcc, d (int32), ntotal, two unused int64, then is_trained (one byte), metric


def _find(data: bytes, a: np.ndarray, *, sized: bool = True) -> int:
    """The byte offset of ``a``'s first value in ``data`` (after its length when ``sized``)."""
    head = np.int64(a.size).tobytes() if sized else b""
    at = data.find(head + a.tobytes())
    assert at >= 0 and data.find(head + a.tobytes(), at + 1) < 0, f"{a.dtype} array of {a.size} not found once"
    return at + len(head)


def spots(a: np.ndarray) -> list[int]:
    return sorted({0, a.size // 2, a.size - 1})


def planted_values(path: Path) -> list[tuple[str, int, bytes]]:
    """``(label, byte offset, bytes)`` for each value to plant in the FAISS index at ``path``: out of the range the
    search reads within, or within it but not what the build wrote."""
    import faiss

    data = path.read_bytes()
    index = faiss.read_index(str(path))
    inner = faiss.downcast_index(index)
    n = int(index.ntotal)
    out: list[tuple[str, int, bytes]] = [("is_trained 0", IS_TRAINED, b"\x00")]

    def each(label: str, a: np.ndarray, values, *, sized: bool = True) -> int:
        start = _find(data, a, sized=sized)
        for at in spots(a):
            for v in values:
                out.append((f"{label}[{at}] = {v}", start + at * a.itemsize, np.array(v, dtype=a.dtype).tobytes()))
        return start + a.nbytes

    out += _sq_values(data, index)
    hnsw = getattr(inner, "hnsw", None)
    if hnsw is not None:
        levels = faiss.vector_to_array(hnsw.levels)
        each("hnsw levels", levels, [2**31 - 1, 0, -1, int(levels.max()) + 1])
        each("hnsw offsets", faiss.vector_to_array(hnsw.offsets), [2**64 - 1, 1 << 40])
        end = each("hnsw neighbors", faiss.vector_to_array(hnsw.neighbors), [2**31 - 1, -2**31, n, -2])
        out += [(f"hnsw entry_point {v}", end, struct.pack("<i", v)) for v in (2**31 - 1, -5, n, 0)]
        out += [(f"hnsw max_level {v}", end + 4, struct.pack("<i", v)) for v in (2**31 - 1, -5, 0, 100)]
        return out
    try:
        ivf = faiss.extract_index_ivf(index)
    except RuntimeError:  # neither a graph nor an inverted file (a flat index: its vectors, planted elsewhere)
        return out
    lists = ivf.invlists
    sizes = np.array([lists.list_size(i) for i in range(ivf.nlist)], dtype=np.uint64)
    each("ivf list sizes", sizes, [2**64 - 1, 1 << 20, 0])
    centroids = ivf.quantizer.reconstruct_n(0, ivf.nlist)
    each("ivf centroids", centroids.reshape(-1), [float("nan"), float("inf")], sized=False)
    for i in sorted({0, ivf.nlist // 2, ivf.nlist - 1}):
        m = lists.list_size(i)
        ids = faiss.rev_swig_ptr(lists.get_ids(i), m).copy()
        other = int(faiss.rev_swig_ptr(lists.get_ids((i + 1) % ivf.nlist), 1)[0])  # an id another list holds
        each(f"ivf list {i} ids", ids, [2**63 - 1, -1, -5, n, 2**32 + int(ids[0]), other], sized=False)
        if isinstance(inner, faiss.IndexIVFFlat):
            codes = faiss.rev_swig_ptr(lists.get_codes(i), m * lists.code_size).copy().view(np.float32)
            each(f"ivf list {i} vectors", codes, [float("nan"), float("-inf")], sized=False)
    rabitq = getattr(inner, "rabitq", None)
    if rabitq is not None:
        out += _rabitq_values(data, ivf, rabitq)
    return out


def _sq_values(data: bytes, index) -> list[tuple[str, int, bytes]]:
    """A scalar quantizer's (an SQ8 index's, an IVF-SQ's, an HNSW graph's storage's): its type (``qtype``, int32),
    then ``rangestat`` and its argument, ``d`` and ``code_size`` (8 bytes each) and its trained ranges (``vmin``
    then ``vdiff``, a float each dimension); the type and sizes made other than the stored codes', the ranges NaN or
    infinite; and an IVF-SQ's own ``code_size``, just after."""
    import faiss

    inner = faiss.downcast_index(index)
    if hasattr(inner, "storage"):
        inner = faiss.downcast_index(inner.storage)
    sq = getattr(inner, "sq", None)
    if sq is None:
        return []
    trained = faiss.vector_to_array(sq.trained)
    head = _once(data, struct.pack("<QQq", sq.d, sq.code_size, trained.size) + trained.tobytes())
    out = [(f"sq trained[{at}] = {v}", head + 24 + 4 * at, np.float32(v).tobytes())
           for at in spots(trained) for v in (float("nan"), float("inf"))]
    out += [(f"sq qtype {v}", head - 12, struct.pack("<i", v)) for v in (99, -1, 1, 2)]
    out += [(f"sq d {v}", head, struct.pack("<Q", v)) for v in (16, 64, 0)]
    out += [(f"sq code_size {v}", head + 8, struct.pack("<Q", v)) for v in (16, 64, 0)]
    if isinstance(inner, faiss.IndexIVF):
        end = head + 24 + trained.nbytes
        assert struct.unpack("<Q", data[end:end + 8])[0] == inner.code_size
        out += [(f"ivfsq code_size {v}", end, struct.pack("<Q", v)) for v in (16, 64, 0)]
    return out


def _rabitq_values(data: bytes, ivf, rabitq) -> list[tuple[str, int, bytes]]:
    """An IVF-RaBitQ's quantizer (``d``, ``code_size``: 8 bytes each; its metric, int32), then the index's
    ``code_size``, ``by_residual`` and ``qb`` (the query's bits, a byte), just before its inverted lists; and the
    two float factors after each code's bits (list 0's first and last code) made NaN or infinite."""
    import faiss

    lists = _once(data, b"ilar" + struct.pack("<QQ", ivf.nlist, ivf.invlists.code_size))
    head = lists - (8 + 8 + 4 + 8 + 1 + 1)
    assert struct.unpack("<QQiQ", data[head:head + 28]) == (rabitq.d, rabitq.code_size, 0, ivf.code_size), "layout"
    out = [(f"rabitq d {v}", head, struct.pack("<Q", v)) for v in (16, 64, 0)]
    out += [(f"rabitq code_size {v}", head + 8, struct.pack("<Q", v)) for v in (4, 64, 0)]
    out += [(f"rabitq metric {v}", head + 16, struct.pack("<i", v)) for v in (1, 99)]
    out += [(f"ivfrabitq code_size {v}", head + 20, struct.pack("<Q", v)) for v in (4, 64, 0)]
    out += [(f"ivfrabitq qb {v}", head + 29, bytes([v])) for v in (0, 9, 255)]
    out += [(f"invlists code_size {v}", lists + 12, struct.pack("<Q", v)) for v in (4, 64)]
    m, size = ivf.invlists.list_size(0), ivf.invlists.code_size
    codes = faiss.rev_swig_ptr(ivf.invlists.get_codes(0), m * size).copy()
    start = _find(data, codes, sized=False)
    bits = (rabitq.d + 7) // 8
    for j in sorted({0, m - 1}):
        for f in range((size - bits) // 4):
            for v in (float("nan"), float("inf")):
                out.append((f"rabitq list 0 code {j} factor {f} = {v}", start + j * size + bits + 4 * f,
                            np.float32(v).tobytes()))
    return out


def _once(data: bytes, b: bytes) -> int:
    at = data.find(b)
    assert at >= 0 and data.find(b, at + 1) < 0, f"{len(b)} bytes not found once"
    return at


def pq_files(path: Path) -> list[tuple[str, bytes]]:
    """``(label, the whole file with one edit)`` for a PQ index, flat or IVF-PQ (or one OPQ wraps), at ``path``: its
    PQ codebook made NaN or infinite; its PQ's ``d``, ``M``, ``nbits`` made other than the stored codes'; for an
    IVF-PQ, its and the inverted lists' ``code_size`` changed too and the inverted file's own trained flag cleared;
    and, under OPQ, the rotation's values made NaN or infinite, its trained flag cleared, its shape (``d_in``,
    ``d_out``) changed and its matrix cut to half its values (the rest of the file moved up, so that it still
    parses)."""
    import faiss

    data = path.read_bytes()
    index = faiss.read_index(str(path))
    try:
        ivf = faiss.extract_index_ivf(index)
    except RuntimeError:  # a flat index (under a transform or not)
        ivf = None
    inner = faiss.downcast_index(index)
    flat = faiss.downcast_index(inner.index) if isinstance(inner, faiss.IndexPreTransform) else inner
    pq = getattr(faiss.downcast_index(ivf) if ivf is not None else flat, "pq", None)
    if pq is None:  # (none: an index without a PQ)
        return []
    out: list[tuple[str, bytes]] = []

    def put(label: str, at: int, b: bytes) -> None:
        out.append((label, data[:at] + b + data[at + len(b):]))

    cent = faiss.vector_to_array(pq.centroids)
    head = _once(data, struct.pack("<QQQ", pq.d, pq.M, pq.nbits) + np.int64(cent.size).tobytes() + cent.tobytes())
    for at in spots(cent):
        for v in (float("nan"), float("inf")):
            put(f"pq centroids[{at}] = {v}", head + 32 + 4 * at, np.float32(v).tobytes())
    for name, k, values in (("d", 0, [16, 64, 0]), ("M", 8, [4, 16, 0, 2**40]), ("nbits", 16, [4, 16, 0, 64])):
        for v in values:
            put(f"pq {name} {v}", head + k, struct.pack("<Q", v))
    if ivf is not None:
        assert struct.unpack("<Q", data[head - 8:head])[0] == ivf.code_size  # the IVF-PQ's code_size, just before
        lists = _once(data, b"ilar" + struct.pack("<QQ", ivf.nlist, ivf.invlists.code_size))
        for v in (4, 16, 0):
            put(f"ivfpq code_size {v}", head - 8, struct.pack("<Q", v))
            put(f"invlists code_size {v}", lists + 12, struct.pack("<Q", v))
        tail = struct.pack("<iq", ivf.d, ivf.ntotal)  # the IVF-PQ's header: fourcc (IwPQ, or IvPQ before), d, ntotal
        ivf_at = _once(data, (b"IwPQ" if b"IwPQ" + tail in data else b"IvPQ") + tail)
        put("ivf is_trained 0", ivf_at + IS_TRAINED, b"\x00")
    if isinstance(inner, faiss.IndexPreTransform):
        vt = faiss.downcast_VectorTransform(inner.chain.at(0))
        a = faiss.vector_to_array(vt.A)
        start = _once(data, np.int64(a.size).tobytes() + a.tobytes()) + 8
        for at in spots(a):
            for v in (float("nan"), float("-inf")):
                put(f"opq A[{at}] = {v}", start + 4 * at, np.float32(v).tobytes())
        end = start + a.nbytes  # then b (its size, 0: no bias), d_in, d_out (int32), is_trained
        assert struct.unpack("<q", data[end:end + 8])[0] == 0
        for v in (16, 64, -1):
            put(f"opq d_out {v}", end + 12, struct.pack("<i", v))
        put("opq d_in 16", end + 8, struct.pack("<i", 16))
        put("opq is_trained 0", end + 16, b"\x00")
        half = a[:a.size // 2]
        out.append((f"opq A cut to {half.size} values", data[:start - 8] + np.int64(half.size).tobytes()
                    + half.tobytes() + data[end:]))
    return out
