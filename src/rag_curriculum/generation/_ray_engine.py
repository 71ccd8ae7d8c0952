"""``--engine ray``: the chunk runner's backend calls on a pool of Ray actors, one backend engine per actor.

**Why Ray core actors (not Ray Data).** The chunk runner keeps everything that makes a run reproducible and
resumable: which chunks are left, the calls they are cut into (a call's batch-mates can change a transformers
sample, so a call must hold exactly the prompts a local run gives it), the per-question seeds, the identical-samples
check, and the atomic chunk files. An actor pool takes over only the backend calls: each actor builds its backend
once (the model is loaded once per worker) and answers calls one at a time; the results come back to this process,
which writes the chunk files as they arrive. Ray Data's ``map_batches`` with an actor pool would cut the questions
into blocks of its own, write its own output files, and retry blocks without telling which chunk failed: resume,
the byte-identical calls and per-chunk errors would all have to be rebuilt around it.

**Placement never changes a sample.** Calls are made by the runner exactly as in a local run (same prompts, same
seeds, same call boundaries), so a call gives the same completions on whichever worker runs it, and the chunk files
are byte-identical to ``--engine local``'s. Results travel back to the driver, so a cluster needs no shared
filesystem: only the driver reads the input and writes ``work/`` and the outputs; each node needs the toolkit and
access to the model.

**Faults.** A worker that dies mid-call (killed, out of memory, its node lost) has its call run again on another
worker, and a fresh worker replaces it; so does a worker whose call raised an unexpected error. A call that fails
``chunk_retries + 1`` times stops the run with :class:`~rag_curriculum.errors.EngineError` naming its chunks and the
last cause. The toolkit's own refusals (a bad setting, a script without the prompt) stop the run at once, as in a
local run. Leaving the engine (the end of the command, an error, Ctrl-C) kills the actors and shuts down a
cluster the engine started; finished chunks stay on disk, and the same command continues from them.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from .._plumbing import AUTH_HINT, auth_cause, connect_ray, is_auth_error, require_resources, shutdown_ray
from ..errors import CurriculumError, EngineError
from ._base import replays, seeded_call_supported
from ._engine_config import RAY_INSTALL_HINT, EngineConfig
from .runner import Call, _generate

log = logging.getLogger(__name__)


__all__ = ["AUTH_HINT", "RayEngine", "RayPool", "auth_cause", "import_ray", "is_auth_error"]

#: How often the driver wakes up while waiting for results (Ctrl-C and progress stay responsive).
_POLL_SECONDS = 0.2
#: How long the first worker may take to build its backend before the driver says what it waits for (and again).
_SLOW_START_SECONDS = 120.0


def import_ray() -> Any:
    """``ray``, or a clear error saying how to install it."""
    try:
        import ray
    except ImportError as e:
        raise EngineError(f"--engine ray needs Ray, which is not installed here ({e})",
                          hint=f"{RAY_INSTALL_HINT}, or run with --engine local") from None
    return ray


class _Worker:
    """The Ray actor: builds one backend (``start``), then answers calls with the runner's own call logic (prompts
    the model cannot take come back as None, the others are generated), one at a time."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.factory = factory
        self.backend: Any = None
        self.start_error: BaseException | None = None

    def start(self) -> dict[str, Any]:
        try:
            self.backend = self.factory()
        except BaseException as e:
            self.start_error = e
            raise
        b = self.backend
        describe = b.describe() if callable(getattr(b, "describe", None)) else None
        return {"name": getattr(b, "name", type(b).__name__), "call_size": getattr(b, "call_size", None),
                "seeded": seeded_call_supported(b), "replays": replays(b),
                "sampling_hint": getattr(b, "sampling_hint", None), "describe": describe,
                "host": os.uname().nodename, "pid": os.getpid()}

    def run(self, prompts: list[Any], sampling: Any, seeds: list[int] | None) -> tuple[list[Any], float]:
        from types import SimpleNamespace

        if self.backend is None:
            raise EngineError(f"this worker could not build its backend: {self.start_error}")
        acc = SimpleNamespace(backend_seconds=0.0)
        out = _generate(self.backend, prompts, sampling, seeds, acc)  # type: ignore[arg-type]
        return out, acc.backend_seconds

    def close(self) -> None:
        if self.backend is not None and hasattr(self.backend, "close"):
            self.backend.close()


