"""``curriculum index --kind dense --engine ray``: a dense index's passages encoded through Ray Data, on a Ray cluster's
CPUs or GPUs, each shard of vectors written as it finishes, a stopped run resumed from them.

**How.** This process (the driver) reads the passages as any build does (the same blocks, the same order) and cuts
each block into shards of ``16 * 8 * --batch-size`` passages; every shard not yet encoded goes to Ray's object store
as an Arrow table (spilled to disk beyond the store's memory). Ray Data streams them to a pool of encoder actors
(``map_batches`` with an actor class: ``--num-workers`` actors, each holding ``--cpus-per-worker`` CPUs and
``--gpus-per-worker`` GPUs, each loading the encoder once); an actor encodes its shard in exactly the calls a local
build makes (``8 * --batch-size`` passages at a time), so the vectors are the local build's. The vectors come back
to the driver, which writes each shard whole (atomically) into a work folder beside the index as soon as its last
row arrives; when every shard is there, they are joined in passage order and the build goes on as a local one
(the FAISS index, the float16 copy, the manifest), and the work folder is removed once the index is in place.

**Resume.** The work folder is ``.NAME.encoding/`` beside ``--out NAME`` (never where the index is expected):
``encoding.json`` records what the vectors depend on (the encoder and its settings but the query prefix, the batch
size, the block), and each finished shard is ``shard-NNNNNN.f32`` (float32 rows) with ``shard-NNNNNN.json`` (its
rows, the SHA-256 of its passages' texts and of its vectors). The same command after a stop (Ctrl-C, a lost driver,
a failed node) encodes only the shards that are not there, and again, with a warning naming it, a shard whose
vectors are not those written. A shard whose passages differ from those it was encoded from (the corpus changed),
or other settings, are refused in one line naming the work folder: remove it to start over.

**No shared filesystem.** Only the driver reads the sources and writes files; passages and vectors travel through
Ray. Every node needs the toolkit and the encoder (a local folder at the same path on each node, or a Hub name each
can load). An address nothing answers, and workers no node can hold, are refused in seconds (Ray would wait for
either without end)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_plumbing import (
    atomic_write_bytes,
    atomic_write_text,
    connect_ray,
    file_sha256,
    require_resources,
    shutdown_ray,
)

from ._encoder import Encoder, EncoderError, EncoderSettings
from .errors import EngineError, RetrieverError

if TYPE_CHECKING:
    from ._config import IndexConfig

log = logging.getLogger(__name__)

#: A shard is this many encoder calls (each ``8 * --batch-size`` passages, as a local build makes them).
SHARD_STEPS = 16
#: The work folder's format.
FORMAT = 1
#: Encoder settings that shape queries only: a resume ignores them (the passages' vectors do not depend on them).
QUERY_ONLY = ("query_prefix",)


class EncodingError(RetrieverError):
    """A Ray encoding that cannot start or resume as asked."""


def work_dir(out: Path) -> Path:
    """The work folder of the index ``out``: hidden, beside it."""
    return out.with_name(f".{out.name}.encoding")


def _digest(texts: list[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        b = t.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


class _ShardEncoder:
    """The Ray Data actor: loads the encoder once; each batch (one shard) is encoded in the local build's calls."""

    def __init__(self, settings: dict[str, Any], device: str, batch_size: int, step: int,
                 exported: tuple[str, dict[str, Any]] | None = None) -> None:
        if exported and not os.path.isfile(os.path.join(exported[0], exported[1]["model"])):
            exported = None  # another node, not sharing the driver's disk: the model itself (within 1e-6)
        self.encoder = Encoder(EncoderSettings(**settings), device=device, exported=exported)
        self.batch_size, self.step = batch_size, step
        self.worker = f"{os.uname().nodename}:{os.getpid()}"

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        real = np.flatnonzero(batch["pid"] >= 0)  # a shard's padding rows (pid -1) are dropped
        shard, row, pid = batch["shard"][real], batch["row"][real], batch["pid"][real]
        texts = [str(batch["text"][k]) for k in real]
        t = time.perf_counter()
        vecs = np.zeros((len(texts), self.encoder.dim), dtype=np.float32)
        # the local build's calls: rows [k * step, (k + 1) * step) of each shard (a batch is one whole shard)
        call = shard.astype(np.int64) * (1 << 32) + row // self.step
        for c in np.unique(call):
            at = np.flatnonzero(call == c)
            vecs[at] = self.encoder.encode([texts[a] for a in at], "passage", batch_size=self.batch_size)
        seconds = time.perf_counter() - t
        bad = np.flatnonzero(~np.isfinite(vecs).all(axis=1))
        if len(bad):
            raise EncoderError(f"the encoder made a vector that is not finite (NaN or infinity) for passage "
                               f"{int(pid[bad[0]])}", hint="check the encoder (its weights, --max-length, "
                                                          "the device's precision)")
        n = len(texts)
        return {"shard": shard, "row": row, "vector": vecs,
                "seconds": np.full(n, seconds / max(n, 1)), "worker": np.array([self.worker] * n, dtype=object)}


