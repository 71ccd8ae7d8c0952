"""``curriculum serve --engine ray``: the same server on Ray Serve, ``--replicas N`` copies of it placed across a Ray
cluster (one machine or many; on GPUs with ``--replica-gpus`` when a dense encoder should run there), behind Ray
Serve's HTTP proxy: the same protocol and the same answers as ``curriculum serve`` alone.

Each replica builds the toolkit's own app (:func:`~rag_retriever._server.make_app`: the same request
checks, micro-batching and responses) over its own memory-mapped copy of the index (replicas on one machine share
its pages through the page cache), loads and warms it when it starts, and answers the requests Ray Serve routes to
it by running them through that app. Nothing of the app is pickled: a replica gets the index directory and the
limits and makes the app itself.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from rag_plumbing import connect_ray, require_resources, shutdown_ray

from ._server import make_app
from .errors import EngineError

log = logging.getLogger(__name__)

#: Ray Serve's application name for the retriever.
APP_NAME = "rag-curriculum-retriever"


def deployment(index: str, options: dict[str, Any], *, replicas: int, num_cpus: float, num_gpus: float) -> Any:
    """The Ray Serve deployment (bound to its arguments) of ``replicas`` servers of ``index``."""
    from ray import serve

    @serve.deployment(name="retriever", num_replicas=replicas,
                      ray_actor_options={"num_cpus": num_cpus, "num_gpus": num_gpus})
    class Retriever:
        def __init__(self, index: str, options: dict[str, Any]) -> None:
            import httpx

            self.app = make_app(index, **options)
            self.app.state.start()  # the index loaded and warmed before the replica takes requests
            self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://replica")

        async def __call__(self, request: Any) -> Any:
            from starlette.responses import Response

            body = await request.body()
            path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "content-length")}
            r = await self.client.request(request.method, path, content=body, headers=headers)
            keep = {k: v for k, v in r.headers.items() if k.lower() in ("content-type", "retry-after")}
            keep["x-replica"] = str(os.getpid())  # which replica answered
            return Response(r.content, status_code=r.status_code, headers=keep)

        def check_health(self) -> None:  # Ray Serve's own health check of a replica
            if not self.app.state.index.ready:
                raise RuntimeError("the index is not loaded")

    return Retriever.bind(os.path.abspath(index), options)


def run(index: str, options: dict[str, Any], *, host: str, port: int, replicas: int, num_cpus: float = 1.0,
        num_gpus: float = 0.0, address: str | None = None, on_ready: Any = None) -> None:
    """Start (or join, with ``address`` or ``RAY_ADDRESS``) a Ray cluster, run ``replicas`` servers of ``index``
    behind Ray Serve's proxy on ``host:port``, and block until interrupted; then shut the application down. A
    cluster that cannot be reached or refuses this command is :class:`~rag_retriever.errors.EngineError`, in one
    line (:func:`~rag_plumbing.connect_ray`)."""
    import ray
    from ray import serve

    was = ray.is_initialized()
    started = connect_ray(ray, address, error=EngineError, log=log, purpose="the server")
    serving = False
    try:
        # replicas no node can hold: Ray Serve would wait for them without end
        require_resources(ray, cpus=num_cpus, gpus=num_gpus, error=EngineError, what="each Ray Serve replica",
                          flags=("--replica-cpus", "--replica-gpus"), count=replicas, log=log, noun="replicas")
        serving = True
        serve.start(http_options={"host": host, "port": port})
        serve.run(deployment(index, options, replicas=replicas, num_cpus=num_cpus, num_gpus=num_gpus),
                  name=APP_NAME, route_prefix="/")
        if on_ready is not None:
            on_ready()
        import signal
        import threading

        def stop(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, stop)
        threading.Event().wait()  # until interrupted (Ctrl-C, SIGTERM)
    finally:
        try:
            if serving:
                serve.delete(APP_NAME)
                serve.shutdown()
        finally:
            if started:
                shutdown_ray(ray)
            elif not was:  # joined a cluster: only this driver's connection ends
                ray.shutdown()


__all__ = ["APP_NAME", "deployment", "run"]
