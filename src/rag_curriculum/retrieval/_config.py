"""The index configuration: what ``curriculum index`` reads, how it tokenizes and scores, and where it writes; and
the server's (``curriculum serve``): which index, where it listens and what a request may ask."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from .._settings import check_settings, rule
from ..config import bind
from ..errors import ConfigError, UsageError
from ._encoder import check_device

#: The retriever kinds (rag_curriculum.retrieval._kinds registers them).
KIND_NAMES = ("bm25", "dense", "hybrid")
#: The dense kind's options (left out of a BM25 index's recorded config).
DENSE_FIELDS = ("encoder", "query_prefix", "passage_prefix", "pooling", "normalize", "max_length", "batch_size",
                "device", "faiss", "max_memory", "seed", "train_sample", "nprobe", "ef_search", "refine", "import_faiss",
                "compress")
#: Where a dense index's passages are encoded (``--engine ray``): placement, not identity (never recorded).
ENGINE_FIELDS = ("engine", "ray_address", "num_workers", "gpus_per_worker", "cpus_per_worker")

#: bm25s's scoring variants the index accepts (``BM25(method=...)``; the IDF uses the same variant).
METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
#: The token pattern (bm25s's default splitter): runs of two or more word characters.
SPLITTER = r"(?u)\b\w\w+\b"


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


@dataclass
class IndexConfig:
    """Everything that determines an index. Recorded in the index's manifest."""

    dataset: str | None = rule(None, flag="--dataset", empty=False, help=(
        "hotpotqa | musique | 2wikimultihopqa: the dataset --input holds."))
    input: str | None = rule(None, flag="--input", empty=False, help=(
        "The dataset file whose paragraphs are indexed (every distinct title + text once) and whose questions "
        "get their rankings stored, read by the toolkit's loader. Optional with --corpus."))
    corpus: str | None = rule(None, flag="--corpus", empty=False, help=(
        "Passages to index, after the dataset's: a JSONL file of {\"title\", \"text\"} lines, or {\"id\", \"contents\"} "
        "lines with the title on the first line of contents (FlashRAG's and Search-R1's Wikipedia layout). Every "
        "line is one passage, in line order, keeping its own id and contents (what the server returns)."))
    kind: str = rule("bm25", choices=KIND_NAMES, help=(
        "The retriever: bm25 (bm25s) | dense (a sentence-transformers encoder and a FAISS index) | hybrid (both, "
        "fused by reciprocal rank)."))
    out: str = rule("outputs/index", flag="--out", empty=False, help="Index directory to write.")
    k1: float = rule(1.5, ge=0, le=100, help="BM25 k1 (term-frequency saturation); bm25s's default.")
    b: float = rule(0.75, ge=0, le=1, help="BM25 b (length normalisation); bm25s's default.")
    method: str = rule("lucene", choices=METHODS, help=(
        "BM25 variant (bm25s method): lucene (default) | robertson | atire | bm25l | bm25+."))
    delta: float = rule(0.5, ge=0, le=100, help="delta of the bm25l and bm25+ variants (ignored by the others).")
    stopwords: str = rule("en", choices=("en", "none"), help=(
        "Stop words dropped by the tokenizer: en (bm25s's English list) | none."))
    depth: int = rule(100, ge=1, le=10_000, help=(
        "Passages ranked and stored per question of --input (what builds draw BM25 distractors and retrieved "
        "passages from without retrieving again)."))
    threads: int = rule(0, ge=0, le=1024, help="Retrieval threads (bm25s n_threads); 0: one per CPU.")
    backend: str = rule("auto", choices=("auto", "numpy", "numba"), help=(
        "BM25 search backend: auto (numba when installed: compiled once per machine and cached; else numpy) | "
        "numpy | numba. The rankings are the same."))
    # -- dense and hybrid
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
        "dense: with a compressed index (PQ, SQ), score the refine * k best candidates again exactly from the "
        "float16 vectors (0: no re-ranking)."))
    import_faiss: str | None = rule(None, empty=False, help=(
        "dense: adopt this FAISS index (Search-R1's or FlashRAG's e5_Flat.index) over --corpus, without encoding: "
        "the corpus's line order is the index's vector order."))
    compress: str | None = rule(None, empty=False, help=(
        "dense, with --import-faiss of a flat index: build this compressed index (a factory string) from its "
        "vectors, read a block at a time, and report recall@10 against the exact ranking."))
    engine: str = rule("local", choices=("local", "ray"), help=(
        "dense / hybrid: where the passages are encoded: local (this process) | ray (Ray Data: shards of passages "
        "streamed to encoder actors on a Ray cluster's CPUs or GPUs, each shard's vectors kept as it finishes, a "
        "stopped run resumed from them; the same index as local)."))
    ray_address: str | None = rule(None, empty=False, help=(
        "--engine ray: the cluster (auto, HOST:6379, ray://HOST:10001). Unset: $RAY_ADDRESS if set, else a local "
        "cluster started for the run."))
    num_workers: int | None = rule(None, ge=1, le=1_000_000, help=(
        "--engine ray: encoder actors, each loading the encoder once. Unset: one per GPU of the cluster, else one "
        "per --cpus-per-worker CPUs."))
    gpus_per_worker: float | None = rule(None, ge=0, le=64, help=(
        "--engine ray: GPUs per encoder actor (the encoder runs on cuda there). Unset: 1 when the cluster has "
        "GPUs, else 0."))
    cpus_per_worker: float = rule(1.0, ge=0.01, le=1024, help="--engine ray: CPUs per encoder actor.")
    rrf_k: int = rule(60, ge=0, le=1_000_000, help="hybrid: reciprocal rank fusion's k (1 / (k + rank)).")
    rrf_depth: int = rule(100, ge=1, le=1_000_000, help="hybrid: how deep each ranking is fused.")
    block: int = rule(1 << 16, ge=256, le=1 << 24, help=(
        "Passages per block of the build: read, tokenized and scored (BM25) or encoded (dense) a block at a time. "
        "The build holds one block besides the vocabulary, so a smaller block bounds its memory (the index's bytes "
        "are the same whatever the block)."))
    on_error: str = rule("raise", choices=("raise", "skip"), help=(
        "raise | skip bad source records (skips are counted and reported)."))
    overwrite: bool = rule(False, help="Replace an existing index of this toolkit.")

    def __post_init__(self) -> None:
        check_settings(self)

    def validate(self) -> None:
        check_settings(self)
        if not self.input and not self.corpus:
            raise ConfigError("nothing to index", hint="pass --dataset NAME --input FILE (a dataset file), "
                              "--corpus FILE.jsonl (a corpus), or both")
        self._check_kind()
        if bool(self.dataset) != bool(self.input):
            raise ConfigError("--dataset and --input go together (the dataset a file holds)" if self.input else
                              f"--dataset {self.dataset} without --input: which file?",
                              hint="pass both --dataset NAME and --input FILE, or neither (a corpus alone)")

    def _check_kind(self) -> None:
        dense = self.kind in ("dense", "hybrid")
        if dense and not self.encoder:
            raise UsageError(f"--kind {self.kind} needs --encoder", hint="pass --encoder NAME_OR_PATH (a "
                             "sentence-transformers model; Search-R1's is intfloat/e5-base-v2)")
        if dense:  # a bad value of a dense option is a usage error, found before any model loads
            check_device(self.device)
            if self.max_memory is not None:
                parse_bytes(self.max_memory)
        given = [f for f in ("encoder", "faiss", "max_memory", "import_faiss", "compress", "device")
                 if getattr(self, f) is not None]
        if not dense and given:
            raise UsageError(f"--{given[0].replace('_', '-')} is for --kind dense or hybrid, not {self.kind}",
                             hint="add --kind dense (or hybrid), or drop it")
        if self.faiss and self.max_memory:
            raise UsageError("--faiss and --max-memory both choose the FAISS index", hint="give one of them")
        if self.compress and not self.import_faiss:
            raise UsageError("--compress turns an imported flat index into a compressed one: it needs --import-faiss",
                             hint="for an index you build, give --faiss FACTORY (or --max-memory)")
        self._check_engine(dense)
        if self.import_faiss:
            if self.kind != "dense":
                raise UsageError("--import-faiss adopts a dense index: use --kind dense")
            if not self.corpus or self.input:
                raise UsageError("--import-faiss adopts an index of a corpus: pass the --corpus it was built from, "
                                 "and no --input", hint="the corpus's line order is the index's vector order")
            if self.faiss or self.max_memory:
                raise UsageError("--import-faiss keeps the index's own type; --faiss / --max-memory do not apply",
                                 hint="to change it, give --compress FACTORY")

    def _check_engine(self, dense: bool) -> None:
        ray_given = [f"--{f.replace('_', '-')}" for f in ENGINE_FIELDS[1:] if getattr(self, f) != getattr(type(self), f)]
        if self.engine != "ray":
            if ray_given:
                raise UsageError(f"{', '.join(ray_given)} only apply to --engine ray",
                                 hint="add --engine ray (with --kind dense or hybrid), or leave them out")
            return
        if not dense:
            raise UsageError("--engine ray encodes a dense index's passages on a Ray cluster; a BM25 index has none "
                             "to encode", hint="add --kind dense (or hybrid) --encoder NAME, or drop --engine ray")
        if self.import_faiss:
            raise UsageError("--import-faiss encodes nothing (the vectors exist): --engine ray does not apply",
                             hint="drop --engine ray")

    def dense_settings(self) -> dict[str, Any]:
        """The dense options, as recorded."""
        return {k: getattr(self, k) for k in ("encoder", "query_prefix", "passage_prefix", "pooling", "normalize",
                                              "max_length", "faiss", "max_memory", "train_sample", "nprobe",
                                              "ef_search", "refine", "import_faiss", "compress")}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("block")  # how the build was paced, not what it made (the same bytes whatever the block)
        for k in ENGINE_FIELDS:  # where the passages were encoded, not what was made (the same bytes)
            d.pop(k, None)
        if self.kind == "bm25":  # a BM25 index's record as it always was
            for k in DENSE_FIELDS:
                d.pop(k, None)
        if self.kind != "hybrid":
            d.pop("rrf_k", None)
            d.pop("rrf_depth", None)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> IndexConfig:
        return bind(cls, d)

    def tokenizer_info(self) -> dict[str, Any]:
        """The tokenizer, as the manifest records it (queries are tokenized the same way)."""
        return {"library": "bm25s", "class": "bm25s.tokenization.Tokenizer", "lower": True,
                "splitter": SPLITTER, "stopwords": None if self.stopwords == "none" else self.stopwords,
                "stemmer": None, "fields": "title + ' ' + text"}

    def bm25_params(self) -> dict[str, Any]:
        return {"k1": self.k1, "b": self.b, "method": self.method, "idf_method": self.method, "delta": self.delta,
                "dtype": "float32"}


