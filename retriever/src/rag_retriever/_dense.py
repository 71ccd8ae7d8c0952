"""The dense retriever kind: a sentence-transformers encoder (:mod:`._encoder`) and a FAISS index, with the e5
conventions of Search-R1 and FlashRAG by default.

**Build** (:class:`DenseBuilder`). Each block of passages is encoded (its corpus ``contents``, as Search-R1's and
FlashRAG's index builders encode them, after the passage prefix) on the GPU when there is one; the vectors are
appended to ``dense/vectors.f16`` (float16, row-major: half of float32's footprint, memory-mapped when read). Then
the FAISS index named by ``--faiss`` (an index-factory string: ``Flat``, ``HNSW32``, ``SQ8``, ``IVF4096,PQ64``, ...;
or picked under ``--max-memory``) is trained on a seeded sample of the vectors (its k-means seeded too), filled a
block at a time and written to ``dense/faiss.index``; inner product (the vectors are normalised: cosine).

**Import** (``--import-faiss``). A Search-R1 / FlashRAG e5 index and its corpus are adopted as they ship them: the
corpus's line order is the index's vector order, so nothing is encoded (the encoder is loaded to check its
dimension). ``--compress FACTORY`` turns an adopted flat index into a compressed one, reading the flat vectors
memory-mapped a block at a time (never the whole index in memory; the float16 copy of the vectors is kept for
re-ranking), and reports recall@k of the compressed ranking against the exact one on a seeded sample of queries.

**Search** (:class:`DenseSearcher`). The FAISS index is read memory-mapped (``IO_FLAG_MMAP_IFC``: the vectors or
codes stay in the page cache, not in the process's own memory; IVF lists with ``IO_FLAG_MMAP`` on older FAISS), so
a server is healthy once the encoder is loaded. Queries are encoded in one batch per call (the server merges
concurrent requests into one). With a compressed index and ``--refine R``, the ``R * k`` best candidates are
scored again exactly from the float16 vectors. Results are sorted by score, ties by the lower passage id.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_plumbing import file_sha256
from rag_plumbing._settings import ray_address_rule, rule

from ._encoder import (
    Encoder,
    EncoderError,
    EncoderSettings,
    ExportError,
    check_device,
    check_source,
    default_device,
    looks_local,
)
from ._fingerprint import files_digest, folder_files, folder_sha256
from ._integrity import HashingWriter, into_memory
from ._kinds import RetrieverKind
from ._onnx import FOLDER as ONNX_FOLDER
from ._onnx import RUNTIME as ONNX_RUNTIME
from ._onnx import export as export_encoder
from ._onnx import wanted as onnx_wanted
from ._ray_encode import RayEncoding
from .errors import RetrieverError, UsageError

if TYPE_CHECKING:
    from ._config import IndexConfig

log = logging.getLogger(__name__)

DENSE_DIR = "dense"
VECTORS = "vectors.f16"
FAISS_INDEX = "faiss.index"
ADD_ROWS = 1 << 16  # vectors per add / conversion step
FLAT_FOURCC = (b"IxFI", b"IxF2", b"IxFl")  # faiss's IndexFlat files: inner product, L2, other metrics


class DenseError(RetrieverError):
    """A dense index that cannot be built, imported or read as asked."""


@dataclass
class DenseOptions:
    """The dense kind's options (``curriculum index --kind dense --encoder ...``; fields of IndexConfig), which the
    hybrid kind reads too."""

    encoder: str | None = rule(None, empty=False, help=(
        "dense / hybrid: the sentence-transformers encoder, a Hub name or a local folder (Search-R1's: "
        "intfloat/e5-base-v2)."))
    query_prefix: str = rule("query: ", help="dense: what a query is prefixed with (e5's, Search-R1's, FlashRAG's).")
    passage_prefix: str = rule("passage: ", help="dense: what a passage is prefixed with (e5's).")
    pooling: str = rule("mean", choices=("mean", "cls", "max", "lasttoken"), help=(
        "dense: pooling of an encoder folder that has no sentence-transformers config (a model that has one uses "
        "its own; the manifest records which)."))
    normalize: bool = rule(True, help="dense: normalise the vectors (cosine similarity by inner product).")
    max_length: int = rule(256, ge=8, le=1_000_000, help="dense: tokens per text (Search-R1: 256).")
    batch_size: int = rule(64, ge=1, le=1_000_000, help="dense: texts per encoder batch.")
    device: str | None = rule(None, empty=False, help="dense: the encoder's device (default: cuda when there is one).")
    faiss: str | None = rule(None, empty=False, help=(
        "dense: the FAISS index, as an index-factory string (Flat, HNSW32, SQ8, IVF4096,PQ64, ...); default: "
        "picked under --max-memory (Flat without it)."))
    max_memory: str | None = rule(None, empty=False, help=(
        "dense: the most memory the index may take (8GB, 512MiB): Flat when it fits, else SQ8, else IVF with the "
        "largest PQ code that fits."))
    seed: int = rule(0, ge=0, le=2**31 - 1, help=(
        "dense: the seed of the training sample and of FAISS's k-means (the same seed, the same index)."))
    train_sample: int = rule(100_000, ge=1, le=1 << 40, help=(
        "dense: vectors the FAISS index is trained on (a seeded sample; IVF, PQ, SQ)."))
    nprobe: int = rule(32, ge=1, le=1 << 20, help="dense: IVF lists searched per query.")
    ef_search: int = rule(64, ge=1, le=1 << 20, help="dense: HNSW's search breadth (efSearch).")
    refine: int = rule(4, ge=0, le=1000, help=(
        "dense: with a compressed index (PQ, SQ, RaBitQ), score the refine * k best candidates again exactly from the "
        "float16 vectors (0: no re-ranking)."))
    import_faiss: str | None = rule(None, empty=False, help=(
        "dense: adopt this FAISS index (Search-R1's or FlashRAG's e5_Flat.index) over --corpus, without encoding: "
        "the corpus's line order is the index's vector order."))
    compress: str | None = rule(None, empty=False, help=(
        "dense, with --import-faiss of a flat index: build this compressed index (a factory string) from its "
        "vectors, read a block at a time, and report recall@10 against the exact ranking."))
    target_recall: float | None = rule(None, gt=0, le=1, help=(
        "dense: the recall@10 of the exact ranking the index must reach: its search settings (IVF nprobe, HNSW "
        "efSearch, the float16 re-rank depth) are tuned at build time, the cheapest that reach it on the tuning "
        "queries (--tune-queries; else the dataset's questions, up to 1,000, where there are 100 or more; else "
        "1,000 of the corpus's own vectors, each with itself left out), a seeded fifth of them held out of the "
        "choice and their recall recorded (a warning when below the target); a build that cannot reach it stops, "
        "saying the best it reaches. It chooses --nprobe, --ef-search and --refine: not given with them."))
    tune_queries: str | None = rule(None, empty=False, help=(
        "dense, with --target-recall: the queries to tune on: a text file (one query a line, encoded with the query "
        "prefix) or a .npy file of query vectors (float32, one row a query)."))
    # -- where the passages are encoded (placement, not identity: never recorded; the same index either way)
    engine: str = rule("local", choices=("local", "ray"), help=(
        "dense / hybrid: where the passages are encoded: local (this process) | ray (Ray Data: shards of passages "
        "streamed to encoder actors on a Ray cluster's CPUs or GPUs, each shard's vectors kept as it finishes, a "
        "stopped run resumed from them; the same index as local)."))
    ray_address: str | None = ray_address_rule()
    num_workers: int | None = rule(None, ge=1, le=1_000_000, help=(
        "--engine ray: encoder actors, each loading the encoder once. Unset: one per GPU of the cluster, else one "
        "per --cpus-per-worker CPUs."))
    gpus_per_worker: float | None = rule(None, ge=0, le=64, help=(
        "--engine ray: GPUs per encoder actor (the encoder runs on cuda there). Unset: 1 when the cluster has "
        "GPUs, else 0."))
    cpus_per_worker: float = rule(1.0, ge=0.01, le=1024, help="--engine ray: CPUs per encoder actor.")


#: Where a dense index's passages are encoded (``--engine ray``): the kind's placement options.
ENGINE_FIELDS = ("engine", "ray_address", "num_workers", "gpus_per_worker", "cpus_per_worker")


def check_config(cfg: IndexConfig) -> None:
    """The dense options' checks (for ``--kind dense`` and ``hybrid``), before anything is read or any model loads:
    each a usage error (exit 2) naming its flag."""
    if not cfg.encoder:
        raise UsageError(f"--kind {cfg.kind} needs --encoder", hint="pass --encoder NAME_OR_PATH (a "
                         "sentence-transformers model; Search-R1's is intfloat/e5-base-v2)")
    check_device(cfg.device)
    if cfg.max_memory is not None:
        parse_bytes(cfg.max_memory)
    if cfg.faiss and cfg.max_memory:
        raise UsageError("--faiss and --max-memory both choose the FAISS index", hint="give one of them")
    if cfg.tune_queries and cfg.target_recall is None:
        raise UsageError("--tune-queries are the queries --target-recall is tuned on: give --target-recall too",
                         hint="e.g. --target-recall 0.95 --tune-queries questions.txt")
    tuned = [f"--{f.replace('_', '-')} {getattr(cfg, f)}" for f in ("nprobe", "ef_search", "refine")
             if getattr(cfg, f) != getattr(DenseOptions, f)]
    if cfg.target_recall is not None and tuned:  # (it chose them and dropped the ones given, saying nothing)
        raise UsageError(f"--target-recall {cfg.target_recall} chooses the search settings itself; "
                         f"{', '.join(tuned)} would be overridden", hint="give --target-recall, or the settings")
    if cfg.compress and not cfg.import_faiss:
        raise UsageError("--compress turns an imported flat index into a compressed one: it needs --import-faiss",
                         hint="for an index you build, give --faiss FACTORY (or --max-memory)")
    if cfg.import_faiss:
        if cfg.kind != "dense":
            raise UsageError("--import-faiss adopts a dense index: use --kind dense")
        if not cfg.corpus or cfg.input:
            raise UsageError("--import-faiss adopts an index of a corpus: pass the --corpus it was built from, "
                             "and no --input", hint="the corpus's line order is the index's vector order")
        if cfg.faiss or cfg.max_memory:
            raise UsageError("--import-faiss keeps the index's own type; --faiss / --max-memory do not apply",
                             hint="to change it, give --compress FACTORY")
    ray_given = [f"--{f.replace('_', '-')}" for f in ENGINE_FIELDS[1:]
                 if getattr(cfg, f) != getattr(DenseOptions, f)]
    if cfg.engine != "ray":
        if ray_given:
            raise UsageError(f"{', '.join(ray_given)} only apply to --engine ray",
                             hint="add --engine ray, or leave them out")
    elif cfg.import_faiss:
        raise UsageError("--import-faiss encodes nothing (the vectors exist): --engine ray does not apply",
                         hint="drop --engine ray")


def parse_bytes(text: str, flag: str = "--max-memory") -> int:
    """``"8GB"``, ``"512MiB"``, ``"1.5G"``, ``"2000000"`` as bytes (GB = 10^9, GiB = 2^30); anything else (``abc``,
    ``nan``, ``-1GB``, ``0``, ``1e400GB``) a usage error naming ``flag``.

    >>> parse_bytes("8GB"), parse_bytes("1GiB"), parse_bytes("500m")
    (8000000000, 1073741824, 500000000)
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgtp]?)(i?)b?\s*", str(text).lower())
    if not m:
        raise UsageError(f"{flag} {text!r}: not a size", hint="give a size such as 8GB or 512MiB")
    scale = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}[m.group(2)]
    value = float(m.group(1)) * ((1024 if m.group(3) else 1000) ** scale)
    if not 1 <= value < 2**63:
        raise UsageError(f"{flag} {text!r}: must be between 1 byte and 8 EiB", hint="give a size such as 8GB")
    return int(value)


