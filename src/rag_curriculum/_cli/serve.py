"""`curriculum serve`: an index of `curriculum index` behind HTTP, with Search-R1's retriever protocol (POST
/retrieve), for RL trainers that call a search tool (Search-R1, the toolkit's verl search tool, TRL scripts)."""

from __future__ import annotations

import json
import logging
import os
from contextlib import ExitStack
from typing import Any

import typer
from rag_retriever import CorpusIndex, ServeConfig, get_kind, read_index_manifest, serving
from rag_retriever.serving import run_ray_serve

from .._plumbing import LISTEN_HINT, claim_port
from ..config import bind, given
from .common import PrintConfig, config_options, fail, out, reported_errors, show_config, with_options

SERVE_HINT = "install the server: pip install 'rag-curriculum[serve]'"


def _hint(e: BaseException) -> str | None:
    if isinstance(e, ImportError) and (getattr(e, "name", None) or "").split(".")[0] in (
            "fastapi", "uvicorn", "starlette", "pydantic", "anyio", "bm25s", "scipy"):
        return SERVE_HINT
    return None


def _check_port(host: str, port: int) -> None:
    """Claim the port for this server and refuse, in one line, a port another server holds or this machine cannot
    listen on (uvicorn would log a traceback-like error; a second server's SO_REUSEPORT sockets would join the
    first's: ``rag_plumbing._ports``)."""
    problem = claim_port(host, port)
    if problem:
        fail(problem, LISTEN_HINT)


#: ServeConfig's options, one per field (--index required by click, as before: there is no recipe to give it).
OPTIONS = config_options(ServeConfig, required=("index",))


