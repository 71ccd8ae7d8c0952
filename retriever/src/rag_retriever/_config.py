"""The index configuration: what ``curriculum index`` reads, how it tokenizes and scores, and where it writes; and
the server's (``curriculum serve``): which index, where it listens and what a request may ask."""

from __future__ import annotations

import dataclasses
import logging
import typing
from dataclasses import asdict, dataclass
from typing import Any

from rag_plumbing._settings import bind, check_settings, ray_address_rule, rule, setting_flag

from ._encoder import check_device
from ._kinds import BUILTIN, ENTRY_POINTS, KINDS, get_kind, kind_names, kinds_using, loaded_kinds
from .errors import ConfigError, SettingError, UsageError

log = logging.getLogger(__name__)

@dataclass
class _Where:
    """What an index is made from and where it goes (the first options of every index)."""

    dataset: str | None = rule(None, flag="--dataset", empty=False, help=(
        "hotpotqa | musique | 2wikimultihopqa: the dataset --input holds."))
    input: str | None = rule(None, flag="--input", empty=False, help=(
        "The dataset file whose paragraphs are indexed (every distinct title + text once) and whose questions "
        "get their rankings stored, read by the toolkit's loader. Optional with --corpus."))
    corpus: str | None = rule(None, flag="--corpus", empty=False, help=(
        "Passages to index, after the dataset's: a JSONL file of {\"title\", \"text\"} lines, or {\"id\", \"contents\"} "
        "lines with the title on the first line of contents (FlashRAG's and Search-R1's Wikipedia layout). Every "
        "line is one passage, in line order, keeping its own id and contents (what the server returns)."))
    kind: str = rule("bm25", choices=kind_names, help=(
        "The retriever: bm25 (bm25s) | dense (a sentence-transformers encoder and a FAISS index) | hybrid (both, "
        "fused by reciprocal rank) | a kind an installed package registers."))
    out: str = rule("outputs/index", flag="--out", empty=False, help="Index directory to write.")


@dataclass
class _Search:
    """How the dataset's questions are ranked, whatever the kind (after the default kind's options, as recorded
    since the first index)."""

    depth: int = rule(100, ge=1, le=10_000, help=(
        "Passages ranked and stored per question of --input (what builds draw BM25 distractors and retrieved "
        "passages from without retrieving again)."))
    threads: int = rule(0, ge=0, le=1024, help="Retrieval threads (bm25s n_threads); 0: one per CPU.")
    backend: str = rule("auto", choices=("auto", "numpy", "numba"), help=(
        "BM25 search backend: auto (numba when installed: compiled once per machine and cached; else numpy) | "
        "numpy | numba. The rankings are the same."))


@dataclass
class _Run:
    """How the build runs (the last options)."""

    block: int = rule(1 << 16, ge=256, le=1 << 24, help=(
        "Passages per block of the build: read, tokenized and scored (BM25) or encoded (dense) a block at a time. "
        "The build holds one block besides the vocabulary, so a smaller block bounds its memory (the index's bytes "
        "are the same whatever the block)."))
    on_error: str = rule("raise", choices=("raise", "skip"), help=(
        "raise | skip bad source records (skips are counted and reported)."))
    overwrite: bool = rule(False, help="Replace an existing index of this toolkit.")