class RayEngine:
    """A connection to a Ray cluster for one command: made when the first pool is built, closed by
    :func:`rag_curriculum.generation._engine.open_engine`."""

    name = "ray"

    def __init__(self, cfg: EngineConfig) -> None:
        self.cfg = cfg
        self.ray = import_ray()  # a missing Ray is refused before anything runs
        self.started = False  # this engine started the cluster (and shuts it down)
        self.pools: list[RayPool] = []

    def connect(self) -> Any:
        self._check_local_cpus()
        if connect_ray(self.ray, self.cfg.ray_address, error=EngineError, log=log, purpose="this run",
                       log_to_driver=True):
            self.started = True
        return self.ray

    def _check_local_cpus(self) -> None:
        """A worker asking more CPUs than this machine has, where the run would start a local cluster (no
        --ray-address, no RAY_ADDRESS, not connected yet), refused before the cluster is started: no node of it could
        hold the worker (a cluster's nodes are known only once connected: :func:`require_resources` then)."""
        import os

        if self.cfg.ray_address or os.environ.get("RAY_ADDRESS") or self.ray.is_initialized():
            return
        have = os.cpu_count() or 1
        cpus = float(self.cfg.cpus_per_worker)
        if cpus > have:
            raise EngineError(f"each Ray worker needs {cpus:g} CPU on one node (--cpus-per-worker {cpus:g}), but the "
                              f"local Ray cluster this run would start has at most {have} (this machine's CPUs)",
                              hint=f"lower --cpus-per-worker to {have} or less, or run on a cluster with larger "
                                   "nodes (--ray-address or RAY_ADDRESS)")

    def wrap(self, factory: Callable[[], Any], *, backend: str | None = None,
             options: Mapping[str, Any] | None = None) -> Callable[[], RayPool]:
        def pool() -> RayPool:
            p = RayPool(self, factory, backend=backend, options=options or {})
            self.pools.append(p)
            return p

        return pool

    def close(self) -> None:
        for p in self.pools:
            p.close()
        self.pools = []
        if self.started and self.ray.is_initialized():
            log.info("shutting down the local Ray cluster")
            shutdown_ray(self.ray)
        self.started = False