#: The oldest FAISS whose reader, with this module's checks, refuses every crafted file of the fuzz
#: (tests/retrieval/test_crafted_index.py) without a signal or a hang: on 1.13.2 six ANN and compressed kinds' files
#: still killed the reader (SIGFPE, SIGABRT), on 1.11.0 an HNSW graph's hung its search. The extras pin it.
FAISS_CHECKED = (1, 15)


def _faiss() -> Any:
    try:
        import faiss
    except ImportError as e:
        raise DenseError(f"dense retrieval needs FAISS ({e})", hint="pip install 'rag-curriculum[dense]' "
                         "(faiss-cpu; faiss-gpu where a GPU is)") from None
    _warn_if_older(getattr(faiss, "__version__", ""))
    return faiss


@functools.cache
def _warn_if_older(version: str) -> None:
    """Once a process: FAISS older than :data:`FAISS_CHECKED` (a faiss-gpu build, which the extras' pin does not
    reach, or an older faiss-cpu) reads crafted index files this toolkit has not checked against."""
    try:
        have = tuple(int(x) for x in version.split(".")[:2])
    except ValueError:
        return
    if have < FAISS_CHECKED:
        want = ".".join(map(str, FAISS_CHECKED))
        log.warning("FAISS %s: an index file from elsewhere is checked for crafted values from FAISS %s on only; "
                    "use indexes you built, or pip install -U 'faiss-cpu>=%s'", version, want, want)


def settings(cfg: IndexConfig) -> EncoderSettings:
    return EncoderSettings(name=str(cfg.encoder), query_prefix=cfg.query_prefix, passage_prefix=cfg.passage_prefix,
                           pooling=cfg.pooling, normalize=cfg.normalize, max_length=cfg.max_length)


def _nlist(n: int) -> int:
    """IVF lists for ``n`` vectors: a power of two near 4 sqrt(n), at most n / 39 (FAISS wants 39 training points
    per centroid), at least 1."""
    want = max(1, int(4 * n ** 0.5))
    p = 1 << max(0, want.bit_length() - 1)
    while p > 1 and p * 39 > n:
        p >>= 1
    return p