def map_batches_args(*, workers: int, cpus: float, gpus: float, device: str, settings: dict[str, Any],
                     batch_size: int, step: int, shard_rows: int,
                     exported: tuple[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The arguments of the encoding's ``Dataset.map_batches`` (``_ShardEncoder`` first). Each block the driver
    hands Ray is one shard padded to ``shard_rows`` rows, and ``batch_size`` is ``shard_rows``, so a batch is
    exactly one shard however Ray bundles blocks; Ray asks for a ``batch_size`` when GPUs are requested."""
    import ray.data

    return {"fn": _ShardEncoder, "batch_size": shard_rows, "batch_format": "numpy",
            "compute": ray.data.ActorPoolStrategy(size=workers), "num_cpus": cpus, "num_gpus": gpus or None,
            "fn_constructor_kwargs": {"settings": settings, "device": device, "batch_size": batch_size,
                                      "step": step, "exported": exported}}


class RayEncoding:
    """The driver's side: connects (or starts a local cluster), checks the work folder, takes the passages block by
    block (:meth:`add`), runs the Ray Data pipeline over the shards left (:meth:`run`), and removes the work folder
    once the index is committed (:meth:`committed`)."""

    def __init__(self, cfg: IndexConfig, out: Path, settings: EncoderSettings, dim: int,
                 exported: tuple[Path, dict[str, Any]] | None = None) -> None:
        self.cfg, self.out, self.dim = cfg, out, dim
        # the index's ONNX export (the workers run it as the local build does; its digest, not its path, recorded)
        self.exported = (os.path.abspath(exported[0]), exported[1]) if exported else None
        self.work = work_dir(out)
        self.step = max(1, cfg.batch_size) * 8
        self.shard_rows = self.step * SHARD_STEPS
        name = os.path.abspath(settings.name) if os.path.isdir(settings.name) else settings.name
        self.settings = {"name": name, "query_prefix": settings.query_prefix,
                         "passage_prefix": settings.passage_prefix, "pooling": settings.pooling,
                         "normalize": settings.normalize, "max_length": settings.max_length}
        self.record = {"format": FORMAT, "kind": "dense-encoding", "encoder": _passage_settings(self.settings),
                       "dim": dim,
                       "onnx": exported[1]["sha256"] if exported else None,
                       "batch_size": cfg.batch_size, "block": cfg.block, "shard_rows": self.shard_rows}
        self.shards: list[dict[str, Any]] = []  # start, rows, sha256, done (bool), ref (an ObjectRef to encode)
        self.started = False
        self.workers: dict[str, list[float]] = {}  # worker -> [passages, seconds]
        self.ray = self._connect()
        try:  # refused before a passage is read: workers no node can hold (Ray would wait for them without end)
            self.plan = self._resources()
            self._check_work()
        except BaseException:
            self.close()
            raise

    # -- setting up
    def _connect(self) -> Any:
        try:
            import ray
            import ray.data  # noqa: F401
        except ImportError as e:
            raise EngineError(f"--engine ray needs Ray Data, which is not installed here ({e})",
                              hint="pip install 'rag-curriculum[ray]', or run with --engine local") from None
        # not Ray's token notice on a local cluster: one of ours
        self.started = connect_ray(ray, self.cfg.ray_address, error=EngineError, log=log, purpose="the encoding",
                                   local_level=logging.ERROR)
        return ray

    def _check_work(self) -> None:
        path = self.work / "encoding.json"
        if not self.work.exists():
            self.work.mkdir(parents=True)
            atomic_write_text(path, json.dumps(self.record, indent=1) + "\n")
            return
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            old = None
        if not isinstance(old, dict) or old.get("kind") != "dense-encoding":
            raise EncodingError(f"{self.work} exists and is not a stopped encoding of this toolkit (no readable "
                                "encoding.json)", hint=f"move it away or remove it: rm -r {self.work}")
        if isinstance(old.get("encoder"), dict):  # a record of an earlier version holds the query prefix too
            old["encoder"] = _passage_settings(old["encoder"])
        differ = [k for k in ("encoder", "onnx", "dim", "batch_size", "block", "shard_rows", "format")
                  if old.get(k) != self.record.get(k)]
        if differ:
            k = differ[0]
            was, now = old.get(k), self.record.get(k)
            if isinstance(was, dict) and isinstance(now, dict):  # the encoder's settings: the one that changed
                sub = next(x for x in (*now, *was) if was.get(x) != now.get(x))
                k, was, now = f"the encoder's {sub}", was.get(sub), now.get(sub)
            raise EncodingError(f"the stopped encoding in {self.work} was made with other settings ({k}: "
                                f"{json.dumps(was)[:120]}, now {json.dumps(now)[:120]})",
                                hint=f"run with the settings it was started with, or remove it to encode from the "
                                     f"start: rm -r {self.work}")
        done = len(list(self.work.glob("shard-*.json")))
        if done:
            log.info("resuming the encoding in %s: %d shard(s) already encoded", self.work, done)

    # -- the passages
    def _done(self, i: int) -> dict[str, Any] | None:
        meta, data = self.work / f"shard-{i:06d}.json", self.work / f"shard-{i:06d}.f32"
        if not meta.is_file() or not data.is_file():
            return None
        try:
            m = json.loads(meta.read_text())
        except (OSError, ValueError):
            return None
        if data.stat().st_size != 4 * self.dim * int(m.get("rows", -1)):
            return None
        if m.get("vectors_sha256") != file_sha256(data):  # edited or damaged since written, or an older record
            log.warning("shard %d of the stopped encoding in %s: %s; encoding it again", i, self.work,
                        f"its vectors ({data.name}) are not those written" if m.get("vectors_sha256") else
                        f"its record ({meta.name}) holds no digest of its vectors")
            return None
        return m

    def add(self, texts: list[str], start: int) -> int:
        """Take one block of passage texts (passage ``start`` on); return how many were already encoded."""
        import pyarrow as pa

        skipped = 0
        for a in range(0, len(texts), self.shard_rows):
            part = texts[a:a + self.shard_rows]
            i, sha = len(self.shards), _digest(part)
            shard = {"i": i, "start": start + a, "rows": len(part), "sha256": sha, "ref": None}
            done = self._done(i)
            if done is not None:
                if done.get("sha256") != sha or done.get("start") != shard["start"]:
                    raise EncodingError(
                        f"the passages changed since the encoding in {self.work} stopped: shard {i} (passages "
                        f"{shard['start']:,}..{shard['start'] + len(part) - 1:,}) holds other texts than those it "
                        "was encoded from", hint="pass the corpus and dataset the encoding was started with, or "
                                                 f"remove it to encode from the start: rm -r {self.work}")
                skipped += len(part)
            else:
                import numpy as np

                pad = self.shard_rows - len(part)  # every block exactly shard_rows rows: see map_batches_args
                shard["ref"] = self.ray.put(pa.table({
                    "shard": pa.array(np.full(self.shard_rows, i, dtype=np.int32)),
                    "row": pa.array(np.arange(self.shard_rows, dtype=np.int32)),
                    "pid": pa.array(np.concatenate([np.arange(shard["start"], shard["start"] + len(part)),
                                                    np.full(pad, -1)]).astype(np.int64)),
                    "text": pa.array(part + [""] * pad, type=pa.large_string())}))
            self.shards.append(shard)
        return skipped

    # -- the pipeline
    def _resources(self) -> tuple[int, float, float, str]:
        cfg = self.cfg
        total = self.ray.cluster_resources()
        gpus_here = float(total.get("GPU", 0))
        gpus = cfg.gpus_per_worker if cfg.gpus_per_worker is not None else (1.0 if gpus_here else 0.0)
        if cfg.num_workers:
            workers = cfg.num_workers
        elif gpus:
            workers = max(1, int(gpus_here // gpus))
        else:
            workers = max(1, int(float(total.get("CPU", 1)) // max(cfg.cpus_per_worker, 1e-9)))
        require_resources(self.ray, cpus=cfg.cpus_per_worker, gpus=gpus, error=EngineError, count=cfg.num_workers,
                          log=log)
        return workers, cfg.cpus_per_worker, gpus, "cuda" if gpus else "cpu"

    def run(self, sink: Any, progress: Any = None) -> dict[str, Any]:
        """Encode the shards left on the cluster (writing each into the work folder as it finishes), then write
        every shard's vectors in passage order to ``sink`` (a binary file). Returns what ran where."""
        import numpy as np

        todo = [s for s in self.shards if s["ref"] is not None]
        done_rows = sum(s["rows"] for s in self.shards if s["ref"] is None)
        t0 = time.perf_counter()
        workers = 0
        if todo:
            workers, cpus, gpus, device = self.plan
            workers = min(workers, len(todo))  # an actor per shard at most
            ds = self._dataset(todo, workers, cpus, gpus, device)
            pending = {s["i"]: (s, np.zeros((s["rows"], self.dim), dtype=np.float32), np.zeros(s["rows"], dtype=bool))
                       for s in todo}
            try:
                for batch in ds.iter_batches(batch_size=None, batch_format="numpy", prefetch_batches=1):
                    for i in np.unique(batch["shard"]).tolist():
                        rows = batch["shard"] == i
                        shard, vecs, seen = pending[i]
                        r = batch["row"][rows]
                        vecs[r] = np.stack(list(batch["vector"][rows])) if batch["vector"].dtype == object else \
                            batch["vector"][rows]
                        seen[r] = True
                        for w, s in zip(batch["worker"][rows].tolist(), batch["seconds"][rows].tolist(),
                                        strict=True):
                            acc = self.workers.setdefault(str(w), [0, 0.0])
                            acc[0] += 1
                            acc[1] += s
                        if progress:
                            progress(int(rows.sum()))
                        if seen.all():
                            self._write_shard(i, shard, vecs)
                            del pending[i]
            except Exception as e:  # noqa: BLE001  (a worker's error, unwrapped to one line)
                raise _unwrap(e) from None
            if pending:  # pragma: no cover - Ray Data returned fewer rows than it was given
                raise EncodingError(f"Ray Data returned no vectors for shard(s) {sorted(pending)[:5]}",
                                    hint="run the same command again: the shards written are kept")
        seconds = time.perf_counter() - t0
        for i, shard in enumerate(self.shards):
            data = (self.work / f"shard-{i:06d}.f32").read_bytes()
            if len(data) != 4 * self.dim * shard["rows"]:  # pragma: no cover - checked when written
                raise EncodingError(f"{self.work}: shard {i} is damaged", hint=f"remove it: rm -r {self.work}")
            sink.write(data)
        encoded = sum(s["rows"] for s in todo)
        report = {"shards": len(self.shards), "resumed_shards": len(self.shards) - len(todo),
                  "resumed_passages": done_rows, "encoded": encoded, "seconds": round(seconds, 2),
                  "workers": workers, "per_worker": {w: round(n / s, 1) if s else None
                                                     for w, (n, s) in sorted(self.workers.items())}}
        if encoded:
            log.info("encoded %s passages on %d Ray worker(s) in %.1f s (%.1f passages/s; per worker, encoding "
                     "alone: %s)%s", f"{encoded:,}", workers, seconds, encoded / max(seconds, 1e-9),
                     ", ".join(f"{v:.1f}/s" for v in report["per_worker"].values() if v),
                     f"; {done_rows:,} were already encoded" if done_rows else "")
        return report

    def _dataset(self, todo: list[dict[str, Any]], workers: int, cpus: float, gpus: float, device: str) -> Any:
        import ray.data

        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False  # the build's own bar counts the passages
        # its execution plan, "progress bars disabled", and its own report of a worker's error (said in one line here)
        logging.getLogger("ray.data").setLevel(logging.CRITICAL)
        ds = ray.data.from_arrow_refs([s["ref"] for s in todo])
        return ds.map_batches(**map_batches_args(
            workers=workers, cpus=cpus, gpus=gpus, device=device, settings=self.settings,
            batch_size=self.cfg.batch_size, step=self.step, shard_rows=self.shard_rows, exported=self.exported))

    def _write_shard(self, i: int, shard: dict[str, Any], vecs: Any) -> None:
        """Shard ``i``'s vectors, then its record (with their SHA-256, checked on resume): a shard counts as done
        only when both are whole and agree."""
        data = vecs.astype("<f4").tobytes()
        atomic_write_bytes(self.work / f"shard-{i:06d}.f32", data)
        atomic_write_text(self.work / f"shard-{i:06d}.json", json.dumps(
            {"start": shard["start"], "rows": shard["rows"], "sha256": shard["sha256"],
             "vectors_sha256": hashlib.sha256(data).hexdigest()}) + "\n")

    # -- the end
    def committed(self) -> None:
        """The index is in place: the work folder is no longer needed."""
        shutil.rmtree(self.work, ignore_errors=True)

    def close(self) -> None:
        if self.started and self.ray.is_initialized():
            log.info("shutting down the local Ray cluster")
            shutdown_ray(self.ray)
        self.started = False


def _passage_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The encoder settings the passages' vectors depend on (the query-only ones left out)."""
    return {k: v for k, v in settings.items() if k not in QUERY_ONLY}


_TOOLKIT_ERROR = re.compile(r"^(?:rag_retriever|rag_curriculum)\.[\w.]+\.(\w+): (.+)$", re.M)


def _unwrap(e: BaseException) -> BaseException:
    """The toolkit's own error raised on a worker (an actor's EncoderError), in one line, or one line naming Ray's.
    Ray Data hands back a ``UserCodeException`` whose text holds the worker's traceback; its last toolkit error is
    the cause."""
    seen = e
    for _ in range(8):
        if isinstance(seen, RetrieverError):
            return seen
        cause = getattr(seen, "cause", None) or seen.__cause__
        if cause is None:
            break
        seen = cause
    found = _TOOLKIT_ERROR.findall(str(e))
    if found:
        return EncodingError(f"a Ray worker stopped the encoding: {found[-1][1].strip()[:300]}",
                             hint="the shards written so far are kept: fix the cause and run the same command again")
    text = next((line.strip() for line in str(seen).splitlines() if line.strip()), type(seen).__name__)
    return EncodingError(f"the encoding failed on a Ray worker: {type(seen).__name__}: {text[:300]}",
                         hint="the shards written so far are kept: run the same command again to resume")


__all__ = ["EncodingError", "QUERY_ONLY", "RayEncoding", "map_batches_args", "work_dir"]
