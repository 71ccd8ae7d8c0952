"""Connecting to a Ray cluster, written once (:func:`connect_ray`) for every ``--engine ray`` (partition and eval's
actor pools, the dense index's Ray Data encoding, ``curriculum serve``'s Ray Serve replicas): an address that
nothing answers is refused in seconds (``ray.init`` would wait for it without end), and a refusal by Ray's token
authentication is named as such. Once connected, :func:`require_resources` refuses workers that no node can hold
(Ray would wait for them without end), and a local cluster started here ends with this process
(:func:`shutdown_ray`, and a watcher for a driver killed outright). Standard library only: Ray is imported by the
callers, inside their functions."""

from __future__ import annotations

import logging
import math
import os
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

#: Ray 2.52+ authenticates with a token: a cluster and a driver that disagree on it fail in ways that look like a
#: missing toolkit; the hint names the real cause and both ways out (docs/scaling.md, "Token authentication").
AUTH_HINT = ("Ray's token authentication: the cluster (`ray start`) and this command must agree. Either use one "
             "token on both sides (RAY_AUTH_MODE=token, the token in ~/.ray/auth_token on every node, made by `ray "
             "get-auth-token --generate`, or in RAY_AUTH_TOKEN), or turn it off on both (RAY_AUTH_MODE=disabled "
             "when you run `ray start` and the command; a trusted network only); see docs/scaling.md")
#: What to do when no cluster answers at an address.
UNREACHABLE_HINT = ("start one with `ray start --head` and pass its address (--ray-address HOST:6379, or "
                    "RAY_ADDRESS), or leave both unset for a local cluster")
_AUTH_WORDS = re.compile(r"authenticat|auth[_ ]token|RAY_AUTH|unauthenticated|x-ray-authorization", re.I)