def pick_factory(n: int, d: int, max_memory: str | None) -> str:
    """The index for ``n`` vectors of dimension ``d`` under ``--max-memory``: Flat (exact, 4d bytes a vector) when
    it fits, else SQ8 (d bytes), else IVF with the largest PQ code that fits (m bytes + 8 for its id); without a
    budget, Flat."""
    if not max_memory:
        return "Flat"
    budget = parse_bytes(max_memory)
    if 4 * d * n <= budget:
        return "Flat"
    if d * n <= budget:
        return "SQ8"
    nlist = _nlist(n)
    for m in sorted({x for x in (d // 2, d // 3, d // 4, d // 6, d // 8, d // 12, d // 16, d // 24, d // 32, 8, 4)
                     if x >= 1 and d % x == 0}, reverse=True):
        if (m + 8) * n + 4 * d * nlist <= budget:
            return f"IVF{nlist},PQ{m}"
    raise DenseError(f"--max-memory {max_memory}: {n:,} vectors of dimension {d} do not fit even as IVF{nlist},PQ4",
                     hint="raise --max-memory, or give --faiss yourself")


def _check_factory(factory: str, d: int, flag: str = "--faiss") -> None:
    """Refuse, as a usage error naming ``flag`` (``--faiss`` or ``--compress``), a factory string FAISS rejects."""
    faiss = _faiss()
    try:
        index = faiss.index_factory(d, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as e:
        raise UsageError(f"{flag} {factory!r}: FAISS refuses it for dimension {d} ({_faiss_message(e)})",
                         hint="give an index-factory string such as Flat, HNSW32, SQ8, IVF4096,PQ64") from None
    if isinstance(faiss.downcast_index(index), (faiss.IndexIDMap, faiss.IndexIDMap2)):
        raise UsageError(f"{flag} {factory!r}: an IDMap index maps vectors to ids of its own; a passage's id here is "
                         "its vector's position, so there is no id to map", hint=f"drop IDMap: {flag} "
                         + ",".join(x for x in factory.split(",") if not x.strip().startswith("IDMap")))


#: The metrics the toolkit serves, by FAISS's metric type: the name the manifest records.
METRICS = {0: "inner_product", 1: "l2"}


def metric_of(index: Any, where: str) -> str:
    """The metric of a FAISS index, read from the index itself (``inner_product`` or ``l2``); another metric
    (L1, Linf, ...) is refused in one line: its scores cannot be ranked as the toolkit ranks."""
    kind = int(index.metric_type)
    if kind not in METRICS:
        names = {getattr(_faiss(), n): n for n in dir(_faiss()) if n.startswith("METRIC_")}
        raise DenseError(f"{where}: its metric is {names.get(kind, kind)}; the toolkit serves inner-product and L2 "
                         "indexes", hint="make the index with faiss.METRIC_INNER_PRODUCT (Search-R1's) or METRIC_L2")
    return METRICS[kind]


def nonfinite_rows(vectors: VectorFile) -> tuple[int, list[int], int]:
    """How many rows of ``vectors`` hold a NaN or an infinity, the first few of them, and how many rows are all
    zero (read a block at a time)."""
    import numpy as np

    count, first, zeros = 0, [], 0
    for a in range(0, vectors.n, ADD_ROWS):
        block = vectors.block(a, min(vectors.n, a + ADD_ROWS))
        bad = np.flatnonzero(~np.isfinite(block).all(axis=1))
        count += len(bad)
        first.extend((bad[:max(0, 3 - len(first))] + a).tolist())
        zeros += int((~block.any(axis=1)).sum())
    return count, first, zeros


def index_vectors(index: Any, path: Path) -> VectorFile | None:
    """The float32 vectors a FAISS index file holds, memory-mapped, where they can be read without decoding: a
    flat index's (from its file), an HNSW index's flat storage (reconstructed a block at a time otherwise); None
    for an index that keeps only codes (PQ, SQ: their decoded vectors are finite whatever was added)."""
    with open(path, "rb") as f:
        fourcc = f.read(4)
    if fourcc in FLAT_FOURCC:
        d, n, offset, _ = flat_layout(path)
        return VectorFile(path, n, d, dtype="<f4", offset=offset)
    faiss = _faiss()
    inner = faiss.downcast_index(index)
    storage = getattr(inner, "storage", None)
    if storage is not None and isinstance(faiss.downcast_index(storage), faiss.IndexFlat):
        return _Reconstructed(index)
    return None


class _Reconstructed:
    """``VectorFile``'s ``n``, ``d`` and ``block`` over an index's ``reconstruct_n``."""

    def __init__(self, index: Any) -> None:
        self.index, self.n, self.d = index, index.ntotal, index.d

    def block(self, a: int, b: int) -> Any:
        return self.index.reconstruct_n(a, b - a)


def check_finite(vectors: Any, where: str, *, corpus: bool = False) -> None:
    """Refuse vectors holding a NaN or an infinity (a passage that could never be retrieved), naming the first
    rows (``corpus``: the rows are the corpus's lines, as in an imported index), and vectors that are all zero."""
    if vectors is None:
        return
    count, first, zeros = nonfinite_rows(vectors)
    if vectors.n and zeros == vectors.n:  # every score 0: every query would get the first passages
        raise DenseError(f"{where}: all {vectors.n:,} vectors are zero, so every passage would score 0 for every "
                         "query", hint="encode the passages again (a zero vector is no embedding)")
    if count:
        rows = ", ".join(str(i) for i in first) + (", ..." if count > len(first) else "")
        line = f"; the corpus's line {first[0] + 1} for the first" if corpus else ""
        raise DenseError(f"{where}: {count:,} vector{'s' if count > 1 else ''} not finite (NaN or infinity): "
                         f"passage{'s' if count > 1 else ''} {rows} (0-based{line})",
                         hint="encode those passages again, or drop them from the index and its corpus")


CRAFTED_HINT = ("the file was crafted or damaged after FAISS wrote it: build the index again with curriculum index "
                "... --overwrite")


def check_structure(index: Any, where: str) -> None:
    """What FAISS reads a search by and does not check when it reads the file (it checks an HNSW graph's ids and
    offsets itself), refused in one line naming the value and where it is: an index its header says is untrained
    (every search fails); an HNSW graph's top level and entry point, which must be its highest node's; an inverted
    file's centroids (finite) and ids: each passage ``0 .. ntotal - 1`` held once, in one list (an id out of that
    range is a passage the index does not hold; one held twice, another's vector under its id). At open: the
    ids read once (8 bytes a passage; 0.08 s at 5.2M passages in 4,096 lists, 0.4 s in 65,536, on one core);
    an IVF-PQ's code sizes and any PQ's codebook (``d x 2**nbits`` floats, :func:`_check_codebook`), a scalar
    quantizer's trained ranges (``2 x d`` floats, :func:`_check_sq`), an IVF-RaBitQ's metric and an OPQ or other
    linear transform's matrix (``d_in x d_out``, :func:`_check_transforms`), each read once, under a refine or an
    HNSW graph too (:func:`_layers`); the IVF-Flat vectors themselves are read by :func:`verify` (``validate``,
    ``--verify``)."""
    import numpy as np

    faiss = _faiss()
    n = int(index.ntotal)
    if not index.is_trained:
        raise DenseError(f"{where}: its header says the index is not trained, so no search of it can run",
                         hint=CRAFTED_HINT)
    inner = faiss.downcast_index(index)
    hnsw = getattr(inner, "hnsw", None)
    if hnsw is not None and n:
        levels = faiss.vector_to_array(hnsw.levels)
        top, entry = int(levels.max()) - 1, int(hnsw.entry_point)
        if hnsw.max_level != top or not 0 <= entry < n or int(levels[entry]) - 1 != top:
            at = f"level {int(levels[entry]) - 1}" if 0 <= entry < n else "no node"
            raise DenseError(f"{where}: its HNSW graph's top level is {int(hnsw.max_level)} and its entry point "
                             f"{entry:,} ({at}), but its highest node is at level {top}", hint=CRAFTED_HINT)
    layers = _layers(faiss, index)
    for layer in layers:  # (an OPQ under a refine is applied all the same)
        _check_transforms(faiss, layer, where)
    ivf = _ivf(faiss, index)
    for layer in layers if ivf is None else [faiss.downcast_index(ivf)]:  # (an SQ under a refine decodes too)
        _check_sq(faiss, layer, where)
    if ivf is None:  # a flat PQ (or an HNSW graph's PQ storage): FAISS's reader checks its header against its
        for layer in layers:  # codes; its codebook is read here
            pq = getattr(layer, "pq", None)
            if pq is not None:
                _check_codebook(faiss, pq, where)
        return
    if not ivf.is_trained:
        raise DenseError(f"{where}: the header of its inverted file says it is not trained, so no search of it can "
                         "run", hint=CRAFTED_HINT)
    _check_pq(faiss, ivf, where)
    rabitq = getattr(faiss.downcast_index(ivf), "rabitq", None)
    if rabitq is not None and int(rabitq.metric_type) != int(index.metric_type):
        said, own = (METRICS.get(int(x), int(x)) for x in (rabitq.metric_type, index.metric_type))
        raise DenseError(f"{where}: its RaBitQ quantizer's metric is {said}; the index's is {own}, so the distances "
                         "its codes give are not the ones it ranks by", hint=CRAFTED_HINT)
    try:
        centroids = ivf.quantizer.reconstruct_n(0, ivf.nlist)
    except RuntimeError:  # a quantizer that keeps no vectors to read back: its own search checks what it reads
        centroids = None
    if centroids is not None and not np.isfinite(centroids).all():
        row = int(np.flatnonzero(~np.isfinite(centroids).all(axis=1))[0])
        raise DenseError(f"{where}: the centroid of inverted list {row:,} is not finite (NaN or infinity)",
                         hint=CRAFTED_HINT)
    lists, ptr = ivf.invlists, faiss.rev_swig_ptr
    sizes = np.fromiter((lists.list_size(i) for i in range(ivf.nlist)), dtype=np.int64, count=ivf.nlist)
    if int(sizes.sum()) != n:
        raise DenseError(f"{where}: its inverted lists hold {int(sizes.sum()):,} ids; its header says {n:,} vectors",
                         hint=CRAFTED_HINT)
    live = np.flatnonzero(sizes).tolist()
    ids = np.concatenate([ptr(lists.get_ids(i), m) for i, m in zip(live, sizes[live].tolist(), strict=True)]) if live \
        else np.zeros(0, np.int64)
    bad = (ids < 0) | (ids >= n)

    def spot(j: int) -> tuple[int, int]:  # the list and position of ``ids[j]``
        ends = np.cumsum(sizes)
        i = int(np.searchsorted(ends, j, side="right"))
        return i, j - int(ends[i] - sizes[i])

    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        i, at = spot(j)
        raise DenseError(f"{where}: inverted list {i:,} holds passage id {int(ids[j]):,} at position {at:,}; "
                         f"the index holds {n:,} passages (ids 0 to {n - 1:,})", hint=CRAFTED_HINT)
    seen = np.zeros(n, dtype=np.bool_)
    seen[ids] = True
    if not seen.all():  # as many ids as passages, each in range: one is missing, so another is held twice
        twice = int(np.flatnonzero(np.bincount(ids, minlength=n) > 1)[0])
        held = [spot(int(j)) for j in np.flatnonzero(ids == twice)]
        said = ", ".join(f"list {i:,} position {at:,}" for i, at in held[:3])
        raise DenseError(f"{where}: its inverted lists hold passage id {twice:,} {len(held)} times ({said}) and "
                         f"passage {int(np.flatnonzero(~seen)[0]):,} never; each passage is held once",
                         hint=CRAFTED_HINT)


def _check_transforms(faiss: Any, inner: Any, where: str) -> None:
    """The linear transforms an index applies to a query first (an OPQ rotation, a PCA): each trained, its
    matrix ``d_out x d_in`` values (FAISS applies it by that shape, whatever the file holds) and finite."""
    import numpy as np

    if not isinstance(inner, faiss.IndexPreTransform):
        return
    for k in range(inner.chain.size()):
        vt = faiss.downcast_VectorTransform(inner.chain.at(k))
        name = f"its {type(vt).__name__} (transform {k} of its chain)"
        if not vt.is_trained:
            raise DenseError(f"{where}: {name} says it is not trained, so no search of it can run",
                             hint=CRAFTED_HINT)
        if not isinstance(vt, faiss.LinearTransform):
            continue
        a, b = faiss.vector_to_array(vt.A), faiss.vector_to_array(vt.b)
        if a.size != vt.d_in * vt.d_out or b.size not in (0, vt.d_out):
            raise DenseError(f"{where}: {name} holds a matrix of {a.size:,} values and a bias of {b.size:,}; its "
                             f"shape {vt.d_out} x {vt.d_in} needs {vt.d_in * vt.d_out:,} and {vt.d_out}",
                             hint=CRAFTED_HINT)
        for what, v in (("matrix", a), ("bias", b)):
            if not np.isfinite(v).all():
                at = int(np.flatnonzero(~np.isfinite(v))[0])
                raise DenseError(f"{where}: {name}'s {what} value {at:,} is not finite (NaN or infinity)",
                                 hint=CRAFTED_HINT)


def _check_pq(faiss: Any, ivf: Any, where: str) -> None:
    """An IVF-PQ's product quantizer: its header (``d``, ``M``, ``nbits``) gives the code size its search decodes
    by, which must be the size of the codes its lists store (else a search reads past them); its codebook
    (``d x 2**nbits`` floats) finite."""
    pq = getattr(faiss.downcast_index(ivf), "pq", None)
    if pq is None:
        return
    if (pq.d != ivf.d or pq.M * pq.dsub != pq.d or pq.code_size != ivf.code_size
            or ivf.invlists.code_size != ivf.code_size):
        raise DenseError(f"{where}: its product quantizer's header (d {pq.d}, M {pq.M}, nbits {pq.nbits}: "
                         f"{pq.code_size} bytes a code) does not match its inverted lists' codes "
                         f"({ivf.invlists.code_size} bytes each, dimension {ivf.d})", hint=CRAFTED_HINT)
    _check_codebook(faiss, pq, where)


def _layers(faiss: Any, index: Any) -> list[Any]:
    """The index and those it wraps, outermost first: a refine's base, a transform's index, an HNSW graph's
    storage (``PQ8,RFlat``, ``OPQ8,PQ8``, ``HNSW32_PQ8``)."""
    out = [faiss.downcast_index(index)]
    while len(out) < 8:
        top = out[-1]
        inner = (top.base_index if isinstance(top, faiss.IndexRefine)
                 else top.index if isinstance(top, faiss.IndexPreTransform) else getattr(top, "storage", None))
        if inner is None:
            break
        out.append(faiss.downcast_index(inner))
    return out


def _check_codebook(faiss: Any, pq: Any, where: str) -> None:
    """A product quantizer's codebook (``d x 2**nbits`` floats), which every code is decoded by: finite."""
    import numpy as np

    c = faiss.vector_to_array(pq.centroids)
    if not np.isfinite(c).all():
        at = int(np.flatnonzero(~np.isfinite(c))[0]) // pq.dsub
        raise DenseError(f"{where}: its product quantizer's codebook (centroid {at % pq.ksub:,} of sub-quantizer "
                         f"{at // pq.ksub:,}) is not finite (NaN or infinity)", hint=CRAFTED_HINT)


def _check_sq(faiss: Any, inner: Any, where: str) -> None:
    """A scalar quantizer's (an SQ index's, an IVF-SQ's, an HNSW graph's storage's) trained ranges, which every code
    is decoded by: finite, ``vmin`` then ``vdiff`` a value each dimension (one each for a uniform type), and its
    dimension the index's."""
    import numpy as np

    storage = getattr(inner, "storage", None)
    sq = getattr(faiss.downcast_index(storage) if storage is not None else inner, "sq", None)
    if sq is None:
        return
    q, t = faiss.ScalarQuantizer, faiss.vector_to_array(sq.trained)
    want = {q.QT_8bit: 2 * sq.d, q.QT_4bit: 2 * sq.d, q.QT_6bit: 2 * sq.d, q.QT_8bit_uniform: 2,
            q.QT_4bit_uniform: 2}.get(int(sq.qtype), t.size)
    if sq.d != inner.d or t.size != want:
        raise DenseError(f"{where}: its scalar quantizer (type {int(sq.qtype)}, dimension {sq.d}) holds "
                         f"{t.size:,} trained values; it needs {want:,} for the index's dimension {inner.d}",
                         hint=CRAFTED_HINT)
    if not np.isfinite(t).all():
        at = int(np.flatnonzero(~np.isfinite(t))[0])
        what = f"{'vmin' if at < t.size // 2 else 'vdiff'} {at % max(1, t.size // 2):,}"
        raise DenseError(f"{where}: its scalar quantizer's trained range ({what}) is not finite (NaN or infinity)",
                         hint=CRAFTED_HINT)


def _ivf_flat_finite(index: Any, where: str) -> None:
    """An IVF-Flat index's vectors (its lists' codes), a list at a time: each finite (:func:`verify`)."""
    import numpy as np

    faiss = _faiss()
    ivf = _ivf(faiss, index)
    if ivf is None or not isinstance(faiss.downcast_index(ivf), faiss.IndexIVFFlat):
        return
    lists = ivf.invlists
    for i in range(ivf.nlist):
        m = int(lists.list_size(i))
        if not m:
            continue
        codes = faiss.rev_swig_ptr(lists.get_codes(i), m * lists.code_size).view(np.float32).reshape(m, -1)
        bad = ~np.isfinite(codes).all(axis=1)
        if bad.any():
            at = int(np.flatnonzero(bad)[0])
            pid = int(faiss.rev_swig_ptr(lists.get_ids(i), m)[at])
            raise DenseError(f"{where}: the vector of passage {pid:,} (inverted list {i:,}, position {at:,}) is not "
                             "finite (NaN or infinity)", hint=CRAFTED_HINT)


def _faiss_message(e: BaseException) -> str:
    """FAISS's error without its C++ location."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return re.sub(r"^Error in .*? at [^:]+:\d+: (Error: )?", "", text)


def _gpus(faiss: Any, device: str | None) -> bool:
    """Whether FAISS can build on GPUs here: faiss-gpu installed, a GPU it sees, and a CUDA device asked for."""
    return (str(device or "").startswith("cuda") and hasattr(faiss, "index_cpu_to_all_gpus")
            and getattr(faiss, "get_num_gpus", lambda: 0)() > 0)


def _ivf(faiss: Any, index: Any) -> Any:
    """The index's inverted-file part (an IVF index, or the IVF inside a wrapper), None when it has none."""
    try:
        return faiss.extract_index_ivf(index)
    except RuntimeError:
        return None


def _seeded(index: Any, seed: int) -> None:
    """k-means seeds of an IVF's coarse quantizer and of its PQ, so training is the same every run; and no
    polysemous training of an IVF-PQ (FAISS's factory turns it on unless the code is written ``PQ..np``): it only
    reorders the PQ's centroids for a Hamming pre-filter the toolkit never searches with (``polysemous_ht`` 0: the
    same distances, the same rankings) and it takes longer than the rest of the training."""
    faiss = _faiss()
    ivf = _ivf(faiss, index)
    if ivf is not None:
        ivf.cp.seed = seed
        ivf = faiss.downcast_index(ivf)
        if getattr(ivf, "do_polysemous_training", False):
            ivf.do_polysemous_training = False
        pq = getattr(ivf, "pq", None)
        if pq is not None:
            pq.cp.seed = seed
    pq = getattr(faiss.downcast_index(index), "pq", None)
    if pq is not None:
        pq.cp.seed = seed


def float16_copy(directory: Path, manifest: dict[str, Any]) -> VectorFile | None:
    """A compressed index's float16 copy of its vectors (``dense.vectors``; None for none), refused in one line
    unless it holds a row for each passage and its size is that of its rows (a file cut short, or longer, would be
    read past its end or misread a row at a time)."""
    m, vec = manifest["dense"], manifest["dense"].get("vectors")
    if not vec:
        return None
    path, rows, d, n = Path(directory) / DENSE_DIR / vec["file"], vec["rows"], m["dim"], manifest["passages"]
    size = path.stat().st_size
    if rows != n or size != 2 * rows * d:
        raise DenseError(f"{directory}: {DENSE_DIR}/{vec['file']}: {size:,} bytes for {rows:,} rows of {d} float16 "
                         f"values ({2 * rows * d:,} bytes); the index holds {n:,} passages",
                         hint="the file was cut short, crafted or damaged after the index was built: build the index "
                              "again with curriculum index ... --overwrite")
    return VectorFile(path, rows, d)


class VectorFile:
    """Row-major vectors on disk, read memory-mapped a block at a time: ``vectors.f16`` (float16) or the float32
    rows of a FAISS IndexFlat file (its layout: a 45-byte header, then the vectors)."""

    def __init__(self, path: Path, n: int, d: int, dtype: str = "<f2", offset: int = 0) -> None:
        import numpy as np

        self.path, self.n, self.d, self.dtype, self.offset = path, n, d, np.dtype(dtype), offset
        if not n:
            self.rows = np.zeros((0, d), dtype=dtype)
        elif into_memory():  # read whole: a file rewritten under this process cannot fault a query
            self.rows = np.fromfile(path, dtype=dtype, count=n * d, offset=offset).reshape(n, d)
        else:
            self.rows = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(n, d))

    def block(self, a: int, b: int) -> Any:
        """Rows ``a..b-1`` as float32, read from the file (not through the map: a pass over millions of rows would
        leave every page it touched counted in the process's resident memory)."""
        import numpy as np

        if b <= a:
            return np.zeros((0, self.d), dtype=np.float32)
        got = np.fromfile(self.path, dtype=self.dtype, count=(b - a) * self.d,
                          offset=self.offset + a * self.d * self.dtype.itemsize)
        return got.reshape(b - a, self.d).astype(np.float32)

    def take(self, ids: Any) -> Any:
        import numpy as np

        return np.asarray(self.rows[np.asarray(ids)], dtype=np.float32)


def flat_layout(path: Path) -> tuple[int, int, int, int]:
    """(dimension, vectors, data offset, metric) of a FAISS IndexFlat file (what ``faiss.write_index`` writes)."""
    with open(path, "rb") as f:
        h = f.read(64)
    if h[:4] not in FLAT_FOURCC:
        raise DenseError(f"{path}: not a flat FAISS index (its type is {h[:4]!r})",
                         hint="--compress reads a flat index (Search-R1's e5_Flat.index)")
    d, ntotal = struct.unpack_from("<iq", h, 4)
    (metric,) = struct.unpack_from("<i", h, 33)
    off = 37 + (4 if metric > 1 else 0)
    (nfloat,) = struct.unpack_from("<Q", h, off)
    if nfloat != ntotal * d:
        raise DenseError(f"{path}: a flat index whose header does not add up ({nfloat} floats for {ntotal} vectors "
                         f"of dimension {d})", hint="the file is damaged: download it again")
    return d, ntotal, off + 8, metric


def read_faiss_header(path: Path) -> Any:
    """The FAISS index in ``path`` (memory-mapped where FAISS can), or one error line for a file that is not one."""
    faiss = _faiss()
    if not Path(path).is_file():
        raise DenseError(f"--import-faiss {path}: no such file", hint="pass the .index file (e5_Flat.index)")
    try:
        return faiss.read_index(str(path), _mmap_flags(faiss))
    except RuntimeError as e:
        raise DenseError(f"--import-faiss {path}: not a FAISS index ({_faiss_message(e)})",
                         hint="pass the .index file FAISS wrote (Search-R1's e5_Flat.index)") from None


def _mmap_flags(faiss: Any) -> int:
    """FAISS's read flags that map a whole index file (vectors, codes, graph, lists) without copying it, where this
    FAISS has them."""
    if into_memory():  # read whole (read_into_memory): a file rewritten under this process cannot fault a query
        return 0
    ifc = getattr(faiss, "IO_FLAG_MMAP_IFC", 0)  # faiss >= 1.11: any index type; before: IVF lists alone
    return (ifc or faiss.IO_FLAG_MMAP) | faiss.IO_FLAG_READ_ONLY


class DenseBuilder:
    """The dense kind's side of a build: ``add`` encodes each block (or, importing, only counts it); ``finish``
    makes the FAISS index."""

    def __init__(self, cfg: IndexConfig, tmp: Path, *, out: Path | None = None, **kw: Any) -> None:
        self.cfg, self.dir, self.out = cfg, tmp / DENSE_DIR, out
        self.dir.mkdir(parents=True, exist_ok=True)
        check_source(str(cfg.encoder))  # a missing or broken folder, before anything loads
        self.metric = "inner_product"
        if cfg.import_faiss:  # what the index file says, before the encoder loads
            where = f"--import-faiss {cfg.import_faiss}"
            self.imported = read_faiss_header(Path(cfg.import_faiss))
            self.metric = metric_of(self.imported, where)
            if cfg.compress:
                _check_factory(cfg.compress, self.imported.d, "--compress")
            check_finite(index_vectors(self.imported, Path(cfg.import_faiss)), where, corpus=True)
        # the encoder exported to ONNX, once, into the index (served with onnxruntime; None: sentence-transformers)
        self.onnx = export_encoder(str(cfg.encoder), self.dir / ONNX_FOLDER, pooling=cfg.pooling,
                                   normalize=cfg.normalize, max_length=cfg.max_length)
        exported = (self.dir / ONNX_FOLDER, self.onnx) if self.onnx else None
        # the passages on the GPU when there is one (sentence-transformers there), else with the export on the CPU
        self.encoder = self.query_encoder = Encoder(settings(cfg), device=cfg.device or default_device(),
                                                    exported=exported)
        self.verb = "reading and indexing" if cfg.import_faiss else "encoding"  # what the progress bar says
        self.n = 0
        self.progress = None  # set by the build: called with the passages done
        # the encoder's float32 vectors, until the FAISS index is made from them (then kept as float16)
        self._file = None if cfg.import_faiss else open(self.dir / ".vectors.f32", "wb")
        if cfg.faiss and not cfg.import_faiss:
            _check_factory(cfg.faiss, self.encoder.dim)  # before hours of encoding
        if cfg.import_faiss and self.imported.d != self.encoder.dim:
            raise DenseError(f"--encoder {cfg.encoder} makes vectors of dimension {self.encoder.dim}; the index "
                             f"{cfg.import_faiss} holds dimension {self.imported.d}",
                             hint="pass the encoder the index was made with (Search-R1's: intfloat/e5-base-v2)")
        # --engine ray: the passages go to encoder actors on a Ray cluster (this process keeps the query encoder)
        self.ray = RayEncoding(cfg, out if out is not None else tmp, settings(cfg), self.encoder.dim,
                               exported if self.encoder.runtime == ONNX_RUNTIME else None) \
            if cfg.engine == "ray" and not cfg.import_faiss else None
        self.encoding: dict[str, Any] | None = None  # what the Ray encoding ran (not recorded: placement)
        #: the SHA-256 of the files this builder hashed as it wrote them (by path inside the index)
        self.digests: dict[str, str] = {}
        #: the dataset's questions, set by the build before :meth:`finish` (``--target-recall``'s default queries)
        self.questions: Sequence[str] = ()
        if cfg.tune_queries:  # before hours of encoding
            self.tune_queries = read_tune_queries(cfg.tune_queries, self.encoder.dim)

    def add(self, block: Any) -> None:
        import numpy as np

        if self._file is None:  # importing: the vectors exist, one per corpus line
            self.n += len(block)
            if self.progress:
                self.progress(len(block))
            return
        texts = block.contents()
        if self.ray is not None:  # handed to Ray; encoded in finish()
            skipped = self.ray.add(texts, self.n)
            self.n += len(texts)
            if self.progress and skipped:
                self.progress(skipped)
            return
        step = max(1, self.cfg.batch_size) * 8
        for start in range(0, len(texts), step):
            vecs = self.encoder.encode(texts[start:start + step], "passage", batch_size=self.cfg.batch_size)
            if not np.isfinite(vecs).all():
                row = self.n + int(np.flatnonzero(~np.isfinite(vecs).all(axis=1))[0])
                raise DenseError(f"--encoder {self.cfg.encoder} made a vector that is not finite (NaN or infinity) "
                                 f"for passage {row}", hint="check the encoder (its weights, --max-length, the "
                                                            "device's precision)")
            self._file.write(np.ascontiguousarray(vecs, dtype="<f4").tobytes())
            self.n += len(vecs)
            if self.progress:
                self.progress(len(vecs))

    def finish(self, *, bar: Any = None, task: Any = None) -> dict[str, Any]:
        faiss = _faiss()
        cfg, d = self.cfg, self.encoder.dim
        facts: dict[str, Any] = {"encoder": _recorded_encoder(str(cfg.encoder), self.out), "dim": d,
                                 "pooling": self.encoder.pooling,
                                 "normalize": cfg.normalize, "query_prefix": cfg.query_prefix,
                                 "passage_prefix": cfg.passage_prefix, "max_length": cfg.max_length,
                                 "metric": self.metric, "text": "contents",
                                 "faiss_version": faiss.__version__, "sentence_transformers_version": _st_version(),
                                 "runtime": self.encoder.runtime}
        files = encoder_files(str(cfg.encoder))  # the encoder's files' digests, checked when a server loads it
        if files is not None:
            facts["encoder_files"] = files
        if self.onnx:  # what serves the queries (its files' digests: part of the manifest, so of the fingerprint)
            facts["onnx"] = self.onnx
            for key, sha in (("model", "sha256"), ("tokenizer", "tokenizer_sha256")):
                self.digests[f"{DENSE_DIR}/{self.onnx['folder']}/{self.onnx[key]}"] = self.onnx[sha]
        if cfg.import_faiss:
            facts.update(self._import(bar, task))
        else:
            if self.ray is not None:
                try:
                    self.encoding = self.ray.run(self._file, (lambda n: bar.advance(task, n)) if bar is not None
                                                 else None)
                finally:
                    self.ray.close()
            self._file.close()
            full = VectorFile(self.dir / ".vectors.f32", self.n, d, dtype="<f4")
            factory = cfg.faiss or pick_factory(self.n, d, cfg.max_memory)
            index = self._train_and_fill(factory, full, bar, task)  # from the encoder's own float32 vectors
            self.digests[f"{DENSE_DIR}/{VECTORS}"] = _halve(full, self.dir / VECTORS)
            facts.update({"faiss": factory, "vectors": {"file": VECTORS, "dtype": "float16", "rows": self.n}})
            facts.update(_search_params(cfg, factory))
            if cfg.target_recall is not None:
                tuned = tune(index, full, VectorFile(self.dir / VECTORS, self.n, d), cfg, self.encoder,
                             what=_what_fits(cfg, factory), questions=self.questions)
                facts.update({k: tuned[k] for k in ("nprobe", "ef_search", "refine") if k in tuned})
                facts["tuned"] = tuned
            self.digests[f"{DENSE_DIR}/{FAISS_INDEX}"] = write_faiss(index, self.dir / FAISS_INDEX)
            del full
            (self.dir / ".vectors.f32").unlink()
            return {"dense": facts}
        facts.update(_search_params(cfg, facts["faiss"]))
        for k in ("nprobe", "ef_search", "refine"):  # what the tuning chose, when it did
            if k in facts.get("tuned", {}):
                facts[k] = facts["tuned"][k]
        return {"dense": facts}

    def committed(self) -> None:
        """The index is in place (called by the build after its commit): a Ray encoding's work folder goes."""
        if self.ray is not None:
            self.ray.committed()

    def abort(self) -> None:
        """The build failed: a local Ray cluster started for the encoding is shut down (its shards stay)."""
        if self.ray is not None:
            self.ray.close()

    def _train_and_fill(self, factory: str, vectors: VectorFile, bar: Any, task: Any) -> Any:
        import numpy as np

        faiss = _faiss()
        metric = faiss.METRIC_L2 if self.metric == "l2" else faiss.METRIC_INNER_PRODUCT  # an L2 flat stays L2
        index = faiss.index_factory(vectors.d, factory, metric)
        cpu_index = index
        if _gpus(faiss, self.cfg.device or self.encoder.device):  # faiss-gpu: train and fill on the GPUs (as
            co = faiss.GpuMultipleClonerOptions()              # Search-R1's builder does), then back to the CPU
            co.shard = True
            index = faiss.index_cpu_to_all_gpus(index, co=co)
        if not index.is_trained:
            _seeded(index, self.cfg.seed)
            rng = np.random.default_rng(self.cfg.seed)
            take = np.sort(rng.choice(vectors.n, size=min(self.cfg.train_sample, vectors.n), replace=False))
            threads = faiss.omp_get_max_threads()
            if "OPQ" in factory:  # OPQ's training differs with the thread count: one thread, the same every run
                faiss.omp_set_num_threads(1)
            try:
                index.train(vectors.take(take))
            except RuntimeError as e:
                raise DenseError(f"--faiss {factory!r}: training on {len(take):,} vectors failed "
                                 f"({_faiss_message(e)})", hint="choose fewer IVF lists, or index more passages") \
                    from None
            finally:
                faiss.omp_set_num_threads(threads)
        for a in range(0, vectors.n, ADD_ROWS):
            try:
                index.add(vectors.block(a, min(vectors.n, a + ADD_ROWS)))
            except RuntimeError as e:  # FAISS's C++ error, its source location dropped
                raise DenseError(f"{factory!r}: adding vectors {a:,} on failed ({_faiss_message(e)})",
                                 hint="choose another index-factory string (--faiss, --compress)") from None
            if bar is not None:
                bar.advance(task, min(vectors.n, a + ADD_ROWS) - a)
        return index if index is cpu_index else faiss.index_gpu_to_cpu(index)

    def _import(self, bar: Any, task: Any) -> dict[str, Any]:
        """Adopt ``--import-faiss`` (cloned, else copied, into the index: :func:`adopt_file`); with ``--compress``, a
        compressed index made from its flat vectors instead, with recall@k against the exact ranking."""
        cfg, src = self.cfg, Path(self.cfg.import_faiss)
        if self.imported.ntotal != self.n:
            raise DenseError(f"--import-faiss {src} holds {self.imported.ntotal:,} vectors, --corpus {cfg.corpus} "
                             f"{self.n:,} passages: the corpus's line order must be the index's vector order",
                             hint="pass the corpus the index was built from (Search-R1's wiki-18.jsonl for "
                                  "e5_Flat.index)")
        imported = {"file": src.name, "bytes": src.stat().st_size, "type": type(self.imported).__name__}
        if not cfg.compress:
            how = adopt_file(src, self.dir / FAISS_INDEX)
            log.info("--import-faiss %s: %s into the index", src, how)
            return {"faiss": _factory_of(self.imported), "imported": imported}
        d, n, offset, _ = flat_layout(src)
        flat = VectorFile(src, n, d, dtype="<f4", offset=offset)
        index = self._train_and_fill(cfg.compress, flat, bar, task)
        self.digests[f"{DENSE_DIR}/{VECTORS}"] = _halve(flat, self.dir / VECTORS)  # the float16 copy, for re-ranking
        halves = VectorFile(self.dir / VECTORS, n, d)
        out: dict[str, Any] = {"faiss": cfg.compress, "imported": imported,
                               "compressed_from": _factory_of(self.imported)}
        if cfg.target_recall is not None:
            out["tuned"] = tune(index, flat, halves, cfg, self.encoder, what=cfg.compress, l2=self.metric == "l2",
                                questions=self.questions)
        params = _search_params(cfg, cfg.compress)
        params.update({k: out["tuned"][k] for k in ("nprobe", "ef_search", "refine") if k in out.get("tuned", {})})
        self.digests[f"{DENSE_DIR}/{FAISS_INDEX}"] = write_faiss(index, self.dir / FAISS_INDEX)
        recall = compressed_recall(index, flat, halves, params, cfg, l2=self.metric == "l2")
        log.info("compressed %s to %s: recall@%d %.4f on %d queries", src.name, cfg.compress, recall["k"],
                 recall["recall"], recall["queries"])
        out.update({"recall": recall, "vectors": {"file": VECTORS, "dtype": "float16", "rows": n}})
        return out


def _recorded_encoder(name: str, out: Path | None) -> str:
    """A Hub name as it is; a local folder relative to the index (``../models/e5``): a manifest holds no absolute
    path of this machine, and the index finds its encoder again wherever the two are moved together."""
    if out is None or not os.path.isdir(name):
        return name
    return Path(os.path.relpath(os.path.abspath(name), os.path.abspath(out))).as_posix()


def resolve_encoder(recorded: str, directory: Path) -> str:
    """The encoder a manifest names: a folder relative to the index when there is one, else the name as it is."""
    here = Path(directory) / recorded
    return str(here) if not os.path.isabs(recorded) and here.is_dir() else recorded


#: What to do when the encoder folder an index records is not where the index says.
MOVED_HINT = ("pass where the encoder is now: curriculum serve --index DIR --encoder FOLDER (Python: "
              "load_index(DIR, encoder=FOLDER))")


def check_encoder(recorded: str, directory: Path, override: str | None = None) -> None:
    """Refuse, in one line and before any model loads, an encoder a dense index cannot find: ``--encoder
    OVERRIDE`` named when given (no such folder, not a model folder, a broken JSON file); else the folder the
    manifest records (relative to the index), with the flag that overrides it when it moved."""
    if override:
        check_source(override, "--encoder")
        return
    resolved = resolve_encoder(recorded, Path(directory))
    if looks_local(recorded) and not os.path.isdir(resolved):
        where = os.path.normpath(Path(directory) / recorded) if not os.path.isabs(recorded) else recorded
        raise EncoderError(f"{directory}: the index's encoder folder {recorded} (recorded in its manifest.json, "
                           f"relative to the index: {where}) is not there", hint=MOVED_HINT)
    try:
        check_source(resolved, "encoder")
    except EncoderError as e:
        raise EncoderError(f"{directory}: the index's {e}", hint=MOVED_HINT) from None


def _onnx_serves(m: dict[str, Any], override: str | None, device: str | None) -> bool:
    """Whether the index's ONNX export of its encoder serves its queries (as :class:`._encoder.Encoder` decides)."""
    return isinstance(m.get("onnx"), dict) and not override and onnx_wanted() and (device or "cpu") == "cpu"


#: What to do when an encoder is not the one an index was built with.
OTHER_ENCODER_HINT = ("pass the encoder the index was built with, or add --allow-other-encoder to serve with this "
                      "one (the server then announces another fingerprint)")


def check_encoder_files(m: dict[str, Any], directory: Path, override: str | None, *, device: str | None = None,
                        allow: bool = False) -> str | None:
    """The encoder a dense index will run is the one it was built with, checked before any model
    loads: the ONNX export's two files against the SHA-256 ``dense.onnx`` records when the export serves; else the
    encoder folder (``--encoder OVERRIDE``, the folder the manifest records, or a Hub model's cached snapshot)
    against ``dense.encoder_files``, file by file (files the record does not name are not read). Another
    encoder is refused in one line naming the file that differs, unless ``allow``: then the return value is the
    served folder's SHA-256, which :attr:`CorpusIndex.fingerprint` folds into the announced fingerprint. None: the
    index's own encoder (or nothing recorded to compare, when no other is given)."""
    if _onnx_serves(m, override, device):
        rec = m["onnx"]
        folder = directory / DENSE_DIR / str(rec.get("folder", ONNX_FOLDER))
        for key, sha in (("model", "sha256"), ("tokenizer", "tokenizer_sha256")):
            path = folder / str(rec.get(key))
            if path.is_file() and file_sha256(path) != rec.get(sha):
                raise DenseError(f"{directory}: {path.relative_to(directory).as_posix()}: the exported encoder's "
                                 "SHA-256 is not the one manifest.json records (the file changed or is damaged)",
                                 hint="build the index again with curriculum index ... --overwrite")
        return None
    rec = m.get("encoder_files")
    name = override or m["encoder"]
    folder = Path(os.path.expanduser(override)) if override else encoder_folder(resolve_encoder(m["encoder"],
                                                                                                 directory))
    who = f"--encoder {override}" if override else f"the index's encoder {m['encoder']}"
    if not isinstance(rec, dict) or not isinstance(rec.get("files"), dict):
        if not override:
            return None  # a Hub model that was not in the cache when the index was built: nothing to compare
        if not allow:
            raise DenseError(f"{who}: the index records no digest of the encoder it was built with "
                             f"({m['encoder']}), so this one cannot be checked", hint=OTHER_ENCODER_HINT)
        return folder_sha256(folder) if folder is not None and folder.is_dir() else str(name)
    if folder is None or not folder.is_dir():
        return None  # a Hub model not in this machine's cache: the loader says so
    for rel in sorted(rec["files"]):
        path = folder / rel
        if not path.is_file():
            what = f"{rel} is not there"
        elif file_sha256(path) != rec["files"][rel]:
            what = f"{rel} differs"
        else:
            continue
        if allow:
            return folder_sha256(folder)
        raise DenseError(f"{who}: {what} from the encoder the index was built with ({rec.get('folder')}, its files' "
                         f"SHA-256 recorded in manifest.json): its vectors would not be the index's",
                         hint=OTHER_ENCODER_HINT)
    return None


def _halve(vectors: VectorFile, path: Path) -> str:
    """``vectors`` as float16, row-major, a block at a time; the file's SHA-256, made as it is written."""
    with HashingWriter(path) as f:
        for a in range(0, vectors.n, ADD_ROWS):
            f.write(vectors.block(a, min(vectors.n, a + ADD_ROWS)).astype("<f2").tobytes())
    return f.hexdigest()


def write_faiss(index: Any, path: Path) -> str:
    """``faiss.write_index(index, path)`` through a writer that hashes the bytes as they go; the file's SHA-256."""
    faiss = _faiss()
    with HashingWriter(path) as f:
        faiss.write_index(index, faiss.PyCallbackIOWriter(f.write))
    return f.hexdigest()


def encoder_folder(name: str) -> Path | None:
    """The folder an encoder is loaded from: a local folder as it is; a Hub name's snapshot in this machine's Hub
    cache (None when there is none: nothing to hash)."""
    path = os.path.expanduser(str(name))
    if os.path.isdir(path):
        return Path(path)
    if looks_local(str(name)):
        return None
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(str(name), local_files_only=True))
    except Exception:  # noqa: BLE001  (not in the cache, no huggingface_hub: nothing recorded)
        return None