@dataclass
class ServeConfig:
    """Everything ``curriculum serve`` takes: the index, where the server listens, its processes and the limits of
    a request (:func:`rag_curriculum.retrieval._server.make_app`'s). Its fields are the command's options."""

    index: str = rule(flag="--index", empty=False, help="Index directory made by curriculum index.")
    host: str = rule("127.0.0.1", empty=False, help=(
        "Address to listen on (0.0.0.0: every interface; there is no authentication, so only on a trusted "
        "network)."))
    port: int = rule(8000, ge=1, le=65535, help="Port to listen on.")
    workers: int = rule(1, ge=1, le=256, help=(
        "Server processes (uvicorn workers), each with the index memory-mapped: the matrix and passages are "
        "shared through the page cache."))
    engine: str = rule("uvicorn", choices=("uvicorn", "ray"), help=(
        "uvicorn (this machine's processes, --workers) | ray (Ray Serve: --replicas across a Ray cluster, behind "
        "Ray Serve's HTTP proxy; the same protocol and answers)."))
    replicas: int = rule(1, ge=1, le=4096, help="--engine ray: the servers Ray Serve runs (across the cluster).")
    ray_address: str | None = rule(None, empty=False, help=(
        "--engine ray: the cluster to join (auto: the one `ray start --head` made here); default: a local one."))
    replica_cpus: float = rule(1.0, ge=0, le=1024, help="--engine ray: CPUs each replica reserves.")
    replica_gpus: float = rule(0.0, ge=0, le=64, help=(
        "--engine ray: GPUs each replica reserves (a dense index's encoder then runs on it)."))
    max_batch: int = rule(512, ge=1, le=1_000_000, help=(
        "The most queries one request may carry; a larger batch gets a 422 saying so."))
    max_topk: int = rule(100, ge=1, le=1_000_000, help=(
        "The largest topk a request may ask (a list never holds more than the index's passages)."))
    default_topk: int = rule(3, ge=1, le=1_000_000, help="topk of a request that gives none (Search-R1's default).")
    max_body_bytes: int = rule(8 * 1024 * 1024, ge=1024, le=1 << 34, help=(
        "The largest request body in bytes; a larger one gets a 413 before it is read."))
    max_query_chars: int = rule(4096, ge=1, le=1 << 24, help=(
        "The longest query in characters; a longer one gets a 422 saying so."))
    threads: int = rule(0, ge=0, le=1024, help="BM25 threads per retrieval batch; 0: one per CPU.")
    encoder: str | None = rule(None, empty=False, help=(
        "A dense or hybrid index: the encoder's folder, when it is not where the index's manifest says."))
    device: str | None = rule(None, empty=False, help=(
        "A dense or hybrid index: the encoder's device (default: cuda when there is one)."))
    max_connections: int = rule(1024, ge=16, le=1 << 20, help=(
        "The most open connections (kept below the descriptor limit); one more closes the one that has waited "
        "longest without a complete request."))
    header_timeout: float = rule(10.0, gt=0, le=3600, help=(
        "Seconds a connection may take to send a complete request line and headers before it is closed."))
    access_log: bool = rule(False, help="Log every request (uvicorn's access log).")

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        check_settings(self)
        check_device(self.device)
        if self.max_topk < self.default_topk:
            raise ConfigError(f"--default-topk {self.default_topk} is above --max-topk {self.max_topk}",
                              hint="raise --max-topk or lower --default-topk")
        if self.engine != "ray" and (self.replicas != 1 or self.ray_address or self.replica_gpus
                                     or self.replica_cpus != 1.0):
            raise ConfigError("--replicas, --ray-address, --replica-cpus and --replica-gpus are for --engine ray",
                              hint="add --engine ray, or use --workers for processes on this machine")
        if self.engine == "ray" and self.workers != 1:
            raise ConfigError("--workers is for --engine uvicorn; Ray Serve runs --replicas",
                              hint="give --replicas N instead")

    def limits(self) -> dict[str, int]:
        """The limits of a request, as :func:`~rag_curriculum.retrieval._server.make_app` takes them."""
        return {"max_batch": self.max_batch, "max_topk": self.max_topk, "default_topk": self.default_topk,
                "max_body_bytes": self.max_body_bytes, "max_query_chars": self.max_query_chars}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ServeConfig:
        return bind(cls, d)