def _chain(e: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def is_auth_error(e: BaseException) -> bool:
    """A refusal by Ray's token authentication (its AuthenticationError, or a message that says so), anywhere in
    the exception's chain: ``ray.init(address=...)`` against a cluster that wants a token raises a bare
    ``ConnectionError: Failed to connect to Ray cluster at ...`` whose cause says ``InvalidAuthToken``."""
    return any(type(x).__name__ == "AuthenticationError" or _AUTH_WORDS.search(str(x)) for x in _chain(e))


_AUTH_SENTENCE = re.compile(r"(InvalidAuthToken: [^.\n]*|Token authentication is enabled but no authentication "
                            r"token was found|[^.\n]*(?:RAY_AUTH_MODE is currently '\w+'|token is missing or "
                            r"incorrect)[^.\n]*)")


def auth_cause(e: BaseException) -> str:
    """Ray's own words for an authentication refusal, one line (its messages run to a paragraph, and the
    connecting error hides them in its cause): ``InvalidAuthToken: Authentication token is missing or incorrect;
    RAY_AUTH_MODE is currently 'disabled' (not 'token')``."""
    found: list[str] = []
    for x in _chain(e):
        for m in _AUTH_SENTENCE.finditer(str(x)):
            part = m.group(1).strip().removeprefix("Note: ")
            if part and part not in found:
                found.append(part)
    if found:
        return "; ".join(found)
    return next((str(x).splitlines()[0][:200] for x in _chain(e) if str(x).strip()), type(e).__name__)


def unreachable(address: str | None, timeout: float = 5.0) -> str | None:
    """Why nothing answers at a Ray cluster's ``HOST:PORT`` (or ``ray://HOST:PORT``) address, in a few words, or
    None when something listens there (or the address names no port: ``auto``, unset). ``ray.init`` itself keeps
    retrying an address that refuses connections without a time limit; this is asked first.

    >>> unreachable("auto") is None and unreachable(None) is None
    True
    >>> unreachable("127.0.0.1:1")
    'connection refused'
    >>> unreachable("127.0.0.1:99999")
    '99999 is not a port (1..65535)'
    """
    if not address:
        return None
    m = re.fullmatch(r"(?:ray://)?\[?([^\]\s]+?)\]?:(\d+)", address.strip())
    if not m:
        return None
    host, port = m.group(1), int(m.group(2))
    if not 1 <= port <= 65535:
        return f"{port} is not a port (1..65535)"
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except socket.gaierror as e:
        return f"unknown host ({e.strerror or e})"
    except OSError as e:
        return (e.strerror or str(e)).lower()


def _connected_address(ray: Any) -> str | None:
    """The GCS address (HOST:PORT) of the cluster this process is connected to, where Ray says it."""
    try:
        return str(ray.get_runtime_context().gcs_address) or None
    except Exception:  # an older Ray, Ray Client: not said
        return None


def _same_cluster(ray: Any, address: str, joined: str) -> bool:
    """Whether ``address`` names the cluster at ``joined``: the same HOST:PORT, or the same port with the host
    this machine's loopback and the other its node address (Ray records the node's IP, a user types 127.0.0.1)."""
    def split(a: str) -> tuple[str, str]:
        host, _, port = a.strip().split("://", 1)[-1].rstrip("/").rpartition(":")
        return host.strip("[]").lower(), port

    (h1, p1), (h2, p2) = split(address), split(joined)
    if (h1, p1) == (h2, p2):
        return True
    if p1 != p2:
        return False
    try:
        node = str(ray.util.get_node_ip_address()).lower()
    except Exception:
        node = None
    local = {"localhost", "::1", node}
    return (h1 in local or h1.startswith("127.")) and (h2 in local or h2.startswith("127."))


def connect_ray(ray: Any, address: str | None, *, error: Callable[..., Exception], log: logging.Logger, purpose: str,
                log_to_driver: bool = False, local_level: int = logging.WARNING) -> bool:
    """Connect ``ray`` (the module, imported by the caller) to the cluster at ``address`` (else ``RAY_ADDRESS``), or,
    where neither is set, start a local cluster (``purpose``: what for, in the log line); True when this call
    started one (the caller shuts it down), False when it joined one or Ray was already connected. Ray's dashboard
    and usage statistics are off; ``log_to_driver``: the workers' output printed here; ``local_level``: Ray's own
    log level for a cluster started here.

    Refused with ``error(message, hint=...)``, in one line: an address nothing answers, in seconds
    (:func:`unreachable`, with :data:`UNREACHABLE_HINT`), a refusal by Ray's token authentication, in Ray's own words
    (:func:`auth_cause`, with :data:`AUTH_HINT`), and any other failure to connect or start (``ConnectionError``,
    ``RuntimeError``, ``ValueError``: its first line)."""
    if ray.is_initialized():  # this process is connected already: that cluster, unless another one was asked for
        joined = _connected_address(ray)
        if address and address.strip().lower() not in ("auto", "local") and joined \
                and not _same_cluster(ray, address, joined):
            raise error(f"--ray-address {address}: this process is connected to the Ray cluster at {joined} "
                        "already, and Ray joins one cluster a process",
                        hint="leave --ray-address out to use that cluster, or call ray.shutdown() first")
        return False
    given = "--ray-address" if address else "RAY_ADDRESS"
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address and address.strip().lower().startswith(("http://", "https://")):
        raise error(f"{given} {address}: an HTTP address (a Ray dashboard's or job API's, port 8265), not a "
                    "cluster's", hint="give the cluster's GCS address HOST:6379 (or ray://HOST:10001 for Ray "
                    "Client); on a node of the cluster, auto or no address at all")
    why = unreachable(address)  # ray.init would wait for an address nothing answers without end
    if why:
        raise error(f"could not connect to the Ray cluster at {address}: {why}", hint=UNREACHABLE_HINT)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": log_to_driver}
    try:
        if address:
            log.info("connecting to the Ray cluster at %s", address)
            ray.init(address=address, logging_level=logging.WARNING, **kwargs)
            return False
        log.info("starting a local Ray cluster for %s (--ray-address or RAY_ADDRESS to use a running one)", purpose)
        before = _proc_tree(os.getpid())
        ray.init(logging_level=local_level, **kwargs)
        _watch_local_cluster(before)
        return True
    except Exception as e:  # ConnectionError, RuntimeError, ValueError, ray.exceptions.AuthenticationError
        where = f"connect to the Ray cluster at {address}" if address else "start a local Ray cluster"
        if is_auth_error(e):
            raise error(f"could not {where}: Ray's token authentication refused it ({auth_cause(e)})",
                        hint=AUTH_HINT) from e
        if not isinstance(e, (ConnectionError, RuntimeError, ValueError)):
            raise
        said = " ".join(line.strip() for line in str(e).splitlines() if line.strip())  # Ray's advice, whole
        raise error(f"could not {where}: {said[:400]}", hint=UNREACHABLE_HINT) from e


#: Runs beside a driver that started a local cluster: given the cluster's processes (``PID:START``, START the
#: process's start time in /proc, so a reused pid is left alone), it adds their descendants every 2 s (the workers
#: the raylet starts), and when its stdin closes (the driver ended, however: even by SIGKILL) it kills those still
#: there. Ray's own fate-sharing (PR_SET_PDEATHSIG on gcs_server and the raylet) leaves the raylet's agents, and at
#: times its workers, behind for a minute or more; this leaves nothing.
_WATCHER = """
import os, select, signal, sys
def stat(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read()
        f = s[s.rindex(b")") + 2:].split()
        return f[1].decode(), f[19].decode()
    except (OSError, ValueError, IndexError):
        return None
procs = dict(a.split(":") for a in sys.argv[1:])
def alive():
    return {p: t for p, t in procs.items() if (stat(p) or (0, 0))[1] == t}
def grow():
    while True:
        live, new = alive(), {}
        for p in os.listdir("/proc"):
            st = stat(p) if p.isdigit() and p not in procs else None
            if st and st[0] in live:
                new[p] = st[1]
        if not new:
            return
        procs.update(new)
while True:
    if select.select([0], [], [], 2.0)[0] and not os.read(0, 4096):
        break
    grow()
grow()
for p in alive():
    try:
        os.kill(int(p), signal.SIGKILL)
    except OSError:
        pass
"""
_watcher: subprocess.Popen[bytes] | None = None


def _proc_tree(root: int) -> list[tuple[int, str]]:
    """``(pid, start time)`` of every process descended from ``root``, read from /proc (Linux; elsewhere none)."""
    parents: dict[int, list[tuple[int, str]]] = {}
    if not os.path.isdir("/proc/self"):  # pragma: no cover - not Linux
        return []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append((int(name), fields[19].decode()))
        except (OSError, ValueError, IndexError):
            continue
    out, todo = [], [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child[0])
    return out


def _watch_local_cluster(before: list[tuple[int, str]]) -> None:
    """Start the watcher (:data:`_WATCHER`) over the processes the local cluster just started: this process's
    descendants not in ``before`` (Linux only: where /proc is missing, Ray's own fate-sharing is all there is)."""
    global _watcher
    try:
        known = set(before)
        procs = [p for p in _proc_tree(os.getpid()) if p not in known]
        if procs:
            _watcher = subprocess.Popen([sys.executable, "-c", _WATCHER, *(f"{p}:{t}" for p, t in procs)],
                                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:  # pragma: no cover - informative: Ray's fate-sharing still ends the cluster
        _watcher = None


def shutdown_ray(ray: Any) -> None:
    """Shut down the local cluster :func:`connect_ray` started: Ray's own shutdown, then the watcher kills what is
    left of it."""
    global _watcher
    try:
        if ray.is_initialized():
            ray.shutdown()
    finally:
        w, _watcher = _watcher, None
        if w is not None:
            try:
                w.stdin.close()  # type: ignore[union-attr]
                w.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):  # pragma: no cover
                pass


def require_resources(ray: Any, *, cpus: float, gpus: float, error: Callable[..., Exception],
                      what: str = "each Ray worker", flags: tuple[str, str] = ("--cpus-per-worker",
                                                                              "--gpus-per-worker"),
                      count: int | None = None, log: logging.Logger | None = None, noun: str = "workers") -> int:
    """How many of ``what`` (each ``cpus`` CPUs and ``gpus`` GPUs, on one node) the connected cluster's nodes hold,
    by their totals (not what is free now). None: refused with ``error(message, hint=...)``, one line naming the
    request (``flags``: the options that set it) and what the cluster has; Ray would wait for such a worker without
    end. An autoscaling cluster's nodes not yet started do not count. ``count`` workers that do not all fit are a
    warning (``log``): the others start when resources free up or nodes join."""
    nodes = [n.get("Resources") or {} for n in ray.nodes() if n.get("Alive")]

    def fits(r: dict[str, Any]) -> float:
        c, g = float(r.get("CPU", 0)), float(r.get("GPU", 0))
        return min(c // cpus if cpus > 0 else math.inf, g // gpus if gpus > 0 else math.inf)

    fit = sum(fits(r) for r in nodes) if nodes else 0.0
    if fit == math.inf:  # nothing asked
        return max(count or 1, 1)
    if fit < 1:
        most_c = max((float(r.get("CPU", 0)) for r in nodes), default=0.0)
        most_g = max((float(r.get("GPU", 0)) for r in nodes), default=0.0)
        all_c = sum(float(r.get("CPU", 0)) for r in nodes)
        all_g = sum(float(r.get("GPU", 0)) for r in nodes)
        lower = [f for f, need, most in zip(flags, (cpus, gpus), (most_c, most_g), strict=True) if need > most]
        raise error(f"{what} needs {cpus:g} CPU and {gpus:g} GPU on one node ({flags[0]} {cpus:g}, {flags[1]} "
                    f"{gpus:g}), but no node of the Ray cluster has that many: the largest have {most_c:g} CPU and "
                    f"{most_g:g} GPU ({len(nodes)} node{'s' if len(nodes) != 1 else ''}, {all_c:g} CPU and "
                    f"{all_g:g} GPU in all)",
                    hint=f"lower {' and '.join(lower or flags)}, or use a cluster with larger nodes (--ray-address "
                         "or RAY_ADDRESS); node totals are compared, and nodes an autoscaler has not started yet do "
                         "not count")
    if count and count > fit and log is not None:
        log.warning("%d %s asked, but the Ray cluster's nodes hold %d (%g CPU and %g GPU each); the others "
                    "start when resources free up or nodes join", count, noun, int(fit), cpus, gpus)
    return int(fit)


def drop_options(command: str | None, flags: Iterable[str]) -> str | None:
    """The command line as outputs record it: without ``flags`` and their values (the engine options, which say
    where the work ran, not what it made), whether given as ``--flag value`` or ``--flag=value``.

    >>> drop_options("curriculum index --engine ray --num-workers=4 --kind dense --ray-address auto",
    ...              ("--engine", "--num-workers", "--ray-address"))
    'curriculum index --kind dense'
    """
    if command is None:
        return None
    try:
        parts = shlex.split(command)
    except ValueError:
        return command
    flags = set(flags)
    out: list[str] = []
    skip = False
    for p in parts:
        if skip:
            skip = False
            continue
        flag, sep, _ = p.partition("=")
        if flag in flags:
            skip = not sep
            continue
        out.append(p)
    return shlex.join(out)


__all__ = ["AUTH_HINT", "UNREACHABLE_HINT", "auth_cause", "connect_ray", "drop_options", "is_auth_error",
           "require_resources", "shutdown_ray", "unreachable"]