class _IndexConfigMethods:
    """The methods of :class:`IndexConfig` (whose fields are assembled from the kinds below)."""

    #: The kind that declares each kind option (``k1``: ``bm25``); set on the assembled class.
    option_owner: dict[str, str] = {}

    def __post_init__(self) -> None:
        check_settings(self, error=SettingError)

    def validate(self) -> None:
        check_settings(self, error=SettingError)
        if not self.input and not self.corpus:
            raise ConfigError("nothing to index", hint="pass --dataset NAME --input FILE (a dataset file), "
                              "--corpus FILE.jsonl (a corpus), or both")
        self._check_kind()
        if bool(self.dataset) != bool(self.input):
            raise ConfigError("--dataset and --input go together (the dataset a file holds)" if self.input else
                              f"--dataset {self.dataset} without --input: which file?",
                              hint="pass both --dataset NAME and --input FILE, or neither (a corpus alone)")

    def _check_kind(self) -> None:
        """Options of another kind are refused (each kind's options are its own and those of the kinds it uses),
        then the kind runs its own checks, and those of the kinds it uses."""
        kind = get_kind(self.kind)
        missing = [n for n in kind.option_names() if n not in self.option_owner]
        if missing:
            raise ConfigError(f"retriever kind {kind.name!r} declares option(s) {', '.join(missing)} that "
                              "IndexConfig was assembled without (it was registered after rag_retriever "
                              "was imported)", hint=f"register it through the entry point group {ENTRY_POINTS}, "
                              "read at that import, or declare no options of its own")
        used = {kind.name, *kind.uses}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            owner = self.option_owner.get(f.name)
            if owner is None or owner in used or _unchanged(f, getattr(self, f.name)):
                continue
            users = kinds_using(owner)
            also = f" (or {', '.join(users[1:])})" if users[1:] else ""
            flag = setting_flag(f) or f.name
            raise UsageError(f"{flag} is for --kind {' or '.join(users)}, not {self.kind}",
                              hint=f"add --kind {users[0]}{also}, or drop it")
        for name in (*kind.uses, kind.name):
            check = get_kind(name).check_config
            if check is not None:
                check(self)

    def to_dict(self) -> dict[str, Any]:
        """The configuration an index's manifest records: every option but ``block`` (how the build was paced, not
        what it made: the same bytes whatever the block) and the kinds' placement options (where the work ran:
        ``--engine ray``), less the options of kinds this kind does not use."""
        kind = get_kind(self.kind)
        used = {kind.name, *kind.uses}
        unrecorded = {"block", *placement_fields()}
        return {k: v for k, v in asdict(self).items()  # type: ignore[call-overload]
                if k not in unrecorded and self.option_owner.get(k, kind.name) in used}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Any:
        return bind(cls, d, error=UsageError)


def placement_fields() -> tuple[str, ...]:
    """The options of every registered kind that say where a build's work runs (``engine``, ``num_workers``, ...:
    a kind's ``placement``), never recorded."""
    return tuple(dict.fromkeys(name for kind in loaded_kinds() for name in kind.placement))


def placement_flags() -> tuple[str, ...]:
    """Their command-line flags (``--engine``, ``--num-workers``, ...), left out of the command a manifest records.

    >>> "--engine" in placement_flags() and "--ray-address" in placement_flags()
    True
    """
    return tuple(f"--{name.replace('_', '-')}" for name in placement_fields())


def _unchanged(f: dataclasses.Field, value: Any) -> bool:
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return value == default


