"""An index over a dataset's paragraphs and/or a corpus: build, save, load (memory-mapped), retrieve, whatever its
retriever kind (``--kind bm25``, the default; the kinds are modules beside this one, :mod:`._kinds`).

An index directory holds::

    manifest.json      what made it: kind, sources and their checksums, the kind's settings, counts, every other
                       file's size and SHA-256 (:mod:`._integrity`), the content fingerprint (:mod:`._fingerprint`)
                       and what it is made of, its own digest (written last)
    passages.bin       the passage store (:mod:`._store`): title, text, origin, a corpus line's own id and contents
                       prefix, in small compressed blocks; memory-mapped when loaded
    norms.bin          the passages' normalised texts (what a build's answer test searches), compressed
    passage_keys.npy   per passage, a 64-bit hash of its normalised title and text (:func:`passage_hash`)
    questions.arrow    the dataset file's questions (id, question, gold: the passage ids of its gold paragraphs)
    ranked_ids.npy     per question, the ids of its ``depth`` best passages, best first (int32)
    ranked_scores.npy  their scores (float32)
    bm25/              the BM25 kind's files: bm25s's own save (``BM25.save``) and its vocabulary as Arrow

It is written into a hidden temporary folder beside the target and renamed into place at the end, so a reader
never sees a half-written index. Passages stream through the build in blocks (:mod:`._corpus`): the kind's builder
takes each block in this process while a forked worker reads the sources again and writes the passage store and
the inputs' checksums (one CPU each; the passages' hashes are made in this process, which has them in hand, so the
two take about as long); ranking the dataset's questions waits for both. Ties in score are broken by
the lower passage id, so rankings are deterministic.

Every reader checks the files against the manifest when it opens the index (:class:`CorpusIndex`, ``check``: the
sizes, small files and the kind's native files hashed whole, large ones sampled, the fingerprint recomputed from the
records; ``full``: every file hashed), and :meth:`CorpusIndex.verify` (``curriculum validate``, ``serve --verify``,
``load_index(verify=True)``) recomputes the passages' digest, their keys and the fingerprint from the files, has the
kind read its files whole, and ranks the stored rankings again (every one up to :data:`RERANKED` questions). An open
holds its files open and says what it read of them (:meth:`CorpusIndex.check_line`); :meth:`CorpusIndex.changed`
names one written since (a server refuses to read it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_plumbing import (
    SideTask,
    _protocol,
    file_sha256,
    gc_paused,
    maybe_progress,
    portable_command,
    portable_path,
    sha256_file,
)
from rag_plumbing._commit import (
    OutputKind,
    check_output,
    commit_output,
    exclusive,
    lock_beside,
    prepare_output,
)

from ._corpus import Sources, passage_blocks
from ._datasets import dataset_reader
from ._fingerprint import index_fingerprint
from ._integrity import (
    REBUILD,
    Damaged,
    IndexError_,
    check_files,
    coverage,
    coverage_line,
    record,
    records,
    save_npy,
    seal,
    sealed,
)
from ._kinds import get_kind
from ._store import (
    KEYS,
    NORMS,
    PASSAGES,
    QUESTIONS,
    RANKED_IDS,
    RANKED_SCORES,
    PassageStore,
    StoreWriter,
    normalize_passage,
    passage_hash,
    passages_sha256,
)
from ._version import __version__
from .errors import RetrieverError, SettingError

if TYPE_CHECKING:
    from ._config import IndexConfig

log = logging.getLogger(__name__)

KIND = "index"
FORMAT = 6  # 2: passage_keys.npy; 3: the norm column, questions' gold ids; 4: kinds, doc_id / prefix, streamed;
#            5: compressed BM25 postings and the lucene preset; compressed passages (passages.bin, norms.bin);
#            the content fingerprint; 6: every file's SHA-256, what the fingerprint is made of, the manifest's own
#            digest
MANIFEST = "manifest.json"
CHUNK = 4096  # queries per ranking step
#: The files of every index, whatever its kind (the rest are the kind's own).
STORE = (PASSAGES, NORMS, KEYS, QUESTIONS, RANKED_IDS, RANKED_SCORES)
#: How many stored rankings ``curriculum validate`` (and ``verify``) ranks again, spread over the questions: every
#: one of an index of up to this many questions; ``validate --full`` ranks every one of any index.
RERANKED = 2000


#: The loggers of reading the sources (the records ``--on-error skip`` left out, the loaders' notes): the store's
#: second reading of the same sources keeps them quiet, so each line is said once.
REREAD_LOGGERS = ("rag_retriever._corpus",)


@contextmanager
def _unsaid(names: tuple[str, ...]) -> Iterator[None]:
    """The loggers ``names`` (and their children) say only errors inside the block."""
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _write_store(tmp: Path, cfg: IndexConfig, dataset: str | None) -> dict[str, Any]:
    """The passage store (the passages and questions, their normalised texts; the hashes aside: the builder's
    process makes them) and the inputs' checksums, from the sources read again (in the forked worker: the same
    blocks, in the same order, as the builder's)."""
    writer = StoreWriter(tmp, ("passages", "norms"))
    found = Sources()
    try:
        loggers = (*REREAD_LOGGERS, *getattr(dataset_reader(), "loggers", ())) if dataset else REREAD_LOGGERS
        with _unsaid(loggers):  # the builder's reading of the same sources says what they hold
            for block in passage_blocks(dataset, cfg.input, cfg.corpus, on_error=cfg.on_error, found=found,
                                        block=cfg.block):
                writer.add(block)
        writer.finish(found.q_ids, found.q_texts, found.q_gold)
    except BaseException:
        writer.abort()
        raise
    return {"input": sha256_file(Path(cfg.input)) if cfg.input else None,
            "corpus": sha256_file(Path(cfg.corpus)) if cfg.corpus else None, "rows": writer.rows,
            "digest": writer.digest, "files": writer.sha256}


