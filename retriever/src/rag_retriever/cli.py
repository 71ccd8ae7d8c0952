"""``rag-retriever``: ``index`` a corpus (and optionally a dataset file's paragraphs), ``validate`` an index,
``serve`` it with Search-R1's retriever protocol. Each command's options are its config's fields
(:class:`~rag_retriever.IndexConfig`, :class:`~rag_retriever.ServeConfig`), with their help, types and ranges; the
retriever's errors come out as one ``error:`` line and a ``hint:`` line (exit status 1; 2 for a usage error)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import sys
import typing
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import click
from rag_plumbing._ports import LISTEN_HINT, claim_port

from ._corpus import check_corpus
from .errors import RetrieverError, UnknownNameError, UsageError

EXIT_ERROR, EXIT_USAGE = 1, 2


def _fail(message: str, hint: str | None = None, code: int = EXIT_ERROR) -> None:
    click.echo(f"error: {message}", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)
    sys.exit(code)


@contextmanager
def _reported() -> Iterator[None]:
    """The retriever's errors (and the ValueError / KeyError / OSError / ImportError of bad input or a missing
    extra) as one line and a hint."""
    try:
        yield
    except (RetrieverError, ValueError, KeyError, OSError, ImportError) as e:
        hint = getattr(e, "hint", None)
        if hint is None and isinstance(e, ImportError):
            hint = ("install the extra it belongs to: pip install 'rag-retriever[serve]' (the server), "
                    "'rag-retriever[fast]' (numba, bm25s), 'rag-retriever[dense]' or 'rag-retriever[ray]'")
        text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
        _fail(_own(text or type(e).__name__), _own(hint) if hint else hint,
              EXIT_USAGE if isinstance(e, (UsageError, UnknownNameError)) else 1)


#: rag-curriculum's names for this package's commands and extras (the errors are shared with `curriculum index`,
#: `validate` and `serve`), and this command's own: what a hint of ``rag-retriever`` names.
_OWN = ((re.compile(r"\bcurriculum (index|validate|serve)\b"), r"rag-retriever \1"),
        (re.compile(r"\brag-curriculum\[(dense|ray|serve|fast)\]"), r"rag-retriever[\1]"),
        (re.compile(r"\brag-curriculum\[retrieval\]"), "rag-retriever[fast]"))


def _own(text: str) -> str:
    """``text`` naming this command's commands and extras (``rag-retriever index``, ``rag-retriever[dense]``),
    not rag-curriculum's."""
    for pattern, repl in _OWN:
        text = pattern.sub(repl, text)
    return text


def _check_port(host: str, port: int) -> None:
    """Claim the port for this server and refuse, in one line, a port another server holds or this machine cannot
    listen on (before the index is opened: ``rag_plumbing._ports``)."""
    problem = claim_port(host, port)
    if problem:
        raise UsageError(problem, hint=LISTEN_HINT)