def _fields(cls: type) -> list[tuple[str, Any, dataclasses.Field]]:
    """``cls``'s fields as :func:`dataclasses.make_dataclass` takes them (name, resolved type, a fresh field)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        kw: dict[str, Any] = {"metadata": f.metadata}
        if f.default_factory is not dataclasses.MISSING:
            kw["default_factory"] = f.default_factory
        else:
            kw["default"] = f.default
        out.append((f.name, hints[f.name], dataclasses.field(**kw)))
    return out


def _assemble() -> type:
    """IndexConfig: the options every index has, then each registered kind's own (:mod:`._kinds`, in registration
    order; the default kind's first, then the ranking options, as the manifests have always recorded them), then
    how the build runs; and which kind owns each kind option. A kind an installed package declares whose options
    collide with another's is left out with a warning (the toolkit's own never collide).

    >>> from rag_retriever import IndexConfig
    >>> cfg = IndexConfig(dataset="musique", input="f.jsonl")
    >>> cfg.bm25, cfg.option_owner["k1"], cfg.option_owner["encoder"], cfg.option_owner["rrf_k"]
    ('auto', 'bm25', 'dense', 'hybrid')
    >>> list(cfg.to_dict())[5:10]   # a BM25 index records no dense or hybrid option
    ['k1', 'b', 'method', 'delta', 'stopwords']
    """
    head, tail = _fields(_Where), [*_fields(_Search), *_fields(_Run)]
    default = _Where.__dataclass_fields__["kind"].default
    kinds = sorted(loaded_kinds(), key=lambda k: k.name != default)  # stable: registration order otherwise
    taken = {name for name, _, _ in head + tail}
    owner: dict[str, str] = {}
    own: list[tuple[str, Any, dataclasses.Field]] = []
    for kind in kinds:
        fields = _fields(kind.options) if kind.options is not None else []
        clash = sorted(name for name, _, _ in fields if name in taken)
        if clash:
            if kind.name in BUILTIN:
                raise TypeError(f"retriever kind {kind.name!r}: option(s) {', '.join(clash)} already taken")
            log.warning("retriever kind %r left out: its option(s) %s are another's", kind.name, ", ".join(clash))
            KINDS.drop(kind.name)
            continue
        taken.update(name for name, _, _ in fields)
        owner.update((name, kind.name) for name, _, _ in fields)
        own += fields
        if kind.name == default:
            own += _fields(_Search)
    rest = [f for f in tail if f[0] not in {name for name, _, _ in own}]
    cls = dataclasses.make_dataclass("IndexConfig", [*head, *own, *rest], bases=(_IndexConfigMethods,),
                                     namespace={"__module__": __name__, "option_owner": owner})
    cls.__doc__ = ("Everything that determines an index: where it reads and writes, the options of its kind (each "
                   "kind's declared in its module), how its questions are ranked and how the build runs. Recorded "
                   "in the index's manifest.")
    return cls


def __getattr__(name: str) -> Any:
    """``IndexConfig``, assembled from the registered kinds (:func:`_assemble`) the first time it is asked for:
    after :mod:`rag_retriever` has been imported whole, so a kind's module (an installed package's too)
    may import from it."""
    if name == "IndexConfig":
        globals()["IndexConfig"] = cls = _assemble()
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class ServeConfig:
    """Everything ``curriculum serve`` takes: the index, where the server listens, its processes and the limits of
    a request (:func:`rag_retriever._server.make_app`'s). Its fields are the command's options."""

    index: str = rule(flag="--index", empty=False, help="Index directory made by curriculum index.")
    host: str = rule("127.0.0.1", empty=False, help=(
        "Address to listen on (0.0.0.0: every interface; there is no authentication, so only on a trusted "
        "network)."))
    port: int = rule(8000, ge=1, le=65535, help="Port to listen on.")
    workers: int = rule(0, ge=0, le=256, help=(
        "Server processes, forked after the index is loaded, so that they share it (one copy in memory), each "
        "listening on a socket of its own on the port (SO_REUSEPORT); 0: one per CPU."))
    engine: str = rule("uvicorn", choices=("uvicorn", "ray"), help=(
        "uvicorn (this machine's processes, --workers) | ray (Ray Serve: --replicas across a Ray cluster, behind "
        "Ray Serve's HTTP proxy; the same protocol and answers)."))
    replicas: int = rule(1, ge=1, le=4096, help="--engine ray: the servers Ray Serve runs (across the cluster).")
    ray_address: str | None = ray_address_rule()
    replica_cpus: float = rule(1.0, ge=0, le=1024, help="--engine ray: CPUs each replica reserves.")
    replica_gpus: float = rule(0.0, ge=0, le=64, help=(
        "--engine ray: GPUs each replica reserves (a dense index's encoder then runs on it)."))
    max_batch: int = rule(512, ge=1, le=1_000_000, help=(
        "The most queries one request may carry; a larger batch gets a 422 saying so."))
    max_topk: int = rule(100, ge=1, le=1_000_000, help=(
        "The largest topk a request may ask (a list never holds more than the index's passages)."))
    default_topk: int = rule(3, ge=1, le=1_000_000, help="topk of a request that gives none (Search-R1's default).")
    max_results: int = rule(8192, ge=1, le=1 << 30, help=(
        "The most passages one request may ask for (its queries times its topk, topk counted up to the index's "
        "passages); a larger request gets a 422 saying so. It bounds a response's size (about 1.5 KB a passage "
        "on wiki-18) and how long one request holds the others back."))
    max_body_bytes: int = rule(8 * 1024 * 1024, ge=1024, le=1 << 34, help=(
        "The largest request body in bytes; a larger one gets a 413 before it is read."))
    max_query_chars: int = rule(4096, ge=1, le=1 << 24, help=(
        "The longest query in characters; a longer one gets a 422 saying so."))
    threads: int = rule(0, ge=0, le=1024, help="BM25 threads per retrieval batch; 0: one per CPU.")
    encoder: str | None = rule(None, empty=False, help=(
        "A dense or hybrid index: the encoder's folder, when it is not where the index's manifest says."))
    device: str | None = rule(None, empty=False, help=(
        "A dense or hybrid index: the encoder's device (default: cuda when there is one)."))
    allow_other_encoder: bool = rule(False, help=(
        "A dense or hybrid index: serve with an --encoder whose files are not the ones the index was built with "
        "(refused otherwise); the server then announces another fingerprint, so a client that recorded the "
        "index's sees the change."))
    verify: bool = rule(False, help=(
        "Check what curriculum validate checks before serving: every file hashed against its manifest (by "
        "default small files and the BM25 postings are hashed whole, larger files sampled), the passages' digest, "
        "their keys and the fingerprint recomputed from the files (the server then announces that one), the BM25 "
        "postings decoded whole, the stored rankings ranked again; a changed file is refused, naming it."))
    in_memory: bool | None = rule(None, help=(
        "Read the index whole into memory rather than mapping its files (--no-in-memory maps them; a mapped "
        "index's files are held with a read lease, so files copied over it (cp) wait for the searches in flight). "
        "Default: mapped where the files can be leased (Linux, a local filesystem, not --engine ray), else in "
        "memory when they take at most a quarter of this machine's memory."))
    max_connections: int = rule(1024, ge=16, le=1 << 20, help=(
        "The most open connections (kept below the descriptor limit); one more closes the idle connection heard "
        "from least recently (waiting for a request's headers or body, or between requests)."))
    header_timeout: float = rule(10.0, gt=0, le=3600, help=(
        "Seconds a connection may take to send a complete request line and headers before it is closed."))
    body_timeout: float = rule(20.0, gt=0, le=3600, help=(
        "Seconds a request may take to send its body once its headers are in, plus one second per "
        "--min-body-rate bytes received; past it the request gets a 408 and the connection is closed."))
    min_body_rate: int = rule(500, ge=1, le=1 << 30, help=(
        "Bytes per second a slow request body must keep up to earn more time than --body-timeout."))
    access_log: bool = rule(False, help="Log every request (uvicorn's access log; secrets in query strings masked).")

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        check_settings(self, error=SettingError)
        check_device(self.device)
        if self.max_topk < self.default_topk:
            raise ConfigError(f"--default-topk {self.default_topk} is above --max-topk {self.max_topk}",
                              hint="raise --max-topk or lower --default-topk")
        if self.engine != "ray" and (self.replicas != 1 or self.ray_address or self.replica_gpus
                                     or self.replica_cpus != 1.0):
            raise ConfigError("--replicas, --ray-address, --replica-cpus and --replica-gpus are for --engine ray",
                              hint="add --engine ray, or use --workers for processes on this machine")
        if self.engine == "ray" and self.workers > 1:
            raise ConfigError("--workers is for --engine uvicorn; Ray Serve runs --replicas",
                              hint="give --replicas N instead")

    def limits(self) -> dict[str, int]:
        """The limits of a request, as :func:`~rag_retriever._server.make_app` takes them."""
        return {"max_batch": self.max_batch, "max_topk": self.max_topk, "default_topk": self.default_topk,
                "max_results": self.max_results, "max_body_bytes": self.max_body_bytes,
                "max_query_chars": self.max_query_chars}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ServeConfig:
        return bind(cls, d, error=UsageError)