def build_index(cfg: IndexConfig, *, progress: bool = False, command: str | None = None) -> dict[str, Any]:
    """Read, index, rank the dataset's questions and save; return the manifest (with ``seconds``: the time spent
    reading + indexing, finishing the kind's files, waiting for the passage store, and ranking; the file does not
    record them). The cyclic garbage collector is paused meanwhile: the passages are millions of acyclic objects,
    which its full collections would walk again and again.

    ``curriculum index`` calls this; the output is written in a hidden folder and moved into place whole.

    Args:
        cfg: the index's settings (dataset and input, corpus, kind, ``out``, the kind's own options).
        progress: show progress bars.
        command: the command line recorded in the manifest.

    Returns:
        The manifest written (``manifest.json``), with ``seconds``.

    Raises:
        ConfigError: settings that cannot be used together, or a value out of range.
        RetrievalIndexError: ``cfg.out`` is not an index of this toolkit (or not empty, without ``overwrite``),
            another run is writing it, or the corpus cannot be indexed as asked.
        UnknownNameError: an unknown dataset or retriever kind.
        DataError: a dataset or corpus record that cannot be read.

    Examples:
        ```python
        from rag_retriever import IndexConfig, build_index

        manifest = build_index(IndexConfig(dataset="musique", input="musique_ans_v1.0_dev.jsonl",
                                           out="indexes/musique-dev"))   # BM25, the dataset's own paragraphs
        ```
    """
    out = Path(cfg.out)
    check_output(out, overwrite=cfg.overwrite, kind=OUTPUT)  # refused before anything is read
    # a second `curriculum index` to the same --out is refused at once
    with exclusive(lock_beside(out, "index"), out, "index", IndexError_, remove=True), gc_paused():
        tmp = prepare_output(out, overwrite=cfg.overwrite, kind=OUTPUT)
        try:
            return _build_index(cfg, tmp, progress=progress, command=command)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # what is left of it when the build failed


