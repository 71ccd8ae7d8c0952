"""The index configuration: what ``curriculum index`` reads, how it tokenizes and scores, and where it writes; and
the server's (``curriculum serve``): which index, where it listens and what a request may ask."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .._settings import check_settings, rule
from ..config import bind
from ..errors import ConfigError

#: The retriever kinds (rag_curriculum.retrieval._kinds registers them).
KIND_NAMES = ("bm25", "dense", "hybrid")
#: The dense kind's options (left out of a BM25 index's recorded config).
DENSE_FIELDS = ("encoder", "query_prefix", "passage_prefix", "pooling", "normalize", "max_length", "batch_size",
                "device", "faiss", "max_memory", "seed", "train_sample", "nprobe", "ef_search", "refine", "import_faiss",
                "compress", "target_recall", "tune_queries")

#: bm25s's scoring variants the index accepts (``BM25(method=...)``; the IDF uses the same variant).
METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
#: The token pattern (bm25s's default splitter): runs of two or more word characters.
SPLITTER = r"(?u)\b\w\w+\b"


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
    target_recall: float | None = rule(None, gt=0, le=1, help=(
        "dense: the recall@10 of the exact ranking the index must reach: its search settings (IVF nprobe, HNSW "
        "efSearch, the float16 re-rank depth) are tuned at build time, the cheapest that reach it on the tuning "
        "queries (--tune-queries, else 1,000 of the corpus's own vectors, each with itself left out); a build that "
        "cannot reach it stops, saying the best it reaches. Replaces --nprobe, --ef-search and --refine."))
    tune_queries: str | None = rule(None, empty=False, help=(
        "dense, with --target-recall: the queries to tune on: a text file (one query a line, encoded with the query "
        "prefix) or a .npy file of query vectors (float32, one row a query)."))
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
            raise ConfigError(f"--kind {self.kind} needs --encoder", hint="pass --encoder NAME_OR_PATH (a "
                              "sentence-transformers model; Search-R1's is intfloat/e5-base-v2)")
        given = [f for f in ("encoder", "faiss", "max_memory", "import_faiss", "compress", "device", "target_recall",
                             "tune_queries") if getattr(self, f) is not None]
        if not dense and given:
            raise ConfigError(f"--{given[0].replace('_', '-')} is for --kind dense or hybrid, not {self.kind}",
                              hint="add --kind dense (or hybrid), or drop it")
        if self.faiss and self.max_memory:
            raise ConfigError("--faiss and --max-memory both choose the FAISS index", hint="give one of them")
        if self.tune_queries and self.target_recall is None:
            raise ConfigError("--tune-queries are the queries --target-recall is tuned on: give --target-recall too",
                              hint="e.g. --target-recall 0.95 --tune-queries questions.txt")
        if self.compress and not self.import_faiss:
            raise ConfigError("--compress turns an imported flat index into a compressed one: it needs --import-faiss",
                              hint="for an index you build, give --faiss FACTORY (or --max-memory)")
        if self.import_faiss:
            if self.kind != "dense":
                raise ConfigError("--import-faiss adopts a dense index: use --kind dense")
            if not self.corpus or self.input:
                raise ConfigError("--import-faiss adopts an index of a corpus: pass the --corpus it was built from, "
                                  "and no --input", hint="the corpus's line order is the index's vector order")
            if self.faiss or self.max_memory:
                raise ConfigError("--import-faiss keeps the index's own type; --faiss / --max-memory do not apply",
                                  hint="to change it, give --compress FACTORY")

    def dense_settings(self) -> dict[str, Any]:
        """The dense options, as recorded."""
        return {k: getattr(self, k) for k in ("encoder", "query_prefix", "passage_prefix", "pooling", "normalize",
                                              "max_length", "faiss", "max_memory", "train_sample", "nprobe",
                                              "ef_search", "refine", "import_faiss", "compress", "target_recall",
                                              "tune_queries")}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("block")  # how the build was paced, not what it made (the same bytes whatever the block)
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
