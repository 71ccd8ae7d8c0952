"""An index behind HTTP: what ``curriculum serve`` runs, public for the command line and for a user who mounts the
app in a server of their own.

* :func:`make_app`: the FastAPI app of Search-R1's retriever protocol (``POST /retrieve``, ``GET /health``,
  ``GET /manifest``) over an index (for uvicorn's own workers, each opening it: ``app_from_env``, named by the
  environment, :data:`ENV_INDEX` and :data:`ENV_OPTIONS`);
* :func:`run_server`: the app over a loaded index, in this process or in ``--workers`` processes forked after the
  index was loaded (one copy of it shared: :func:`workers_for`, :func:`single_threaded`);
* :func:`run_ray_serve`: the same app as a Ray Serve deployment of replicas;
* :func:`choose_into_memory`, :func:`small_enough`, :func:`read_into_memory` and :func:`reading_into_memory`:
  whether the process reads the index whole into memory (``--in-memory``) or maps it, its files held with a read lease where
  :func:`can_lease` (so files copied over a served index cannot crash it mid-query);
* the connection guard (``ENV_LIMITS``, ``protocol``: ``GuardedHttpToolsProtocol`` or ``GuardedH11Protocol``,
  ``descriptor_cap``, ``log_config``): deadlines on a request's headers and body, a cap on open connections, secrets
  masked in the access log. It imports uvicorn, so it is loaded only when one of its names is asked for.
"""

from __future__ import annotations

from typing import Any

from ._integrity import choose_into_memory, memory_line, read_into_memory, reading_into_memory, small_enough
from ._lease import can_lease
from ._prefork import single_threaded, workers_for
from ._ray_serve import run as run_ray_serve
from ._server import ENV_INDEX, ENV_OPTIONS, make_app, run_server

_GUARD = ("ENV_HTTP", "ENV_LIMITS", "GuardedH11Protocol", "GuardedHttpToolsProtocol", "descriptor_cap", "log_config",
          "protocol")

__all__ = ["ENV_INDEX", "ENV_OPTIONS", "can_lease", "choose_into_memory", "make_app", "memory_line", "read_into_memory",
           "reading_into_memory", "run_ray_serve", "run_server", "single_threaded", "small_enough", "workers_for",
           *_GUARD]


def __getattr__(name: str) -> Any:
    if name in _GUARD:
        from . import _guard

        return getattr(_guard, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