def _build_index(cfg: IndexConfig, tmp: Path, *, progress: bool, command: str | None) -> dict[str, Any]:
    import numpy as np

    cfg.validate()
    dataset = dataset_reader().name(cfg.dataset) if cfg.dataset else None
    cfg.dataset = dataset
    kind = get_kind(cfg.kind)
    out = Path(cfg.out)
    t0 = time.perf_counter()
    side = builder = None
    try:
        side = SideTask(lambda: _write_store(tmp, cfg, dataset), "index: passages, normalised texts, checksums")
        found = Sources()
        keys = StoreWriter(tmp, ("keys",))  # the passages' hashes, here: the worker has more to do per passage
        builder = kind.builder(cfg, tmp, progress=progress, out=out)
        verb = getattr(builder, "verb", "reading and indexing")
        with maybe_progress(progress, unit="passages") as bar:
            task = bar.add_task(f"{verb} passages", total=None) if bar else None
            builder.progress = (lambda n: bar.advance(task, n)) if bar is not None else None
            for block in passage_blocks(dataset, cfg.input, cfg.corpus, on_error=cfg.on_error, found=found,
                                        block=cfg.block):
                builder.add(block)
                keys.add(block)
        keys.finish()
        if not found.passages:
            raise IndexError_(f"{cfg.input or cfg.corpus}: no passage to index", hint="check --dataset, --input "
                              "and --corpus")
        t1 = time.perf_counter()
        if hasattr(builder, "questions"):  # a dense kind tunes --target-recall on them by default
            builder.questions = found.q_texts
        with maybe_progress(progress, unit="passages") as bar:
            task = bar.add_task(f"finishing the {kind.name} index", total=None) if bar else None
            facts = builder.finish(bar=bar, task=task)
        t2 = time.perf_counter()
        sums = side.result()  # before ranking, which uses every CPU
        if sums["rows"] != found.passages:  # the two readings of the sources must agree
            raise IndexError_(f"the passage store holds {sums['rows']:,} passages, the {kind.name} index "
                              f"{found.passages:,}: the sources changed while they were read",
                              hint="build again once the input files no longer change")
        # every file's SHA-256: made as it was written where the writer let the bytes through (the store, the
        # hashes, a dense index's vectors and FAISS file), else read now (the BM25 postings, as the fingerprint
        # always read them)
        digests = {**sums["files"], **keys.sha256, **(getattr(builder, "digests", None) or {})}
        kind_files = {}
        for p in sorted(tmp.rglob("*")):
            rel = p.relative_to(tmp).as_posix()
            if p.is_file() and rel not in (*STORE, MANIFEST):
                kind_files[rel] = digests.get(rel) or file_sha256(p)
        fingerprint = index_fingerprint(kind.name, facts, sums["digest"], kind_files)
        t3 = time.perf_counter()
        depth = min(cfg.depth, found.passages)
        head = {"passages": found.passages, "questions": len(found.q_ids), "depth": depth, "retriever": kind.name,
                **facts}
        # the builder's encoder, already loaded (a dense kind's queries are encoded as its passages were)
        searcher = kind.open(tmp, head, backend=cfg.backend, threads=cfg.threads,
                             encoder=getattr(builder, "query_encoder", None))
        n = len(found.q_texts)
        ids = np.full((n, depth), -1, dtype=np.int32)
        scores = np.zeros((n, depth), dtype=np.float32)
        with maybe_progress(progress, unit="queries") as bar:
            task = bar.add_task("ranking questions", total=n) if bar else None
            for start in range(0, n, CHUNK):
                got_ids, got_scores = searcher.search(found.q_texts[start:start + CHUNK], depth)
                ids[start:start + len(got_ids)] = got_ids
                scores[start:start + len(got_ids)] = got_scores
                if bar is not None:
                    bar.advance(task, len(got_ids))
        empty = int((ids[:, 0] < 0).sum()) if n and depth else 0
        t4 = time.perf_counter()
        digests.update({RANKED_IDS: save_npy(tmp / RANKED_IDS, ids), RANKED_SCORES: save_npy(tmp / RANKED_SCORES,
                                                                                             scores)})
        digests.update(kind_files)
        files = {p.relative_to(tmp).as_posix(): record(p, digests.get(p.relative_to(tmp).as_posix()))
                 for p in sorted(tmp.rglob("*")) if p.is_file()}
        sources = []
        if dataset:
            sources.append({"kind": "dataset", "dataset": dataset, "input": Path(cfg.input).name,
                            "path": portable_path(cfg.input, out), "sha256": sums["input"],
                            "questions": len(found.q_ids), "paragraphs": found.paragraphs, "distinct": found.distinct,
                            "skipped": dict(found.report.counts)})
        if cfg.corpus:
            sources.append({"kind": "corpus", "input": Path(cfg.corpus).name, "path": portable_path(cfg.corpus, out),
                            "sha256": sums["corpus"], "lines": found.corpus_lines,
                            **({"skipped": dict(found.corpus_report.counts)} if found.corpus_report.total else {})})
        recorded = cfg.to_dict()
        recorded.update(input=portable_path(cfg.input, out) if cfg.input else None, out=out.name,
                        corpus=portable_path(cfg.corpus, out) if cfg.corpus else None)
        for key in ("import_faiss", "tune_queries"):  # the dense kind's input files
            if recorded.get(key):
                recorded[key] = portable_path(recorded[key], out)
        if recorded.get("encoder") and os.path.isdir(str(recorded["encoder"])):  # a local folder: as dense.encoder
            recorded["encoder"] = Path(os.path.relpath(os.path.abspath(recorded["encoder"]),
                                                       os.path.abspath(out))).as_posix()
        manifest = {
            "kind": KIND, "format": FORMAT, "retriever": kind.name,
            "toolkit": {"name": "rag-retriever", "version": __version__}, "dataset": dataset, "config": recorded,
            "command": portable_command(command, out) if command else command, "sources": sources,
            **facts, "passages": found.passages, "depth": depth, "questions": len(found.q_ids),
            "empty_queries": empty, "files": files, "fingerprint": fingerprint,
            # what the fingerprint is made of, so that every reader recomputes it from the records above
            "content": {"passages": sums["digest"], "settings": sorted(facts), "files": sorted(kind_files)},
        }
        manifest = seal(manifest)  # its own digest, last
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
        commit_output(tmp, out, overwrite=cfg.overwrite, kind=OUTPUT)
    except BaseException:
        if side is not None:
            side.cancel()
        if builder is not None and hasattr(builder, "abort"):
            builder.abort()  # a kind's own clean-up (a Ray cluster it started; its resumable work stays)
        raise
    if hasattr(builder, "committed"):
        builder.committed()  # the index is in place: a kind's resumable work (a Ray encoding's shards) goes
    log.info("indexed %d passages (%d questions ranked) in %.1fs", found.passages, len(found.q_ids), t4 - t0)
    # timings are returned, not written: the same inputs make the same index, byte for byte
    return {**manifest, "seconds": {"read_index": round(t1 - t0, 2), "finish": round(t2 - t1, 2),
                                    "wait": round(t3 - t2, 2), "rank": round(t4 - t3, 2)},
            **({"encoding": builder.encoding} if getattr(builder, "encoding", None) else {})}


def _close_fds(fds: list[int]) -> None:
    import os

    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _mismatch(manifest: Any) -> str | None:
    if isinstance(manifest, dict) and manifest.get("kind") in (KIND, "bm25-index"):
        return None
    return "that is not an index's (kind 'index')"


def _owned(directory: Path, manifest: dict[str, Any]) -> set[str]:
    """The files an index's manifest says the toolkit wrote (its ``files``), of an index's layout only
    (:func:`_layout`)."""
    files = manifest.get("files")
    names = {str(n) for n in files} if isinstance(files, (dict, list)) else set()
    return {n for n in names if n and not Path(n).is_absolute() and ".." not in Path(n).parts and _layout(n)}


#: The names an index's files take at its top (the passage store's, of this format and the first ones').
_TOP = frozenset({MANIFEST, PASSAGES, NORMS, QUESTIONS, RANKED_IDS, RANKED_SCORES, KEYS, "passages.arrow",
                  "norms.arrow", "docs.arrow"})


