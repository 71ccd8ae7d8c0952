"""`curriculum index`: a BM25 index (bm25s) over a dataset file's paragraphs and an optional corpus, with the
rankings of the file's questions, for --distractors bm25|mixed and --setting retrieved builds."""

from __future__ import annotations

import logging
from typing import Annotated, Any

import typer

from ..config import bind, given
from ..curricula._builder import current_command
from ..errors import UsageError
from ..retrieval import IndexConfig, build_index
from .common import PrintConfig, config_options, console, out, reported_errors, show_config, with_options

C = IndexConfig
#: IndexConfig's options, one per field.
OPTIONS = config_options(C, short={"dataset": "-d", "input": "-i", "out": "-o"})


@with_options(OPTIONS)
def index(
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
    print_config: PrintConfig = False,
    **options: Any,
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
    logging.getLogger("bm25s").setLevel(logging.WARNING)  # its per-step debug lines are not for users
    flags = given(options)
    with reported_errors(lambda e: "check --input, --corpus and --out" if isinstance(e, OSError) else None):
        if "dataset" not in flags or "input" not in flags:
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