def encoder_files(name: str) -> dict[str, Any] | None:
    """What a manifest records of the encoder's files (``dense.encoder_files``): where it came from (``folder`` or
    ``hub``), the folder's name, each file's SHA-256 and their digest (:func:`._fingerprint.folder_sha256`)."""
    folder = encoder_folder(name)
    if folder is None:
        return None
    files = folder_files(folder)
    local = os.path.isdir(os.path.expanduser(str(name)))
    return {"source": "folder" if local else "hub", "folder": folder.resolve().name if local else str(name),
            "sha256": files_digest(files), "files": files}


def adopt_file(src: Path, dest: Path) -> str:
    """Put ``src`` into an index as ``dest`` without sharing its bytes with the user's file: a reflink (a
    copy-on-write clone on Btrfs, XFS, APFS-like file systems: instant, no space until either changes), else a copy
    (``copy_file_range``: in the kernel, server-side on NFS 4.2). Never a hard link: one inode would make a write to
    either file change both. Returns how (``cloned`` / ``copied``) for the log line."""
    import fcntl

    with open(src, "rb") as fin, open(dest, "wb") as fout:
        try:
            fcntl.ioctl(fout.fileno(), 0x40049409, fin.fileno())  # FICLONE
            return "cloned (copy-on-write: the two files change apart)"
        except OSError:
            pass
    shutil.copyfile(src, dest)
    return f"copied ({dest.stat().st_size / 1e9:,.2f} GB)"