def _layout(name: str) -> bool:
    """Whether ``name`` (a relative POSIX path) is one an index's writer writes: a store file at its top, or a file
    in a kind's folder (``bm25/``, ``dense/``, a registered kind's by its name). A manifest that lists another file does not make it the toolkit's."""
    head, _, rest = name.partition("/")
    if name in _TOP or (rest and head in ("bm25", "dense")):
        return True
    try:  # a registered kind's files are in a folder of its name (a kind of a package: ``toy/words.json``)
        return bool(rest) and get_kind(head) is not None
    except RetrieverError:
        return False


#: An index as the commit protocol sees it (:mod:`rag_plumbing._commit`): its manifest (kind ``index``, or the
#: first format's ``bm25-index``) owns the files it lists; a killed build of an earlier version left ``.OUT.tmp-*``.
OUTPUT = OutputKind("an index of this toolkit", _mismatch, _owned, error=IndexError_,
                    orphans=("partial", "old", "tmp"), layout=_layout)


@dataclass
class Ranking:
    """One question's ranking: passage ids (best first) and their scores; for a question of the indexed file, the
    passage ids of its gold paragraphs as the index read them."""

    ids: Any
    scores: Any
    gold: list[int] | None = None


class CorpusIndex(PassageStore):
    """A loaded index: its passage store and stored rankings memory-mapped (:class:`._store.PassageStore`), and its
    retriever kind's searcher, opened on first use (``backend``, ``threads``, ``device`` and ``encoder``, another
    copy of a dense index's encoder, are the kind's options; ``allow_other_encoder`` serves a dense index with an
    encoder other than its own, under another fingerprint, and opens the searcher at once).
    ``retrieve`` / ``retrieve_many`` rank passages for new questions; ``stored`` / ``rankings`` give the stored
    rankings of the indexed dataset's questions.

    ``check``: how the files are checked against the manifest before anything is read (:mod:`._integrity`):
    ``open`` (the default: sizes, small files and the kind's native files hashed whole, large files sampled, the
    fingerprint recomputed from the records), ``full`` (every file hashed: ``serve --verify``, ``validate``) or
    ``sizes`` (``validate --quick``). A file that fails is one line naming it."""

    def __init__(self, directory: str | Path, *, backend: str = "auto", threads: int = 0,
                 device: str | None = None, encoder: str | None = None, check: str = "open",
                 allow_other_encoder: bool = False, verify: bool = False) -> None:
        d = Path(directory)
        self.path = d
        self.manifest = m = read_index_manifest(d, kind_check=False)
        if verify:
            check = "full"
        self._open_files()  # before anything is read: a change from here on is seen (changed())
        try:
            self.kind = get_kind(m.get("retriever", ""))
        except RetrieverError as e:
            raise IndexError_(f"{d}: {e}", hint=getattr(e, "hint", None)) from None
        try:
            self.digests = check_index_files(d, m, check, native=self.kind.native)
        except Damaged as e:
            raise IndexError_(f"{d}: {e}", hint=f"{REBUILD} (curriculum validate DIR checks every file)") from None
        #: what the open read of each recorded file (1.0: hashed whole; else the fraction its sampled chunks cover)
        self.coverage = coverage(m["files"], check, self.kind.native)
        self.check = check
        _kind_check(m, d)  # (it may read the kind's files: after they were checked)
        problems = self._open_store(d, m)
        if problems:
            raise IndexError_(f"{d}: the index does not match its manifest: " + "; ".join(problems), hint=REBUILD)
        self._options = {"backend": backend, "threads": threads, "device": device, "encoder": encoder}
        if allow_other_encoder:  # (only then: a kind of a package may not know the option)
            self._options["allow_other_encoder"] = True
        self._searcher: Any = None
        #: what :meth:`verify` checked (``verify=True``), with the fingerprint it computed from the files
        self.verified: dict[str, Any] | None = None
        self._keys_ok: Any = None  # the passages whose keys :meth:`check_keys` recomputed
        if allow_other_encoder:
            self.searcher  # noqa: B018  (opened now: its encoder checked, so the fingerprint is the served one)
        if verify:  # (another encoder ranks otherwise than the stored rankings: those are not ranked again)
            self.verify(rerank=0 if allow_other_encoder else RERANKED)
        # said where a file was read in part (where every file was hashed whole there is nothing to add)
        log.log(logging.INFO if min(self.coverage.values(), default=1.0) < 1.0 else logging.DEBUG, "%s",
                self.check_line())

    def _open_files(self) -> None:
        """Hold each recorded file (and the manifest) open, with its inode, size, modification and status change
        times: what :meth:`changed` compares. Held, not looked up by path again, so an index replaced whole (``mv``, ``curriculum
        index --overwrite``, which rename) is not a change: the files this one mapped are still there, unchanged."""
        import os
        import weakref

        self._fds: dict[str, int] = {}
        files = self.manifest.get("files")
        for name in [MANIFEST, *(sorted(_owned(self.path, self.manifest)) if isinstance(files, dict) else ())]:
            try:  # (non-blocking: a name that is a FIFO does not hang the open; records() refuses it after)
                self._fds[name] = os.open(self.path / name, os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                continue  # (a missing file is refused by the checks that follow)
        weakref.finalize(self, _close_fds, list(self._fds.values()))
        self._stats = {name: self._fstat(fd) for name, fd in self._fds.items()}

    @staticmethod
    def _fstat(fd: int) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
        """(inode, size, modification time, status change time) and (links, mode, owner, group) of a file."""
        import os

        st = os.fstat(fd)
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns), (st.st_nlink, st.st_mode, st.st_uid, st.st_gid)

    def changed(self) -> str | None:
        """The first of the index's files (relative to it) written since the index was opened (its size,
        modification time or status change time changed: rewritten in place, as ``cp`` over it does, even of the
        same size with its modification time set back, ``cp --preserve=timestamps`` or ``os.utime``: the kernel
        sets the status change time on every write and utime, and no call sets it back), with what changed; None
        when none was. A status change time moved along with the file's links, mode or owner alone (its old folder
        deleted after an ``mv`` or ``--overwrite``, a ``cp -al`` backup, a ``chmod``) is that change, taken as the
        file's new state: a rewrite between two checks that also changed those would go unseen. An ``fstat`` a file
        (about a microsecond each): a server asks before each batch it answers, so that a file rewritten under its
        memory maps is refused, never read."""
        for name, fd in self._fds.items():
            got, meta = self._fstat(fd)
            was, was_meta = self._stats[name]
            if meta != was_meta and got[:3] == was[:3]:  # (linked, unlinked, chmod, chown: the bytes untouched)
                self._stats[name] = (got, meta)
                continue
            if got == was:
                continue
            what = [w for w, a, b in zip(("inode", "size", "modification time", "status change time"), was, got,
                                         strict=True) if a != b]
            return f"{name} (its {' and '.join(what)} changed)"
        return None

    def check_line(self) -> str:
        """One line on what opening the index checked: the files hashed whole, the fraction of each large file
        sampled, and what ``verify`` (``curriculum serve --verify``, ``load_index(verify=True)``) adds."""
        what = coverage_line(self.coverage, self.manifest["files"])
        if self.verified is not None:
            v = self.verified
            return (f"checked (--verify): {what}; the passages' digest, their {v['keys']:,} keys and the fingerprint "
                    f"{v['fingerprint'][:16]}... recomputed from the files, {v['reranked']:,} of {v['questions']:,} "
                    "stored rankings ranked again")
        sampled = any(f < 1.0 for f in self.coverage.values())
        return (f"checked at open: {what}; {'the rest unread, ' if sampled else ''}the passages' digest not "
                "recomputed: --verify (load_index(verify=True)) hashes every file and recomputes it")

    @property
    def searcher(self) -> Any:
        """The kind's searcher (:mod:`._kinds`), opened on first use."""
        if self._searcher is None:
            try:
                self._searcher = self.kind.open(self.path, self.manifest, **self._options)
            except RetrieverError as e:
                raise IndexError_(str(e), hint=getattr(e, "hint", None)) from None
        return self._searcher

    @property
    def backend(self) -> str:
        return getattr(self.searcher, "backend", self._options["backend"])

    def warm(self) -> None:
        """Open the searcher and run one query (compile, load models, touch the files)."""
        self.searcher.warm()

    def verify(self, *, rerank: int | None = RERANKED) -> dict[str, Any]:
        """What ``curriculum validate`` checks beyond an open (best on an index opened with ``check="full"``): the
        passages' digest recomputed from ``passages.bin`` (so the fingerprint, recomputed from the records at open,
        is recomputed from the files); the kind's own reading of its files (a dense index's vectors all finite,
        its encoder's files), which may read them whole; and ``rerank`` of the stored rankings, spread over the
        questions, ranked again and compared (a stored ranking the index does not make is refused, naming the
        question). Returns what was checked."""
        d, m = self.path, self.manifest
        try:
            got = passages_sha256(d / PASSAGES)
        except ValueError as e:
            raise IndexError_(f"{d}: {e}", hint=REBUILD) from None
        if got != m["content"]["passages"]:
            raise IndexError_(f"{d}: {PASSAGES}: its passages are not the ones the fingerprint was made of (their "
                              "digest differs from the manifest's content.passages)", hint=REBUILD)
        keys = self._check_keys()
        if self.kind.verify is not None:
            try:
                self.kind.verify(d, m)
            except RetrieverError as e:
                raise IndexError_(str(e), hint=getattr(e, "hint", None)) from None
        content = m["content"]
        whole = self.digests if self.check == "full" else check_index_files(d, m, "full", native=self.kind.native)
        fp = index_fingerprint(m.get("retriever", ""), {k: m.get(k) for k in content["settings"]}, got,
                               {n: whole[n] for n in content["files"]})
        if fp != m["fingerprint"]:  # (the records were checked against the files: a difference means a bug)
            raise IndexError_(f"{d}: {MANIFEST}: the fingerprint made from the files ({fp[:16]}...) is not the one it "
                              "records", hint=REBUILD)
        self.verified = {"reranked": self._check_rankings(rerank), "questions": len(self._q_ids), "keys": keys,
                         "fingerprint": fp}
        return self.verified

    def check_stored(self, rows: Any) -> None:
        """Rank these stored questions (rows of ``questions.arrow``) again and compare with their stored rankings,
        as ``curriculum validate`` does (:meth:`verify`): a stored ranking the index does not make is refused,
        naming the question. What a build calls before it uses stored rankings (:meth:`rankings`): it costs
        ranking those questions again, about what the index's own ranking of them cost."""
        import numpy as np

        rows = np.unique(np.asarray(rows, dtype=np.int64))
        if not len(rows) or not self.depth:
            return
        texts = self._q()[0]
        for lo in range(0, len(rows), CHUNK):
            self._check_ranked_rows(rows[lo:lo + CHUNK], texts, self.depth)

    def check_keys(self, pids: Any, keys: Any = None) -> None:
        """Recompute the key (:func:`passage_hash` of the title and text) of each of these passages not checked
        before in this process, and compare with ``keys`` (default: ``passage_keys.npy``; a reader's copy of it in
        memory): a key that differs is refused, naming the passage, as ``curriculum validate`` refuses it. What a
        reader calls before it compares or shows passages by key: it costs reading and hashing each passage once
        (about 30 microseconds a passage), never the whole index."""
        import numpy as np

        pids = np.asarray(pids, dtype=np.int64).reshape(-1)
        if self._keys_ok is None:
            self._keys_ok = np.zeros(len(self), dtype=bool)
        pids = pids[pids >= 0]
        todo = np.unique(pids[~self._keys_ok[pids]])
        if not len(todo):
            return
        want = np.asarray((self.keys if keys is None else keys)[todo])
        got = np.fromiter((passage_hash(t, x) for t, x, *_ in self.rows(todo)), dtype=np.int64, count=len(todo))
        bad = np.flatnonzero(got != want)
        if len(bad):
            i = int(todo[bad[0]])
            raise IndexError_(f"{self.path}: {KEYS}: passage {i}'s key {int(want[bad[0]])} is not the hash of its "
                              f"title and text ({int(got[bad[0]])}): the keys do not match the passages",
                              hint=REBUILD)
        self._keys_ok[todo] = True

    def _check_keys(self, block: int = 4096) -> int:
        """Every passage's key in ``passage_keys.npy`` recomputed from its title and text (:func:`passage_hash`); a
        key that differs is refused, naming the passage. The number checked."""
        import numpy as np

        n = len(self)
        for start in range(0, n, block):
            rows = self.rows(range(start, min(n, start + block)))
            got = np.fromiter((passage_hash(t, x) for t, x, *_ in rows), dtype=np.int64, count=len(rows))
            want = np.asarray(self.keys[start:start + len(rows)])
            bad = np.flatnonzero(got != want)
            if len(bad):
                i = start + int(bad[0])
                raise IndexError_(f"{self.path}: {KEYS}: passage {i}'s key {int(want[bad[0]])} is not the hash of "
                                  f"its title and text ({int(got[bad[0]])}): the keys do not match the passages",
                                  hint=REBUILD)
        return n

    def _check_rankings(self, sample: int) -> int:
        """Rank ``sample`` of the stored questions again (spread evenly) and compare with ``ranked_ids.npy`` /
        ``ranked_scores.npy``: the same ids in the same order, where scores tie within float rounding either order;
        the number ranked."""
        import numpy as np

        n, depth = len(self._q_ids), self.depth
        if not n or not depth or sample == 0:
            return 0
        every = sample is None or sample >= n
        rows = np.arange(n) if every else np.unique(np.linspace(0, n - 1, sample).round().astype(np.int64))
        texts = self._q()[0]
        for lo in range(0, len(rows), CHUNK):
            self._check_ranked_rows(rows[lo:lo + CHUNK], texts, depth)
        return len(rows)

    def _check_ranked_rows(self, rows: Any, texts: list[str], depth: int) -> None:
        import numpy as np

        ids, scores = self.retrieve_many([texts[r] for r in rows], depth)
        for i, r in enumerate(rows.tolist()):
            s_ids = np.asarray(self.ranked_ids[r])
            s_scores = np.asarray(self.ranked_scores[r], dtype=np.float64)
            got = scores[i].astype(np.float64)
            tol = 1e-4 * np.maximum(1.0, np.abs(s_scores))
            bad = np.flatnonzero(~(np.abs(got - s_scores) <= tol))  # (NaN compares false: it differs)
            if not len(bad):  # the same scores: the same passages above the last score (ties there may differ)
                above = s_scores > s_scores[-1] + tol[-1]
                if set(s_ids[above].tolist()) != set(ids[i][got > s_scores[-1] + tol[-1]].tolist()):
                    bad = np.flatnonzero(above & (s_ids != ids[i]))[:1]
                    bad = bad if len(bad) else np.flatnonzero(above)[:1]
            if len(bad):
                j = int(bad[0])
                raise IndexError_(
                    f"{self.path}: {RANKED_IDS}: the stored ranking of question {self._q_ids[r]!r} (row {r}) is not "
                    f"what the index ranks for it (at rank {j + 1}: passage {int(s_ids[j])} scored "
                    f"{float(s_scores[j]):.6g} stored, passage {int(ids[i][j])} scored {float(got[j]):.6g} "
                    "ranked now): the stored rankings do not match the index", hint=REBUILD)

    # -- facts
    @property
    def dataset(self) -> str | None:
        return self.manifest["dataset"]

    @property
    def retriever(self) -> str:
        return self.manifest["retriever"]

    @property
    def depth(self) -> int:
        return int(self.manifest["depth"])

    def __len__(self) -> int:
        return int(self.manifest["passages"])

    @property
    def fingerprint(self) -> str:
        """The index's identity: a digest of what determines its answers (its passages, its kind, the kind's
        analysis and scoring parameters and files: :mod:`._fingerprint`), not of where it is or the command that
        built it; recorded in the manifest at build and recomputed from its records at open. The server sends it
        with every answer, so a client notices an index swapped behind a URL, and a rebuild of the same corpus
        elsewhere is the same index. Served with another encoder (``allow_other_encoder``), it is another: the
        SHA-256 of the recorded one and that encoder's digest."""
        salt = getattr(self._searcher, "fingerprint_salt", None) if self._searcher is not None else None
        fp = self.verified["fingerprint"] if self.verified else self.manifest["fingerprint"]  # computed, if verified
        return fp if not salt else hashlib.sha256(f"{fp}\0encoder\0{salt}".encode()).hexdigest()

    def describe(self, out: str | Path | None = None) -> dict[str, Any]:
        """What a build's manifest records about the index it used: where, what it holds, its kind's settings."""
        m = self.manifest
        keys = [k for k in self.kind.manifest_keys if k not in ("backend", "vocab_size")]
        return {"path": portable_path(str(self.path), out) if out else str(self.path), "dataset": m["dataset"],
                "passages": m["passages"], "depth": m["depth"], "retriever": m["retriever"],
                **{k: m.get(k) for k in keys},
                "sources": [{k: s.get(k) for k in ("kind", "input", "sha256")} for s in m["sources"]]}

    def indexed(self, dataset: str, sha256: str | None) -> bool:
        """Whether this index was built from that very file (same dataset, same SHA-256) by this toolkit version:
        then its questions' gold passage ids are that file's gold paragraphs as the same loader reads them."""
        return bool(sha256) and (self.manifest.get("toolkit") or {}).get("version") == __version__ and any(
            s.get("kind") == "dataset" and s.get("dataset") == dataset and s.get("sha256") == sha256
            for s in self.manifest["sources"])

    def gold_keys(self, ex: Any, pids: list[int] | None = None) -> list[int] | None:
        """The passage hashes of the example's gold paragraphs (in document order) from the index, when the index
        holds its question (same id and text) with the same gold paragraphs; None otherwise (then hash them).
        ``pids``: the gold passage ids of its :class:`Ranking`, when already looked up."""
        if pids is None:
            row = self._q_row.get(ex.id)
            if row is None or self._q()[0][row] != ex.question:
                return None
            pids = self._q()[1][row]
        gold = [d for d in ex.documents if d.is_gold]
        if len(pids) != len(gold):
            return None
        for pid, d in zip(pids, gold, strict=True):
            if self.passage(pid) != (d.title, d.text):
                return None
        self.check_keys(pids)
        return self.keys[pids].tolist() if pids else []

    # -- rankings
    def stored(self, qid: str, question: str) -> Ranking | None:
        """The stored ranking of question ``qid`` of the indexed file (None when the index has no such question,
        or its text differs: then it was another file's question)."""
        row = self._q_row.get(qid)
        if row is None or self._q()[0][row] != question:
            return None
        return Ranking(self.ranked_ids[row], self.ranked_scores[row])

    def retrieve_many(self, questions: list[str], k: int | None = None, *, threads: int | None = None):
        """The ``k`` (default: the index's depth) best passages of each question: (ids, scores) arrays, one row per
        question, best first, ties by lower id; ids -1 where the question has no indexed token. ``k = 0`` gives no
        passages (rows of length 0); a negative ``k`` is refused (:func:`check_k`)."""
        import numpy as np

        k = min(self.depth if k is None else check_k(k), len(self))
        if k == 0:
            return np.zeros((len(questions), 0), np.int32), np.zeros((len(questions), 0), np.float32)
        return self.searcher.search(list(questions), k, threads=threads)

    def retrieve(self, question: str, k: int = 10) -> list[tuple[int, float]]:
        """The ``k`` best (passage id, score) pairs for one question, best first (none for ``k = 0``)."""
        ids, scores = self.retrieve_many([question], k, threads=1)
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i >= 0]

    def rankings(self, examples: list[Any], *, progress: bool = False, check: bool = True) -> dict[str, Ranking]:
        """The ranking of each example (keyed by id): the stored one when the index has the question, else
        retrieved now, all the missing ones in one batch. ``check``: the stored ones used are ranked again first
        (:meth:`check_stored`), so a stored ranking ``curriculum validate`` refuses is refused here too."""
        import numpy as np

        out: dict[str, Ranking] = {}
        missing, found, rows = [], [], []
        texts, golds = self._q() if examples else ([], [])
        for ex in examples:
            row = self._q_row.get(ex.id)
            if row is None or texts[row] != ex.question:
                missing.append(ex)
            else:
                found.append(ex)
                rows.append(row)
        if rows and check:
            self.check_stored(rows)
        if rows:  # one read of the mapped rankings, into memory
            ids = np.asarray(self.ranked_ids[np.asarray(rows)])
            scores = np.asarray(self.ranked_scores[np.asarray(rows)])
            for i, (ex, row) in enumerate(zip(found, rows, strict=True)):
                out[ex.id] = Ranking(ids[i], scores[i], golds[row])
        if missing:
            log.info("retrieving for %d question(s) not ranked in the index", len(missing))
            ids, scores = self.retrieve_many([ex.question for ex in missing], max(self.depth, 1))
            for i, ex in enumerate(missing):
                out[ex.id] = Ranking(ids[i], scores[i])
        return out