@with_options(OPTIONS)
def serve(print_config: PrintConfig = False, **options: Any) -> None:
    """Serve an index of curriculum index (BM25, dense or hybrid) over HTTP with Search-R1's retriever protocol:
    POST /retrieve with {"queries": [...], "topk": 3, "return_scores": true} answers {"result": [[{"document":
    {"id", "contents"}, "score"}, ...], ...]}, one list per query, best first: exactly the index's ranking in process (same tokenizer,
    parameters and tie order). Without return_scores each list holds the documents alone;
    {"query": "...", "topk": 3} asks for one query. GET /health answers 200 once the index is loaded, GET /manifest
    what the index is. A bad request gets a 4xx with a one-line "detail"; the server goes on serving.

    [bold]Examples[/]

      curriculum serve --index indexes/musique-train --port 8000

      curriculum serve --index indexes/wiki18 --host 0.0.0.0 --workers 4 --max-batch 1024

    Search-R1 then trains with retriever.url=http://127.0.0.1:8000/retrieve (its search_url); a verl run with the
    toolkit's search tool (rag_curriculum.verl.tool.SearchTool) with retriever: http://127.0.0.1:8000 in
    recipes/verl/search_tool.yaml; this toolkit's agents with --retriever http://127.0.0.1:8000/retrieve.
    """
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    with reported_errors(_hint), ExitStack() as scope:
        cfg = bind(ServeConfig, given(options))  # a value out of its range: one line, exit 2
        if print_config:
            show_config(cfg)
            return
        import fastapi  # noqa: F401  (missing: the hint names the extra)
        import uvicorn  # noqa: F401  (missing: the hint names the extra)

        # checks the directory against its manifest (sizes, small files and the BM25 postings hashed, large files
        # sampled, the fingerprint recomputed from the records; --verify: what curriculum validate checks), then
        # mmaps
        unused = [f"{flag} {value}" if value is not True else flag for flag, value in (
            ("--encoder", cfg.encoder), ("--device", cfg.device), ("--allow-other-encoder", cfg.allow_other_encoder))
            if value]
        if unused:  # a BM25 index encodes nothing: the options would be ignored
            m = read_index_manifest(cfg.index, kind_check=False)
            if not m.get("dense"):
                fail(f"{', '.join(unused)}: {cfg.index} is a {m.get('retriever', 'BM25')} index, which uses no "
                     "encoder", f"drop {', '.join(u.split()[0] for u in unused)} (they are for a dense or hybrid "
                     "index)", code=2)
        leases = cfg.engine != "ray"  # (Ray Serve's replicas take none: without one, the quarter-of-memory rule)
        memory, size = serving.choose_into_memory(cfg.index, cfg.in_memory, leases=leases)
        scope.enter_context(serving.reading_into_memory(memory))  # (this command's: as it was after it)
        workers = serving.workers_for(cfg.workers) if cfg.engine != "ray" else 1
        if workers > 1:  # loaded once here, then forked: no thread pool started before the fork
            serving.single_threaded()
        ix = CorpusIndex(cfg.index, threads=1 if workers > 1 else cfg.threads, encoder=cfg.encoder, device=cfg.device,
                         verify=cfg.verify, allow_other_encoder=cfg.allow_other_encoder)
        out.print(ix.check_line(), soft_wrap=True)
        leased = leases and not memory and serving.can_lease(cfg.index)
        out.print(serving.memory_line(memory, size, leased=leased), soft_wrap=True)
        # opened and warmed (a dense index's FAISS file and encoder checked, its model loaded, one query run), so a
        # model that does not load is one line before "serving" is announced, not a traceback after it; with Ray
        # Serve opened only (the replicas load the model where their resources are: a GPU this node may not have)
        if cfg.engine == "ray":
            ix.searcher  # noqa: B018
        else:
            ix.warm()
        if cfg.engine == "ray":
            _import_ray_serve()
        host, port = cfg.host, cfg.port
        _check_port(host, port)
        url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
        how = (f"{cfg.replicas} Ray Serve replica{'s' if cfg.replicas > 1 else ''}" if cfg.engine == "ray" else
               f"{workers} worker{'s' if workers > 1 else ''}, HTTP on {serving.protocol().library}")
        out.print(f"serving [bold]{len(ix):,}[/] passages of {ix.path} ({describe_index(ix.manifest)}) at "
                  f"{url}/retrieve ({how}); GET {url}/health, {url}/manifest", soft_wrap=True)
        if ix.fingerprint != ix.manifest["fingerprint"]:
            out.print(f"[yellow]warning[/]: --encoder {cfg.encoder or ix.manifest.get('dense', {}).get('encoder')} is not "
                      "the encoder the index was built with (--allow-other-encoder): the server announces fingerprint "
                      f"{ix.fingerprint[:16]}..., not the index's {ix.manifest['fingerprint'][:16]}...", soft_wrap=True)

        # idle or half-sent connections cannot take the server down: deadlines on a request's headers and body, a
        # cap on open connections below the descriptor limit that sheds idle ones (retrieval/_guard.py); secrets
        # in the access log's query strings masked
        os.environ[serving.ENV_LIMITS] = json.dumps({"max_connections": serving.descriptor_cap(cfg.max_connections),
                                                     "header_timeout": cfg.header_timeout, "body_timeout": cfg.body_timeout,
                                                     "min_body_rate": cfg.min_body_rate,
                                                     "max_body_bytes": cfg.max_body_bytes})
        kw = {"host": host, "port": port, "access_log": cfg.access_log, "log_level": "info",
              "timeout_graceful_shutdown": 5, "http": serving.protocol(), "timeout_keep_alive": 5,
              "log_config": serving.log_config()}
        if cfg.engine == "ray":
            del ix  # each replica maps its own copy
            _serve_ray(cfg, url, memory)
            return
        # (a small index whose files a writer opened since the check above is read whole: --in-memory not given)
        whole = cfg.in_memory is None and serving.small_enough(size)
        code = serving.run_server(ix, kw, workers=workers, threads=cfg.threads, whole_if_unleased=whole,
                                  **cfg.limits())
        if code:
            raise typer.Exit(code)


def _import_ray_serve() -> None:
    """Refuse --engine ray without Ray Serve, in one line, before anything is announced."""
    try:
        import ray.serve  # noqa: F401
    except ImportError as e:
        fail(f"--engine ray needs Ray Serve ({e})", "pip install 'rag-curriculum[ray]' (ray[serve])")


def _serve_ray(cfg: ServeConfig, url: str, in_memory: bool) -> None:
    options = {**cfg.limits(), "threads": cfg.threads, "encoder": cfg.encoder, "device": cfg.device,
               "allow_other_encoder": cfg.allow_other_encoder, "in_memory": in_memory}
    try:
        run_ray_serve(cfg.index, options, host=cfg.host, port=cfg.port, replicas=cfg.replicas, num_cpus=cfg.replica_cpus,
            num_gpus=cfg.replica_gpus, address=cfg.ray_address,
            on_ready=lambda: out.print(f"{cfg.replicas} replica{'s' if cfg.replicas > 1 else ''} ready on Ray Serve "
                                       f"at {url}/retrieve", soft_wrap=True))
    except KeyboardInterrupt:
        pass


def describe_index(m: dict[str, Any]) -> str:
    """One line on what an index is: its dataset or corpus, its retriever and settings (as its kind says them)."""
    kind = get_kind(m.get("retriever", "bm25"))
    return "; ".join([m.get("dataset") or "a corpus", kind.name, kind.settings_line(m)])


def register(app: typer.Typer) -> None:
    app.command("serve", context_settings={"help_option_names": ["-h", "--help"]})(serve)