def _options(cls: type, required: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """One click option per field of the config dataclass ``cls`` (its flag, type and help); an option left out
    is not passed, so the config's default holds."""
    from rag_plumbing._settings import choices_of, setting_flag

    hints = typing.get_type_hints(cls)

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        for f in reversed(dataclasses.fields(cls)):
            flag = setting_flag(f)
            if flag is None:
                continue
            tp = hints[f.name]
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            base = args[0] if args and typing.get_origin(tp) is not None else tp
            meta = f.metadata.get("setting") or {}
            help_text = f.metadata.get("help", "")
            if base is bool:
                decls = [f"{flag}/--no-{flag[2:]}", f.name]
                fn = click.option(*decls, default=None, help=help_text)(fn)
                continue
            ctype: Any = {int: int, float: float}.get(base, str)
            if meta.get("choices") is not None and not callable(meta["choices"]):
                ctype = click.Choice(choices_of(meta))
            fn = click.option(flag, f.name, type=ctype, default=None, required=f.name in required,
                              help=help_text)(fn)
        return fn

    return decorate


def _given(options: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in options.items() if v is not None}


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rag-retriever")
def main() -> None:
    """Index a corpus (Search-R1's {"id", "contents"} JSONL or {"title", "text"}), validate the index, serve it with
    Search-R1's retriever protocol (POST /retrieve)."""
    from rag_plumbing._secrets import mask_output

    mask_output()  # every line printed, by the commands, their logs and the libraries, masked as the toolkit masks
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("bm25s").setLevel(logging.WARNING)


def _index_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    from . import IndexConfig

    return _options(IndexConfig)(fn)


@main.command("index")
@click.option("--progress/--no-progress", default=True, help="Show progress bars.")
@_index_options
def index_command(progress: bool, **options: Any) -> None:
    """Index every line of --corpus (one passage per line, kept with its own id and contents), and optionally a
    dataset file's paragraphs (--dataset NAME --input FILE, read by an installed dataset reader), with BM25 (the
    Lucene preset on a Search-R1 corpus), dense or hybrid.

    Example: rag-retriever index --corpus wiki-18.jsonl --out indexes/wiki18"""
    from rag_plumbing._ray import drop_options
    from rag_plumbing._settings import bind

    with _reported():
        flags = _given(options)
        if "corpus" not in flags and not ("dataset" in flags and "input" in flags):
            raise UsageError("rag-retriever index needs --corpus (a corpus JSONL), or --dataset and --input",
                             hint="e.g. rag-retriever index --corpus wiki-18.jsonl --out indexes/wiki18")
        if "corpus" in flags:  # what is wrong with the corpus is said before any engine is imported
            check_corpus(flags["corpus"])
        from . import IndexConfig, build_index, get_kind, load_index, placement_flags

        cfg = bind(IndexConfig, flags, error=UsageError)
        command = drop_options(" ".join(["rag-retriever", *sys.argv[1:]]), placement_flags())
        m = build_index(cfg, progress=progress and sys.stderr.isatty(), command=command)
        if get_kind(m["retriever"]).warm_on_build:  # BM25: the search compiled now, cached for every later start
            load_index(cfg.out, check="sizes").warm()
    kind = get_kind(m["retriever"])
    click.echo(f"indexed {m['passages']:,} passages into {cfg.out} ({kind.title()}: {kind.settings_line(m)})"
               + (f"; ranked {m['questions']:,} questions to depth {m['depth']}" if m["questions"] else ""))


@main.command("validate")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--quick", is_flag=True, help="Check the files' sizes and counts only, not their contents.")
@click.option("--full", is_flag=True, help="Rank every stored ranking again (default: up to 2,000 of them).")
def validate_command(directory: str, quick: bool, full: bool) -> None:
    """Check an index: every file's SHA-256 against its manifest, the passages' digest, their keys and the
    fingerprint recomputed, the kind's files read whole, the stored rankings ranked again."""
    from . import get_kind, load_index

    if quick and full:
        _fail("--quick and --full contradict each other", "pass one of them", EXIT_USAGE)
    with _reported():
        idx = load_index(directory, check="sizes" if quick else "full")
        report = None if quick else idx.verify(rerank=None if full else 2000)
    m = idx.manifest
    kind = get_kind(m["retriever"])
    click.echo(f"{directory}: a {kind.title()} index: {m['passages']:,} passages, {m['questions']:,} questions "
               f"ranked to depth {m['depth']}; " + ("sizes and counts match its manifest" if quick else
                                                    f"valid ({json.dumps(report, sort_keys=True)})"))


def _serve_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    from . import ServeConfig

    return _options(ServeConfig, required=("index",))(fn)


@main.command("serve")
@_serve_options
def serve_command(**options: Any) -> None:
    """Serve an index over HTTP with Search-R1's retriever protocol: POST /retrieve with {"queries": [...],
    "topk": 3, "return_scores": true} answers {"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]};
    GET /health, GET /manifest.

    Example: rag-retriever serve --index indexes/wiki18 --port 8000 (Search-R1: retriever.url=
    http://127.0.0.1:8000/retrieve)"""
    from rag_plumbing._settings import bind

    from . import CorpusIndex, ServeConfig, serving

    with _reported(), ExitStack() as scope:
        cfg = bind(ServeConfig, _given(options), error=UsageError)
        if cfg.engine != "ray":
            _check_port(cfg.host, cfg.port)
        import uvicorn  # noqa: F401  (missing: said before the index is read)

        leases = cfg.engine != "ray"  # (Ray Serve's replicas take none: without one, the quarter-of-memory rule)
        memory, size = serving.choose_into_memory(cfg.index, cfg.in_memory, leases=leases)
        scope.enter_context(serving.reading_into_memory(memory))
        workers = serving.workers_for(cfg.workers) if leases else 1
        if workers > 1:  # loaded once here, then forked: no thread pool started before the fork
            serving.single_threaded()
        ix = CorpusIndex(cfg.index, threads=1 if workers > 1 else cfg.threads, encoder=cfg.encoder, device=cfg.device,
                         verify=cfg.verify, allow_other_encoder=cfg.allow_other_encoder)
        click.echo(ix.check_line())
        leased = leases and not memory and serving.can_lease(cfg.index)
        click.echo(serving.memory_line(memory, size, leased=leased))
        options = {**cfg.limits(), "threads": cfg.threads, "encoder": cfg.encoder, "device": cfg.device,
                   "allow_other_encoder": cfg.allow_other_encoder, "in_memory": memory}
        if cfg.engine == "ray":
            del ix  # each replica maps its own copy
            serving.run_ray_serve(cfg.index, options, host=cfg.host, port=cfg.port, replicas=cfg.replicas,
                                  num_cpus=cfg.replica_cpus, num_gpus=cfg.replica_gpus, address=cfg.ray_address)
            return
        ix.warm()
        os.environ[serving.ENV_LIMITS] = json.dumps({
            "max_connections": serving.descriptor_cap(cfg.max_connections), "header_timeout": cfg.header_timeout,
            "body_timeout": cfg.body_timeout, "min_body_rate": cfg.min_body_rate, "max_body_bytes": cfg.max_body_bytes})
        kw = {"host": cfg.host, "port": cfg.port, "access_log": cfg.access_log, "log_level": "info",
              "timeout_graceful_shutdown": 5, "http": serving.protocol(), "timeout_keep_alive": 5,
              "log_config": serving.log_config()}
        click.echo(f"serving {len(ix):,} passages of {ix.path} at http://{cfg.host}:{cfg.port}/retrieve")
        code = serving.run_server(ix, kw, workers=workers, threads=cfg.threads, **cfg.limits(),
                                  whole_if_unleased=cfg.in_memory is None and serving.small_enough(size))
        if code:
            sys.exit(code)


if __name__ == "__main__":
    main()