def read_index_manifest(directory: str | Path, *, kind_check: bool = True) -> dict[str, Any]:
    """An index's manifest, refused when it is not one this toolkit reads (another kind of output, another format,
    edited after the build: its own digest differs) and, with ``kind_check``, when its kind refuses it (another
    library version, saved parameters that differ)."""
    d = Path(directory)
    if not d.is_dir():
        raise IndexError_(f"{d}: no such index directory",
                          hint="build one with curriculum index --dataset NAME --input FILE --out DIR")
    p = d / MANIFEST
    if not p.is_file():
        raise IndexError_(f"{d}: no {MANIFEST}, so it is not an index, or its writing did not finish",
                          hint="build it with curriculum index --dataset NAME --input FILE --out DIR")
    try:
        m = json.loads(p.read_text())
    except ValueError as e:
        raise IndexError_(f"{p}: invalid JSON ({e})", hint="build the index again") from None
    kind = m.get("kind") if isinstance(m, dict) else None
    if kind == "bm25-index":
        raise IndexError_(f"{d}: an index of an earlier version of the toolkit (format {m.get('format')})",
                          hint="build it again with this version: curriculum index ... --overwrite")
    if kind is None:
        raise IndexError_(f"{p}: names no kind: it is damaged, or this toolkit did not write it",
                          hint="build the index again into a new --out (curriculum index ...)")
    if kind != KIND:
        raise IndexError_(f"{d}: not an index of this toolkit (manifest kind {kind!r})",
                          hint="pass the --out of curriculum index")
    if m.get("format") != FORMAT:
        raise IndexError_(f"{d}: index format {m.get('format')!r}; this toolkit reads {FORMAT}",
                          hint="build the index again with this version")
    if not sealed(m):
        raise IndexError_(f"{p}: its own digest (manifest_sha256) is not that of its contents: it was edited or "
                          "damaged after the index was built", hint=REBUILD)
    if kind_check:
        _kind_check(m, d)
    return m