def _factory_of(index: Any) -> str:
    name = type(index).__name__
    return {"IndexFlatIP": "Flat", "IndexFlatL2": "Flat", "IndexFlat": "Flat"}.get(name, name)


def _search_params(cfg: IndexConfig, factory: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "IVF" in factory:
        out["nprobe"] = cfg.nprobe
    if "HNSW" in factory:
        out["ef_search"] = cfg.ef_search
    out["refine"] = cfg.refine if _compressed(factory) else 0
    return out


def _st_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("sentence-transformers")
    except Exception:  # noqa: BLE001
        return None


TUNE_K = 10  # recall@10, as the docs and the issue state the goal
TUNE_QUERIES = 1000
#: The share of the tuning queries held out of the choice: the chosen setting's recall on them is what the target
#: is checked against (recorded as ``tuned.held_out``; a warning when it falls short).
HELD_OUT_SHARE = 0.2
HELD_OUT_MIN = 50  # fewer tuning queries than this: none held out (too few to say anything)
#: A dataset's questions are the default tuning queries when the index holds at least this many (real questions,
#: which a server will be asked; else the corpus's own vectors).
MIN_DATASET_QUESTIONS = 100
#: Tuned on the corpus's own vectors, the target's misses are cut to this share: a passage as a query reads a higher
#: recall than a real question (measured with all-MiniLM-L6-v2 on the shared samples' 12,061 paragraphs and 600
#: questions no build saw, IVF128,PQ8: 0.866 against 0.844, 1.16 times the misses; bench/bench_target_recall.py),
#: so --target-recall 0.85 aims at 0.88 there. Real questions (--tune-queries, the dataset's) aim at the target.
PASSAGE_QUERY_MISSES = 0.8
REFINES = (0, 1, 2, 4, 8, 16, 32, 64)  # re-rank depths tried (refine * k candidates scored from float16)
#: A float16 byte read for re-ranking counts as this many bytes of a scanned code: a random read of a row of the
#: vectors' file against a sequential scan of packed codes. Measured on the development machine (IVF256,PQ48 over
#: 200,000 vectors of dimension 384, one thread): 0.5-0.7 ns a code byte scanned, 1.2-2.1 ns a float16 byte re-ranked
#: from the page cache (2 to 4 times as much; more from a disk).
RERANK_WEIGHT = 4


def corpus_queries(flat: VectorFile, seed: int, m: int = TUNE_QUERIES) -> tuple[Any, Any]:
    """A seeded sample of ``m`` of the corpus's own vectors as queries: (vectors, their row ids)."""
    import numpy as np

    rng = np.random.default_rng(seed + 1)
    ids = np.sort(rng.choice(flat.n, size=min(m, flat.n), replace=False))
    return flat.take(ids), ids


def tuning_queries(cfg: IndexConfig, flat: VectorFile, encoder: Encoder | None,
                   questions: Sequence[str] = ()) -> tuple[Any, Any, str]:
    """The queries ``--target-recall`` is tuned on: (vectors, the corpus row each one is, or None, where from).
    ``--tune-queries``: a ``.npy`` of query vectors, or a text file of queries (one a line) encoded with the query
    prefix; else the dataset's ``questions`` (a seeded sample of at most :data:`TUNE_QUERIES`, encoded with the query
    prefix) where there are at least :data:`MIN_DATASET_QUESTIONS`; else a seeded sample of the corpus's vectors,
    each searched with itself left out."""
    import numpy as np

    if not cfg.tune_queries:
        if len(questions) >= MIN_DATASET_QUESTIONS and encoder is not None:
            rng = np.random.default_rng(cfg.seed + 3)
            pick = np.sort(rng.choice(len(questions), size=min(TUNE_QUERIES, len(questions)), replace=False))
            texts = [questions[int(i)] for i in pick]
            return encoder.encode(texts, "query"), None, \
                f"{len(texts):,} of the dataset's {len(questions):,} questions"
        q, ids = corpus_queries(flat, cfg.seed)
        return q, ids, f"a seeded sample of {len(ids):,} of the corpus's vectors (each one's own left out)"
    path = Path(cfg.tune_queries)
    given = read_tune_queries(path, flat.d)
    if isinstance(given, list):
        if encoder is None:  # pragma: no cover - every builder has one
            raise DenseError(f"--tune-queries {path}: no encoder to encode the queries with")
        return encoder.encode(given, "query"), None, f"{path.name} ({len(given):,} queries)"
    return given, None, f"{path.name} ({len(given):,} query vectors)"


def held_out_split(n: int, seed: int) -> tuple[Any, Any]:
    """The tuning queries split, seeded: (the rows the setting is chosen on, the rows held out of the choice: a
    share :data:`HELD_OUT_SHARE` of them, none below :data:`HELD_OUT_MIN` queries), each in ascending order.

    >>> fit, held = held_out_split(100, 0)
    >>> len(fit), len(held), sorted([*fit, *held]) == list(range(100))
    (80, 20, True)
    >>> [len(x) for x in held_out_split(49, 0)]
    [49, 0]
    """
    import numpy as np

    if n < HELD_OUT_MIN:
        return np.arange(n), np.arange(0)
    order = np.random.default_rng(seed + 2).permutation(n)
    cut = n - round(n * HELD_OUT_SHARE)
    return np.sort(order[:cut]), np.sort(order[cut:])


def read_tune_queries(path: str | Path, d: int) -> Any:
    """``--tune-queries``: a ``.npy`` file's query vectors (float32, checked: two dimensions, ``d`` columns, finite)
    or a text file's queries (one a non-empty line); one error line naming the file otherwise."""
    import numpy as np

    path = Path(path)
    flag = f"--tune-queries {path}"
    if not path.is_file():
        raise DenseError(f"{flag}: no such file", hint="give a text file of queries, one a line, or a .npy of "
                         "query vectors")
    if path.suffix == ".npy":
        try:
            q = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise DenseError(f"{flag}: not a .npy array ({str(e).splitlines()[0][:120]})",
                             hint="save the query vectors with numpy.save") from None
        if q.ndim != 2 or q.shape[1] != d or not len(q) or not np.issubdtype(q.dtype, np.floating):
            raise DenseError(f"{flag}: an array of shape {q.shape} ({q.dtype}); the index holds vectors of dimension "
                             f"{d}", hint=f"give float vectors of shape (queries, {d})")
        q = np.ascontiguousarray(q, dtype=np.float32)
        if not np.isfinite(q).all():
            row = int(np.flatnonzero(~np.isfinite(q).all(axis=1))[0])
            raise DenseError(f"{flag}: row {row} is not finite (NaN or infinity)", hint="give finite vectors")
        return q
    try:
        texts = [x.strip() for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise DenseError(f"{flag}: cannot read it as text ({e})", hint="give UTF-8 text, one query a line") from None
    if not texts:
        raise DenseError(f"{flag}: no query in it", hint="give one query a line")
    return texts


def _hits(got: Any, exact: Any, k: int) -> Any:
    """Per query, how many of its exact ``k`` best the ranking ``got`` holds in its ``k`` best."""
    import numpy as np

    return np.array([len(set(a[:k].tolist()) & set(b[:k].tolist())) for a, b in zip(got, exact, strict=True)],
                    dtype=np.int64)


def _recall(got: Any, exact: Any, k: int) -> float:
    return _share(_hits(got, exact, k), k)


def _share(hits: Any, k: int) -> float:
    return round(float(hits.sum()) / (k * len(hits)), 4) if len(hits) else 1.0


def _without_self(ids: Any, self_ids: Any, k: int) -> Any:
    """Each row of ``ids`` with its query's own corpus row dropped (where it is there), cut to ``k``."""
    import numpy as np

    if self_ids is None:
        return ids[:, :k]
    out = np.full((len(ids), k), -1, dtype=np.int64)
    for r, (row, me) in enumerate(zip(ids, self_ids, strict=True)):
        keep = row[row != me][:k]
        out[r, :len(keep)] = keep
    return out


def _rescored(cand: Any, scores: Any, halves: VectorFile | None, q: Any, k: int, *, l2: bool = False) -> Any:
    """The ``k`` best of each row of candidates: by the index's own scores (``halves`` None; an L2 index's
    distances, ``l2``, negated) or scored again exactly from the float16 vectors; ties by the lower id (as
    :func:`ranked`)."""
    import numpy as np

    cand = np.asarray(cand)
    if halves is None:
        scores = -np.asarray(scores) if l2 else scores
    else:
        scores = np.full(cand.shape, -np.inf, dtype=np.float32)
        for r in range(len(q)):
            live = cand[r] >= 0
            block = halves.take(cand[r][live])
            s = block @ q[r]
            if l2:
                s = 2 * s - (block * block).sum(axis=1) - q[r] @ q[r]
            scores[r, live] = s
    scores = np.where(cand >= 0, scores, -np.inf)
    order = np.lexsort((np.where(cand >= 0, cand, np.iinfo(np.int64).max), -scores), axis=1)[:, :k]
    return np.take_along_axis(cand, order, 1)


def _knobs(index: Any) -> tuple[str | None, list[int]]:
    """The index's breadth knob and the values tried: IVF's nprobe (powers of two up to its list count), HNSW's
    efSearch (16 to 4,096), or none (a flat scan of codes)."""
    faiss = _faiss()
    ivf = _ivf(faiss, index)
    if ivf is not None:
        return "nprobe", [1 << i for i in range(int(ivf.nlist).bit_length()) if 1 << i <= ivf.nlist]
    if getattr(faiss.downcast_index(index), "hnsw", None) is not None:
        return "ef_search", [16 << i for i in range(9)]
    return None, [0]


def _cost(index: Any, knob: str | None, value: int, refine: int, k: int, d: int) -> float:
    """Bytes a query reads (the tuning's price of a setting): the codes scanned (IVF: ``nprobe`` lists of average
    length; HNSW: about ``efSearch`` times its neighbours; otherwise every code), plus ``refine * k`` float16 rows
    weighted by :data:`RERANK_WEIGHT`."""
    faiss = _faiss()
    code = float(index.sa_code_size()) if hasattr(index, "sa_code_size") else 4.0 * d
    if knob == "nprobe":
        ivf = faiss.extract_index_ivf(index)
        scanned = value * index.ntotal / max(1, ivf.nlist) * float(ivf.code_size)
    elif knob == "ef_search":
        scanned = value * int(faiss.downcast_index(index).hnsw.nb_neighbors(0)) * code
    else:
        scanned = index.ntotal * code
    return scanned + RERANK_WEIGHT * refine * k * 2 * d


def tune(index: Any, flat: VectorFile, halves: VectorFile, cfg: IndexConfig, encoder: Encoder | None, *,
         what: str, k: int = TUNE_K, l2: bool = False, questions: Sequence[str] = ()) -> dict[str, Any]:
    """The cheapest search settings (by :func:`_cost`) whose recall@k of the exact ranking over ``flat`` reaches
    ``cfg.target_recall`` on the tuning queries (:func:`tuning_queries`; ``questions``, the dataset's), with every
    setting tried and its recall; a :class:`DenseError` saying the best reachable when none does. A seeded fifth of
    the queries is held out of the choice (:func:`held_out_split`): the chosen setting's recall on it is recorded
    (``held_out``) and a warning says when it falls short of the target. One search per breadth value fetches the
    deepest re-rank's candidates; each shallower re-rank takes their first ``refine * k``, as the server would."""
    import numpy as np

    target = float(cfg.target_recall)
    q, self_ids, source = tuning_queries(cfg, flat, encoder, questions)
    aim = target if self_ids is None else round(1 - (1 - target) * PASSAGE_QUERY_MISSES, 4)
    fit, held = held_out_split(len(q), cfg.seed)
    extra = 0 if self_ids is None else 1
    exact = _without_self(exact_top_k(flat, q, k + extra, l2=l2), self_ids, k)
    knob, values = _knobs(index)
    compressed = _compressed(what)
    refines = REFINES if compressed else (0,)
    deepest = min(index.ntotal, k * max(1, refines[-1]) + 1 + extra)
    tried: list[list[Any]] = []
    hits: dict[tuple[int, int], Any] = {}  # per setting, each query's hits
    best: tuple[float, int, int, float] | None = None
    for value in values:
        if best is not None and _cost(index, knob, value, 0, k, flat.d) > best[0]:
            break  # every later setting costs more than the one found
        _set_params(index, {knob: value} if knob else {})
        scores, cand = index.search(np.ascontiguousarray(q, dtype=np.float32), deepest)
        for refine in refines:
            width = min(deepest, k * max(1, refine) + 1 + extra)
            got = _rescored(cand[:, :width], scores[:, :width], halves if refine else None, q, k + extra, l2=l2)
            hits[value, refine] = _hits(_without_self(got, self_ids, k), exact, k)
            r = _share(hits[value, refine][fit], k)
            tried.append([value, refine, r])
            cost = _cost(index, knob, value, refine, k, flat.d)
            if r >= aim and (best is None or cost < best[0]):
                best = (cost, value, refine, r)
        if len(values) == 1:
            break
    top = max(tried, key=lambda t: (t[2], -t[0], -t[1]))
    on = f"{source}, {len(fit):,} of them" if len(held) else source
    if best is None:
        setting = ", ".join(x for x in ((f"{_flag(knob)} {top[0]}" if knob else ""),
                                        (f"--refine {top[1]}" if compressed else "")) if x)
        aimed = f", where it aims at {aim:g} (passages as queries read higher than questions)" if aim != target \
            else ""
        err = DenseError(f"--target-recall {target:g}: {what} reaches at most recall@{k} {top[2]:.4f} on {on}"
                         + (f" ({setting})" if setting else "") + aimed,
                         hint="lower --target-recall, or give an index with larger codes (--faiss, --compress) or "
                              "more memory (--max-memory)" + (", or tune on real questions (--tune-queries)"
                                                              if aimed else ""))
        err.tried = tried  # every setting tried and its recall, for a caller that wants the frontier
        raise err
    _, value, refine, r = best
    plain = next(t[2] for t in tried if t[0] == value and t[1] == 0)
    out: dict[str, Any] = {"target_recall": target, "aimed_at": aim, "k": k, "queries": len(fit),
                           "queries_from": source, "recall": r,
                           "recall_without_refine": plain, "refine": refine,
                           "held_out": {"queries": len(held), "recall": _share(hits[value, refine][held], k)}
                           if len(held) else None,
                           "tried": {"columns": [knob or "-", "refine", "recall"], "rows": tried}}
    if knob:
        out[knob] = value
    log.info("tuned %s to recall@%d %.4f (target %g): %s", what, k, r, target,
             ", ".join(f"{n} {v}" for n, v in ((knob, value), ("refine", refine)) if n))
    _warn_margin(hits[value, refine][fit], k, r, aim, target)
    if out["held_out"] and out["held_out"]["recall"] < target:
        log.warning("--target-recall %g: recall@%d %.4f on the %d tuning queries held out of the choice (%.4f on "
                    "the %d it was chosen on): give more --tune-queries or a higher target", target, k,
                    out["held_out"]["recall"], len(held), r, len(fit))
    return out


def _warn_margin(hits: Any, k: int, recall: float, aim: float, target: float) -> None:
    """Warn when the tuning queries are too few for the recall measured on them to say the target is reached: the
    chosen setting's recall less two standard errors of its per-query mean falls below the aim (80 queries at 0.91
    are known to about +-0.03), with the number of queries that would pin it to +-0.01."""
    import math

    import numpy as np

    per = np.asarray(hits, dtype=np.float64) / k
    if len(per) < 2:
        return
    sd = float(per.std(ddof=1))
    margin = 2 * sd / math.sqrt(len(per))
    if recall - margin < aim:
        need = math.ceil((2 * sd / 0.01) ** 2)
        log.warning("--target-recall %g: recall@%d %.4f on %d tuning queries, +-%.4f (two standard errors): "
                    "maybe below %g elsewhere; give about %d --tune-queries for +-0.01", target, k, recall, len(per),
                    margin, aim, need)


def _flag(knob: str | None) -> str:
    return {"nprobe": "--nprobe", "ef_search": "--ef-search"}.get(knob or "", "")


def _compressed(factory: str) -> bool:
    return any(t in factory for t in ("PQ", "SQ", "LSH", "RaBitQ"))


def _what_fits(cfg: IndexConfig, factory: str) -> str:
    """How a tuning failure names the index: the factory, and the budget it was picked under."""
    return f"{factory} (the index that fits --max-memory {cfg.max_memory})" if cfg.max_memory and not cfg.faiss \
        else factory


def compressed_recall(index: Any, flat: VectorFile, halves: VectorFile, params: dict[str, Any], cfg: IndexConfig,
                      *, queries: int = TUNE_QUERIES, k: int = TUNE_K, l2: bool = False) -> dict[str, Any]:
    """recall@k of the compressed ranking (as served with ``params``: its ``refine * k`` candidates scored again
    from the float16 vectors ``halves``; and without re-ranking) against exact search over ``flat``, on a seeded
    sample of queries: corpus vectors (the corpus's own distribution), each searched with itself left out (its
    own vector would be a free hit), searched exactly block by block."""
    q, q_ids = corpus_queries(flat, cfg.seed, queries)
    exact = _without_self(exact_top_k(flat, q, k + 1, l2=l2), q_ids, k)
    _set_params(index, params)
    refine = int(params.get("refine") or 0)
    plain, _ = ranked(index, None, 0, q, k + 1, l2=l2)
    served, _ = ranked(index, halves, refine, q, k + 1, l2=l2)
    return {"k": k, "queries": len(q_ids), "recall": _recall(_without_self(served, q_ids, k), exact, k),
            "recall_without_refine": _recall(_without_self(plain, q_ids, k), exact, k), "refine": refine,
            **{key: params[key] for key in ("nprobe", "ef_search") if key in params},
            "queries_from": "a seeded sample of the corpus's vectors, each one's own left out"}


def exact_top_k(flat: VectorFile, q: Any, k: int, *, l2: bool = False) -> Any:
    """The exact ``k`` best rows of ``flat`` for each query (inner product; with ``l2``, the nearest by Euclidean
    distance), block by block, ties by lower id."""
    import numpy as np

    best_s = np.full((len(q), 0), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(q), 0), dtype=np.int64)
    for a in range(0, flat.n, ADD_ROWS):
        block = flat.block(a, min(flat.n, a + ADD_ROWS))
        s, ids = _block_best(_scores(q, block, l2), a, k)
        cs, ci = np.concatenate([best_s, s], axis=1), np.concatenate([best_i, ids], axis=1)
        order = np.lexsort((ci, -cs), axis=1)[:, :k]
        best_s, best_i = np.take_along_axis(cs, order, 1), np.take_along_axis(ci, order, 1)
    return best_i


def _block_best(s: Any, first: int, k: int) -> tuple[Any, Any]:
    """Each row's candidates among a block's scores ``s`` (columns are rows ``first..``): every score at least the
    row's ``k``-th best (ties at the cut all kept), padded with -inf; and their ids. A partition, not a sort of the
    whole block (a sort costs more than the matrix product)."""
    import numpy as np

    n = s.shape[1]
    if n <= k:
        return s, np.broadcast_to(np.arange(first, first + n), s.shape)
    cut = np.partition(s, n - k, axis=1)[:, n - k:n - k + 1]
    r, c = np.nonzero(s >= cut)
    counts = np.bincount(r, minlength=len(s))
    width = int(counts.max()) if len(counts) else 0
    pos = np.arange(len(r)) - np.repeat(np.cumsum(counts) - counts, counts)
    out_s = np.full((len(s), width), -np.inf, dtype=np.float32)
    out_i = np.full((len(s), width), np.iinfo(np.int64).max, dtype=np.int64)
    out_s[r, pos] = s[r, c]
    out_i[r, pos] = c + first
    return out_s, out_i


def _scores(q: Any, block: Any, l2: bool) -> Any:
    """Each query's score of each row, higher better: the inner product, or for an L2 index the negated squared
    distance ``-|q - v|^2`` (FAISS's L2 distances, negated: the toolkit's one convention, best first)."""
    import numpy as np

    s = q @ block.T
    if l2:
        s = 2 * s - (block * block).sum(axis=1)[None, :] - (q * q).sum(axis=1)[:, None]
    return s.astype(np.float32, copy=False)


def _set_params(index: Any, params: dict[str, Any]) -> None:
    faiss = _faiss()
    ivf = _ivf(faiss, index)
    if ivf is not None and params.get("nprobe"):
        ivf.nprobe = int(params["nprobe"])
    hnsw = getattr(faiss.downcast_index(index), "hnsw", None)
    if hnsw is not None and params.get("ef_search"):
        hnsw.efSearch = int(params["ef_search"])


#: Queries per encoder batch where the exported encoder serves them (onnxruntime, on the CPU).
QUERY_BATCH_CPU = 4


class DenseSearcher:
    """A dense index's FAISS index (memory-mapped) and its encoder (loaded on first use, or by :meth:`warm`)."""

    def __init__(self, directory: Path, manifest: dict[str, Any], *, backend: str = "auto", threads: int = 0,
                 device: str | None = None, encoder: str | None = None, allow_other_encoder: bool = False) -> None:
        faiss = _faiss()
        self.m = m = manifest["dense"]
        given = encoder if isinstance(encoder, Encoder) else None
        self.override = encoder if isinstance(encoder, str) else None
        self.encoder_name = given.settings.name if given else encoder or resolve_encoder(m["encoder"], Path(directory))
        self.dir = Path(directory) / DENSE_DIR
        self.device = device
        #: None when the encoder is the one the index was built with; else the digest of the one served
        #: (``allow_other_encoder``), which changes the fingerprint a server announces
        self.fingerprint_salt: str | None = None
        if given is None:  # a missing, broken or other encoder, said before the server announces anything
            check_encoder(m["encoder"], Path(directory), self.override)
            self.fingerprint_salt = check_encoder_files(m, Path(directory), self.override, device=device,
                                                        allow=allow_other_encoder)
        self.threads = threads
        try:
            self.index = faiss.read_index(str(self.dir / FAISS_INDEX), _mmap_flags(faiss))
        except RuntimeError as e:
            raise DenseError(f"{directory}: {DENSE_DIR}/{FAISS_INDEX}: FAISS cannot read it ({_faiss_message(e)})",
                             hint="build the index again with curriculum index ... --overwrite") from None
        if self.index.ntotal != manifest["passages"] or self.index.d != m["dim"]:
            raise DenseError(f"{directory}: {DENSE_DIR}/{FAISS_INDEX}: it holds {self.index.ntotal:,} vectors of "
                             f"dimension {self.index.d}, the manifest says {manifest['passages']:,} of {m['dim']}",
                             hint="build the index again with curriculum index ... --overwrite")
        check_structure(self.index, f"{directory}: {DENSE_DIR}/{FAISS_INDEX}")
        _set_params(self.index, m)
        self.l2 = metric_of(self.index, str(directory)) == "l2"  # the index's own metric, whatever was recorded
        self.vectors = float16_copy(Path(directory), manifest)
        self.refine = int(m.get("refine") or 0) if self.vectors is not None else 0
        self._encoder: Encoder | None = given
        self._lock = threading.Lock()
        self.backend = "faiss"

    @property
    def encoder(self) -> Encoder:
        with self._lock:
            if self._encoder is None:
                m = self.m
                try:
                    self._encoder = Encoder(EncoderSettings(name=self.encoder_name, query_prefix=m["query_prefix"],
                                                            passage_prefix=m["passage_prefix"], pooling=m["pooling"],
                                                            normalize=m["normalize"], max_length=m["max_length"]),
                                            device=self.device, exported=self._exported())
                except EncoderError as e:
                    # the message names the encoder given, not the one recorded; a damaged export is the index's
                    if self.override or isinstance(e, ExportError):
                        raise
                    raise EncoderError(f"the index's encoder {m['encoder']!r}: {e}", hint=MOVED_HINT) from None
                if self._encoder.dim != m["dim"]:
                    name = f"--encoder {self.override}" if self.override else f"the encoder {m['encoder']}"
                    raise EncoderError(f"{name} makes vectors of dimension {self._encoder.dim}; the index holds "
                                       f"{m['dim']}", hint="use the encoder the index was built with")
            return self._encoder

    def _exported(self) -> tuple[Path, dict[str, Any]] | None:
        """The index's ONNX export of its encoder (``dense.onnx``) when it serves the queries: recorded, its files
        there, and no other encoder given (``--encoder`` loads that one with sentence-transformers)."""
        rec = self.m.get("onnx")
        if not isinstance(rec, dict) or self.override:
            return None
        folder = self.dir / str(rec.get("folder", ONNX_FOLDER))
        missing = [f for f in (rec.get("model"), rec.get("tokenizer")) if not f or not (folder / f).is_file()]
        if missing:
            raise EncoderError(f"{folder}: the index's exported encoder {missing[0]} is not there (recorded in "
                               "its manifest.json)", hint="build the index again with curriculum index ... "
                                                          "--overwrite")
        return folder, rec

    def describe(self) -> dict[str, Any]:
        return {"kind": "dense", "encoder": self.m["encoder"], "faiss": self.m["faiss"]}

    def warm(self) -> None:
        """Load the encoder and encode one query; search with it only where a search reads a small part of the
        index (a flat index is read whole by each search: from a cold page cache, seconds per GB, which the first
        request pays, not the start-up)."""
        import numpy as np

        v = self.encode(["warm up"])
        if self.index.ntotal and not _is_flat(self.index):
            self.search_vectors(np.asarray(v), 1)

    def encode(self, queries: list[str]) -> Any:
        # on the CPU (the exported encoder's runtime), batches of a few queries: a large batch's activations leave
        # the caches (64 queries of all-MiniLM-L6-v2: 41.6 ms a query, against 14.5 ms one at a time, 18.2 by 16)
        onnx = getattr(self.encoder.model, "runtime", None) == ONNX_RUNTIME
        return self.encoder.encode(list(queries), "query", batch_size=QUERY_BATCH_CPU if onnx else 64)

    def search(self, queries: list[str], k: int, *, threads: int | None = None):
        """The ``k`` best passages of each query: (ids int32, scores float32), best first, ties by lower id."""
        import numpy as np

        n = len(queries)
        if not n or not k:
            return np.full((n, k), -1, dtype=np.int32), np.zeros((n, k), dtype=np.float32)
        return self.search_vectors(self.encode(queries), k)

    def search_vectors(self, q: Any, k: int):
        return ranked(self.index, self.vectors, self.refine, q, k, l2=self.l2)


def _is_flat(index: Any) -> bool:
    import faiss

    return isinstance(faiss.downcast_index(index), faiss.IndexFlat)


def ranked(index: Any, vectors: VectorFile | None, refine: int, q: Any, k: int, *, l2: bool = False):
    """The ``k`` best passages for query vectors ``q`` as the index serves them: FAISS's candidates (``refine * k``
    of them, re-scored exactly from the float16 ``vectors``, when ``refine``), one more than asked so that a tie at
    the cut is seen; sorted by score, ties by the lower id; ids -1 (score 0) past what was found. An L2 index
    (``l2``) ranks by ascending distance, and its score is the negated squared distance (higher is better)."""
    import numpy as np

    refine = refine if vectors is not None else 0
    kk = min(index.ntotal, k * max(1, refine) + 1)
    q = np.ascontiguousarray(q, dtype=np.float32)
    scores, ids = index.search(q, kk)
    if l2:
        scores = -scores
    if refine:  # exact scores of the candidates from the float16 vectors
        live = ids >= 0
        exact = np.full(ids.shape, -np.inf, dtype=np.float32)
        for r in range(len(q)):
            cand = ids[r][live[r]]
            block = vectors.take(cand)
            s = block @ q[r]
            if l2:
                s = 2 * s - (block * block).sum(axis=1) - q[r] @ q[r]
            if not np.isfinite(block).all():  # (read only here: the whole copy is checked by verify)
                bad = int(cand[np.flatnonzero(~np.isfinite(block).all(axis=1))[0]])
                raise DenseError(f"{vectors.path.parent.parent}: {DENSE_DIR}/{vectors.path.name}: the float16 vector "
                                 f"of passage {bad:,} is not finite (NaN or infinity), so it cannot be re-ranked",
                                 hint="the file was crafted or damaged after the index was built: build the index "
                                      "again with curriculum index ... --overwrite")
            exact[r, :len(cand)] = s
            ids[r, :len(cand)] = cand
            ids[r, len(cand):] = -1
        scores = exact
    scores = np.where(ids >= 0, scores, -np.inf)
    big = np.iinfo(np.int64).max
    order = np.lexsort((np.where(ids >= 0, ids, big), -scores), axis=1)[:, :k]
    out_ids = np.take_along_axis(ids, order, 1).astype(np.int32)
    out_scores = np.take_along_axis(scores, order, 1).astype(np.float32)
    out_scores[out_ids < 0] = 0.0
    if out_ids.shape[1] < k:
        pad = k - out_ids.shape[1]
        out_ids = np.pad(out_ids, ((0, 0), (0, pad)), constant_values=-1)
        out_scores = np.pad(out_scores, ((0, 0), (0, pad)))
    return out_ids, out_scores


def check(manifest: dict[str, Any], directory: Path) -> None:
    m = manifest.get("dense")
    if not isinstance(m, dict) or not m.get("encoder"):
        raise DenseError("the manifest has no dense section", hint="build the index again")


def verify(directory: Path, manifest: dict[str, Any]) -> None:
    """``curriculum validate``'s reading of a dense index: every vector it holds is finite (its FAISS index's, where
    they can be read, and the float16 copy's), read a block at a time."""
    faiss = _faiss()
    d = Path(directory) / DENSE_DIR
    m = manifest["dense"]
    try:
        index = faiss.read_index(str(d / FAISS_INDEX), _mmap_flags(faiss))
    except RuntimeError as e:
        raise DenseError(f"{directory}: {DENSE_DIR}/{FAISS_INDEX}: FAISS cannot read it ({_faiss_message(e)})",
                         hint="build the index again with curriculum index ... --overwrite") from None
    metric_of(index, str(directory))
    check_structure(index, f"{directory}: {DENSE_DIR}/{FAISS_INDEX}")
    check_finite(index_vectors(index, d / FAISS_INDEX), f"{directory}: {DENSE_DIR}/{FAISS_INDEX}")
    _ivf_flat_finite(index, f"{directory}: {DENSE_DIR}/{FAISS_INDEX}")
    vec = m.get("vectors")
    if vec:
        check_finite(float16_copy(Path(directory), manifest), f"{directory}: {DENSE_DIR}/{vec['file']}")
    rec = m.get("onnx")
    if isinstance(rec, dict):  # the exported encoder: the files the manifest's digests name
        for key in ("model", "tokenizer"):
            path = d / str(rec.get("folder", ONNX_FOLDER)) / str(rec.get(key))
            where = f"{directory}: {path.relative_to(directory)}"
            if not path.is_file():
                raise DenseError(f"{where}: the exported encoder's file is not there (recorded in manifest.json)",
                                 hint="build the index again with curriculum index ... --overwrite")
            if file_sha256(path) != rec.get(f"{key}_sha256" if key == "tokenizer" else "sha256"):
                raise DenseError(f"{where}: its SHA-256 is not the one manifest.json records (the file changed)",
                                 hint="build the index again with curriculum index ... --overwrite")
    # the encoder folder (or a Hub model's cached copy), where it is found here, against its recorded digests
    check_encoder_files({k: v for k, v in m.items() if k != "onnx"}, Path(directory), None)


def _builder(cfg: IndexConfig, tmp: Path, **kw: Any) -> DenseBuilder:
    return DenseBuilder(cfg, tmp, **kw)


def _open(directory: Path, manifest: dict[str, Any], *, backend: str = "auto", threads: int = 0,
          device: str | None = None, encoder: str | None = None, allow_other_encoder: bool = False) -> DenseSearcher:
    return DenseSearcher(directory, manifest, backend=backend, threads=threads, device=device, encoder=encoder,
                         allow_other_encoder=allow_other_encoder)


def summary(manifest: dict[str, Any]) -> str:
    """One line on a dense index's settings."""
    dn = manifest["dense"]
    return (f"encoder {dn['encoder']} ({dn['pooling']} pooling, prefixes {dn['query_prefix']!r} / "
            f"{dn['passage_prefix']!r}), FAISS {dn['faiss']}")


KIND = RetrieverKind("dense", builder=_builder, open=_open, check=check, manifest_keys=("dense",),
                     description="dense (sentence-transformers encoder + FAISS)", options=DenseOptions,
                     check_config=check_config, label="dense",
                     negatives="dense hard negatives (near-misses by meaning)", summary=summary, verify=verify,
                     placement=ENGINE_FIELDS)
