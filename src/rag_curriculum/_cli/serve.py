"""`curriculum serve`: an index of `curriculum index` behind HTTP, with Search-R1's retriever protocol (POST
/retrieve), for RL trainers that call a search tool (Search-R1, verl's search_r1_like tool, TRL scripts)."""

from __future__ import annotations

import json
import logging
import os
import socket
from typing import Annotated

import typer

from ..errors import ConfigError
from ..retrieval import CorpusIndex
from ..retrieval._server import ENV_INDEX, ENV_OPTIONS, make_app
from .common import fail, out, reported_errors

SERVE_HINT = "install the server: pip install 'rag-curriculum[serve]'"


def _hint(e: BaseException) -> str | None:
    if isinstance(e, ImportError) and (getattr(e, "name", None) or "").split(".")[0] in (
            "fastapi", "uvicorn", "starlette", "pydantic", "anyio", "bm25s", "scipy"):
        return SERVE_HINT
    return None


def _check_port(host: str, port: int) -> None:
    """Refuse, in one line, a port this machine cannot listen on (uvicorn would log a traceback-like error)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: a port in TIME_WAIT is free
        try:
            s.bind((host, port))
        except OSError as e:
            fail(f"cannot listen on {host}:{port}: {e.strerror or e}",
                 "pass another --port (or stop what listens there), or check --host")


def serve(
    index: Annotated[str, typer.Option("--index", help="Index directory made by curriculum index.",
                                       show_default=False)],
    host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0: every interface; there is no "
                                      "authentication, so only on a trusted network).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, max=256, help=(
        "Server processes (uvicorn workers), each with the index memory-mapped: the matrix and passages are "
        "shared through the page cache."))] = 1,
    max_batch: Annotated[int, typer.Option(min=1, max=1_000_000, help=(
        "The most queries one request may carry; a larger batch gets a 422 saying so."))] = 512,
    max_topk: Annotated[int, typer.Option(min=1, max=1_000_000, help=(
        "The largest topk a request may ask (a list never holds more than the index's passages)."))] = 100,
    default_topk: Annotated[int, typer.Option(min=1, max=1_000_000, help=(
        "topk of a request that gives none (Search-R1's default)."))] = 3,
    max_body_bytes: Annotated[int, typer.Option(min=1024, max=1 << 34, help=(
        "The largest request body in bytes; a larger one gets a 413 before it is read."))] = 8 * 1024 * 1024,
    max_query_chars: Annotated[int, typer.Option(min=1, max=1 << 24, help=(
        "The longest query in characters; a longer one gets a 422 saying so."))] = 4096,
    threads: Annotated[int, typer.Option(min=0, max=1024, help=(
        "bm25s threads per retrieval batch; 0: one per CPU."))] = 0,
    access_log: Annotated[bool, typer.Option(help="Log every request (uvicorn's access log).")] = False,
) -> None:
    """Serve a BM25 index over HTTP with Search-R1's retriever protocol: POST /retrieve with
    {"queries": [...], "topk": 3, "return_scores": true} answers {"result": [[{"document": {"id", "contents"},
    "score"}, ...], ...]}, one list per query, best first: exactly the index's ranking in process (same tokenizer,
    BM25 parameters and tie order). Without return_scores each list holds the documents alone;
    {"query": "...", "topk": 3} asks for one query. GET /health answers 200 once the index is loaded, GET /manifest
    what the index is. A bad request gets a 4xx with a one-line "detail"; the server goes on serving.

    [bold]Examples[/]

      curriculum serve --index indexes/musique-train --port 8000

      curriculum serve --index indexes/wiki18 --host 0.0.0.0 --workers 4 --max-batch 1024

    Search-R1 then trains with retriever.url=http://127.0.0.1:8000/retrieve (its search_url), verl's
    search_r1_like tool with retrieval_service_url=http://127.0.0.1:8000/retrieve.
    """
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    with reported_errors(_hint):
        if max_topk < default_topk:
            raise ConfigError(f"--default-topk {default_topk} is above --max-topk {max_topk}",
                              hint="raise --max-topk or lower --default-topk")
        import fastapi  # noqa: F401  (missing: the hint names the extra)
        import uvicorn

        ix = CorpusIndex(index, threads=threads)  # checks the directory against its manifest (fast: memory maps)
        _check_port(host, port)
        options = {"max_batch": max_batch, "max_topk": max_topk, "default_topk": default_topk,
                   "max_body_bytes": max_body_bytes, "max_query_chars": max_query_chars}
        url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
        out.print(f"serving [bold]{len(ix):,}[/] passages of {ix.path} ({ix.dataset}; bm25s {ix.manifest['bm25s_version']}, "
                  f"{ix.manifest['bm25']['method']} k1={ix.manifest['bm25']['k1']} b={ix.manifest['bm25']['b']}) at "
                  f"{url}/retrieve ({workers} worker{'s' if workers > 1 else ''}); GET {url}/health, {url}/manifest",
                  soft_wrap=True)
        kw = {"host": host, "port": port, "access_log": access_log, "log_level": "info", "timeout_graceful_shutdown": 5}
        if workers == 1:
            app = make_app(ix, **options)
            uvicorn.run(app, **kw)
        else:  # uvicorn's worker processes import the app: the index and limits go through the environment
            os.environ[ENV_INDEX] = os.path.abspath(index)
            os.environ[ENV_OPTIONS] = json.dumps({**options, "threads": threads})
            del ix
            uvicorn.run("rag_curriculum.retrieval._server:app_from_env", factory=True, workers=workers, **kw)


def register(app: typer.Typer) -> None:
    app.command("serve", context_settings={"help_option_names": ["-h", "--help"]})(serve)