def _kind_check(m: dict[str, Any], d: Path) -> None:
    try:
        get_kind(m.get("retriever", "")).check(m, d)
    except RetrieverError as e:
        raise IndexError_(f"{d}: {e}", hint=getattr(e, "hint", None)) from None


def check_index_files(directory: Path, m: dict[str, Any], level: str = "open",
                      native: tuple[str, ...] = ()) -> dict[str, str]:
    """The index's files against the manifest ``m`` at ``level`` (:func:`._integrity.check_files`), after its
    records: every file of :data:`STORE` and of the fingerprint recorded, and the fingerprint recomputed from them
    (a forged one, or one of other files, is refused). The SHA-256 of each file hashed whole; :class:`Damaged`."""
    files = records(m, STORE)
    if level == "sizes":
        return check_files(directory, files, "sizes")
    content = m.get("content")
    if (not isinstance(content, dict) or not isinstance(content.get("files"), list)
            or not isinstance(content.get("settings"), list) or not isinstance(content.get("passages"), str)):
        raise Damaged(MANIFEST, "no 'content' record of what its fingerprint is made of")
    for name in content["files"]:
        if name not in files:
            raise Damaged(MANIFEST, f"'files' leaves out {name}, a file its fingerprint covers")
    settings = {k: m.get(k) for k in content["settings"]}
    fp = index_fingerprint(m.get("retriever", ""), settings, content["passages"],
                           {n: files[n]["sha256"] for n in content["files"]})
    if fp != m.get("fingerprint"):
        raise Damaged(MANIFEST, "its fingerprint is not the one its records make (forged, or the records changed)")
    return check_files(directory, files, level, native=native)