class RayPool:
    """The backend as the chunk runner sees it (``name``, ``call_size``, ``describe()``, ...), with
    :meth:`generate_calls`, which the runner uses to hand it every call at once: the calls run on the pool's
    workers as they free up, and come back in the order they finish."""

    def __init__(self, engine: RayEngine, factory: Callable[[], Any], *, backend: str | None,
                 options: Mapping[str, Any]) -> None:
        self.engine = engine
        self.factory = factory
        self.cfg = engine.cfg
        self.retries = self.cfg.chunk_retries
        ray = self.ray = engine.connect()
        self.resources = self._resources(ray, backend, options)
        self.workers: dict[int, Any] = {}  # worker number -> actor handle
        self.starts: dict[int, Any] = {}  # worker number -> its start() result ref
        self.profiles: dict[int, dict[str, Any]] = {}
        self._next = 0
        self._closed = False
        try:
            for _ in range(self.size):
                self._add_worker()
            self.profile = self._first_profile()
        except BaseException:
            self.close()
            raise
        p = self.profile
        self.name = p["name"]
        self.call_size = p["call_size"]
        self.seeded_calls = p["seeded"]
        self.replays = p["replays"]
        if p["sampling_hint"]:
            self.sampling_hint = p["sampling_hint"]
        self.progress_label = f"ray · {self.size} worker{'s' if self.size > 1 else ''}"

    # -- workers -------------------------------------------------------------------------------------------------
    def _resources(self, ray: Any, backend: str | None, options: Mapping[str, Any]) -> dict[str, float]:
        cluster = ray.cluster_resources()
        gpus = self.cfg.gpus_per_worker
        if gpus is None:
            if backend == "vllm":
                gpus = float(options.get("tensor_parallel_size") or 1)
            elif backend == "transformers" and str(options.get("device", "auto")) != "cpu":
                gpus = 1.0 if cluster.get("GPU", 0) else 0.0
            else:
                gpus = 0.0
        cpus = float(self.cfg.cpus_per_worker)
        have_gpus, have_cpus = float(cluster.get("GPU", 0)), float(cluster.get("CPU", 0))
        require_resources(ray, cpus=cpus, gpus=gpus, error=EngineError, count=self.cfg.num_workers, log=log)
        fit = int(have_gpus // gpus) if gpus > 0 else (int(have_cpus // cpus) if cpus > 0 else int(have_cpus))
        # an OpenAI-compatible server already batches: one worker (its --concurrency requests) unless asked for more
        size = self.cfg.num_workers or (1 if backend == "openai" else max(1, fit))
        self.size = size
        log.info("Ray pool: %d worker(s), %g CPU and %g GPU each", size, cpus, gpus)
        return {"num_cpus": cpus, "num_gpus": gpus}

    def _add_worker(self) -> None:
        actor_cls = self.ray.remote(max_restarts=0, max_task_retries=0)(_Worker)
        w = self._next
        self._next += 1
        handle = actor_cls.options(**self.resources, name=None).remote(self.factory)
        self.workers[w] = handle
        self.starts[w] = handle.start.remote()

    def _retire(self, w: int) -> None:
        handle = self.workers.pop(w, None)
        self.starts.pop(w, None)
        if handle is not None:
            try:
                self.ray.kill(handle, no_restart=True)
            except Exception:  # pragma: no cover - already gone
                pass

    def _first_profile(self) -> dict[str, Any]:
        """Wait for the first worker to build its backend; its profile stands for the pool's (the others are
        checked against it as they answer). Refusals of the toolkit's own (a bad model path) stop at once."""
        failures: list[str] = []
        t0 = last = time.monotonic()
        while True:
            if time.monotonic() - last > _SLOW_START_SECONDS:
                last = time.monotonic()
                log.warning("no Ray worker has built its backend after %.0f s; each needs %g CPU and %g GPU on one "
                            "node (the largest has %s): waiting for nodes (Ctrl-C stops)", last - t0, self.resources["num_cpus"], self.resources["num_gpus"],
                            self._largest_node())
            refs = {ref: w for w, ref in self.starts.items() if w not in self.profiles}
            if not refs:
                auth = any(is_auth_error(RuntimeError(f)) for f in failures)
                raise EngineError("no Ray worker could build the backend: " + "; ".join(failures[-3:]),
                                  hint=AUTH_HINT if auth else "the workers' errors are above; check that every node "
                                  "has the toolkit, the backend's libraries and the model")
            ready, _ = self.ray.wait(list(refs), num_returns=1, timeout=_POLL_SECONDS)
            for ref in ready:
                w = refs[ref]
                try:
                    self.profiles[w] = self.ray.get(ref)
                    log.info("Ray worker %d: %s backend on %s (pid %s)", w, self.profiles[w]["name"],
                             self.profiles[w]["host"], self.profiles[w]["pid"])
                    return self.profiles[w]
                except Exception as e:
                    cause = _cause(e)
                    if isinstance(cause, CurriculumError):
                        raise cause from None
                    failures.append(f"worker {w}: {_say(cause)}")
                    log.warning("Ray worker %d could not build the backend: %s", w, _say(cause))
                    self._retire(w)

    def _largest_node(self) -> str:
        try:
            nodes = [n.get("Resources", {}) for n in self.ray.nodes() if n.get("Alive")]
            return f"{max(n.get('CPU', 0) for n in nodes):g} CPU and {max(n.get('GPU', 0) for n in nodes):g} GPU"
        except Exception:  # pragma: no cover - informative only
            return "?"

    def describe(self) -> dict[str, Any] | None:
        return self.profile.get("describe")

    def _check_profile(self, w: int) -> None:
        if w in self.profiles or w not in self.starts:
            return
        try:
            p = self.profiles[w] = self.ray.get(self.starts[w], timeout=0)
        except Exception:
            return
        if p.get("describe") != self.profile.get("describe"):
            log.warning("Ray worker %d (%s) resolved the backend differently from worker 0 (%s vs %s): its "
                        "completions may differ numerically", w, p["host"], p.get("describe"),
                        self.profile.get("describe"))

    # -- calls ---------------------------------------------------------------------------------------------------
    def generate_calls(self, calls: Iterable[Call], *, total: int | None = None
                       ) -> Iterator[tuple[Call, list[Any], float]]:
        """Run ``calls`` on the workers (each worker one call at a time); yield ``(call, results, backend_seconds)``
        as calls finish. A call whose worker dies or fails runs again on another; see the module docstring."""
        ray = self.ray
        if total is not None and total < len(self.workers):  # more workers than calls: free the others
            keep = sorted(self.workers, key=lambda w: (w not in self.profiles, w))[:max(total, 1)]
            for w in [w for w in self.workers if w not in keep]:
                self._retire(w)
        it = iter(calls)
        waiting: deque[Call] = deque()  # calls to run again
        attempts: dict[int, int] = {}
        in_flight: dict[Any, tuple[Call, int]] = {}
        busy: set[int] = set()
        exhausted = False

        def fill() -> None:
            """Every idle worker gets a call (a call to run again first)."""
            nonlocal exhausted
            for w in sorted(self.workers):
                if w in busy:
                    continue
                if waiting:
                    call = waiting.popleft()
                elif exhausted or (call := next(it, None)) is None:
                    exhausted = True
                    return
                in_flight[self.workers[w].run.remote(call.prompts, call.sampling, call.seeds)] = (call, w)
                busy.add(w)

        while True:
            fill()
            if not in_flight:
                if waiting or not exhausted:  # every worker gone: replace one and go on
                    self._add_worker()
                    continue
                return
            ready, _ = ray.wait(list(in_flight), num_returns=len(in_flight), timeout=_POLL_SECONDS)
            done: list[tuple[Call, list[Any], float]] = []
            for ref in ready:
                call, w = in_flight.pop(ref)
                busy.discard(w)
                try:
                    out, seconds = ray.get(ref)
                except Exception as e:
                    cause = _cause(e)
                    if (isinstance(cause, CurriculumError) and not isinstance(cause, EngineError)
                            and not getattr(cause, "retryable", False)):
                        log.error("Ray worker %d stopped on %s: %s", w, call.describe(), cause)
                        raise cause from None  # the toolkit's own refusal: as in a local run
                    attempts[call.index] = attempts.get(call.index, 0) + 1
                    what = "died" if _died(e) else "failed"
                    if attempts[call.index] > self.retries:
                        raise EngineError(
                            f"{call.describe()} failed {attempts[call.index]} time(s) on Ray workers; the last "
                            f"time worker {w} {what}: {_say(cause)}",
                            hint="fix the cause and run the same command again: finished chunks are kept (raise "
                            "--chunk-retries for a flaky cluster)") from None
                    log.warning("Ray worker %d %s during %s (%s); running it again on another worker (retry %d of "
                                "%d)", w, what, call.describe(), _say(cause), attempts[call.index], self.retries)
                    self._retire(w)
                    self._add_worker()
                    waiting.append(call)
                    continue
                self._check_profile(w)
                done.append((call, out, seconds))
            if done:
                fill()  # the freed workers start their next call while the driver writes these
                yield from done

    def close(self) -> None:
        """Kill every worker (their calls in flight are abandoned; finished chunks are on disk)."""
        if self._closed:
            return
        self._closed = True
        for w in list(self.workers):
            self._retire(w)


def _cause(e: BaseException) -> BaseException:
    """The exception a Ray task raised (a RayTaskError's cause), else ``e``."""
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, BaseException) else e


def _died(e: BaseException) -> bool:
    try:
        from ray.exceptions import ActorUnavailableError, RayActorError
    except ImportError:  # pragma: no cover
        return False
    return isinstance(e, (RayActorError, ActorUnavailableError))


def _say(e: BaseException) -> str:
    text = " ".join(str(e).split())
    if len(text) > 400:
        text = text[:400] + " ..."
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
