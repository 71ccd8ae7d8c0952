"""`curriculum index`: a BM25 index (bm25s) over a dataset file's paragraphs and an optional corpus, with the
rankings of the file's questions, for --distractors bm25|mixed and --setting retrieved builds."""

from __future__ import annotations

from typing import Annotated

import typer

from ..retrieval import IndexConfig
from .common import PrintConfig, console, option, out, reported_errors, show_config

C = IndexConfig


def index(
    dataset: Annotated[str | None, option(C, "dataset", "--dataset", "-d")] = None,
    input: Annotated[str | None, option(C, "input", "--input", "-i")] = None,
    corpus: Annotated[str | None, option(C, "corpus", "--corpus")] = None,
    out_dir: Annotated[str | None, option(C, "out", "--out", "-o")] = None,
    k1: Annotated[float | None, option(C, "k1", "--k1")] = None,
    b: Annotated[float | None, option(C, "b", "--b")] = None,
    method: Annotated[str | None, option(C, "method")] = None,
    delta: Annotated[float | None, option(C, "delta")] = None,
    stopwords: Annotated[str | None, option(C, "stopwords")] = None,
    depth: Annotated[int | None, option(C, "depth")] = None,
    threads: Annotated[int | None, option(C, "threads")] = None,
    backend: Annotated[str | None, option(C, "backend")] = None,
    on_error: Annotated[str | None, option(C, "on_error")] = None,
    overwrite: Annotated[bool | None, option(C, "overwrite")] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
    print_config: PrintConfig = False,
) -> None:
    """Index every distinct paragraph (title + text) of a dataset file, and optionally a corpus of
    {"title", "text"} or {"id", "contents"} JSONL lines (Search-R1's wiki-18 layout), with BM25 (bm25s), and store
    each question's ranking of the best --depth passages. Builds then draw BM25 distractors (--distractors
    bm25|mixed --index DIR) or retrieved passages (--setting retrieved --index DIR) from it. The directory holds
    bm25s's matrix (memory-mapped when loaded), the passages, the rankings and a manifest (source checksums,
    tokenizer, BM25 parameters, counts), written last.

    [bold]Examples[/]

      curriculum index --dataset hotpotqa --input hotpot_train_v1.1.json --out indexes/hotpotqa-train

      curriculum index -d musique -i musique_ans_v1.0_dev.jsonl --corpus wiki-18.jsonl -o indexes/wiki18

    Serve it to RL trainers (Search-R1's protocol): curriculum serve --index indexes/wiki18
    """
    import logging

    from ..config import bind, given
    from ..curricula.builder import current_command
    from ..retrieval import build_index

    logging.getLogger("bm25s").setLevel(logging.WARNING)  # its per-step debug lines are not for users
    flags = given({"dataset": dataset, "input": input, "corpus": corpus, "out": out_dir, "k1": k1, "b": b,
                   "method": method, "delta": delta, "stopwords": stopwords, "depth": depth, "threads": threads,
                   "backend": backend, "on_error": on_error, "overwrite": overwrite})
    with reported_errors(lambda e: "check --input, --corpus and --out" if isinstance(e, OSError) else None):
        if "dataset" not in flags or "input" not in flags:
            from ..errors import UsageError

            raise UsageError("curriculum index needs --dataset and --input",
                             hint="e.g. curriculum index --dataset musique --input musique_ans_v1.0_dev.jsonl "
                                  "--out indexes/musique-dev")
        cfg = bind(IndexConfig, flags)
        if print_config:
            show_config(cfg)
            return
        m = build_index(cfg, progress=progress and console.is_terminal, command=current_command())
    src = m["sources"][0]
    out.print(f"[green]indexed[/] {m['passages']:,} passages ({src['paragraphs']:,} paragraphs of {src['questions']:,} "
              f"questions before deduplication{', plus a corpus' if len(m['sources']) > 1 else ''}; vocabulary "
              f"{m['vocab_size']:,}) and ranked {m['questions']:,} questions to depth {m['depth']} into "
              f"[bold]{cfg.out}[/] (bm25s {m['bm25s_version']}, {m['bm25']['method']} k1={m['bm25']['k1']} "
              f"b={m['bm25']['b']})")


def register(app: typer.Typer) -> None:
    app.command("index", context_settings={"help_option_names": ["-h", "--help"]})(index)