def check_k(k: Any) -> int:
    """``k``, the number of passages a search asks for, as an int: 0 or more (0: no passages), else a
    :class:`~rag_retriever.errors.SettingError` (a ``ValueError``); the same rule for every kind and the HTTP
    client (:func:`rag_plumbing._protocol.check_k`)."""
    return _protocol.check_k(k, error=SettingError)


def load_index(directory: str | Path, **kw: Any) -> CorpusIndex:
    """Open an index built by ``curriculum index``, its files checked against the manifest first.

    Args:
        directory: the index directory.
        **kw: :class:`CorpusIndex`'s options (``check``, ``backend``, ``threads``, ``device``, ``encoder``,
            ``allow_other_encoder``).

    Returns:
        The index: ``retrieve`` / ``retrieve_many`` rank passages for new questions, ``stored`` / ``rankings`` give
        the indexed questions' stored rankings, ``passage`` / ``documents`` the passages.

    Raises:
        RetrievalIndexError: not an index of this toolkit, another format, an unknown kind, or files that do not
            match the manifest (the changed file named).

    Examples:
        ```python
        from rag_retriever import load_index

        ix = load_index("indexes/musique-dev")
        ix.retrieve("Who founded the company that makes the iPhone?", k=5)   # [(passage id, score), ...]
        ```
    """
    return CorpusIndex(directory, **kw)


__all__ = ["FORMAT", "KEYS", "KIND", "MANIFEST", "PASSAGES", "QUESTIONS", "RANKED_IDS", "RANKED_SCORES",
           "CorpusIndex", "IndexError_", "Ranking", "build_index", "check_k", "load_index", "normalize_passage",
           "passage_hash", "read_index_manifest"]
