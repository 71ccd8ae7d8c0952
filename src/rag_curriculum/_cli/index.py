"""`curriculum index`: an index of a retriever kind (bm25, dense, hybrid, or a registered one; its options are
IndexConfig's, each kind's declared in its module) over a dataset file's paragraphs and an optional corpus, with
the rankings of the file's questions, for --distractors KIND|mixed and --setting retrieved builds."""

from __future__ import annotations

import logging
from typing import Annotated, Any

import typer
from rag_retriever import IndexConfig, build_index, get_kind, load_index, placement_flags

from .. import retrieval  # noqa: F401  (the toolkit's loaders read --dataset)
from .._plumbing import current_command, drop_options
from ..config import bind, given
from ..errors import UsageError
from .common import (
    PrintConfig,
    config_options,
    console,
    data_error_hint,
    out,
    reported_errors,
    show_config,
    with_options,
)

C = IndexConfig
#: IndexConfig's options, one per field.
OPTIONS = config_options(C, short={"dataset": "-d", "input": "-i", "out": "-o"})


@with_options(OPTIONS)
def index(
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
    print_config: PrintConfig = False,
    **options: Any,
) -> None:
    """Index every distinct paragraph (title + text) of a dataset file, and/or every line of a corpus of
    {"title", "text"} or {"id", "contents"} JSONL lines (Search-R1's wiki-18 layout, each line kept with its own id
    and contents), with BM25 (bm25s), and store each of the dataset's questions' ranking of the best --depth
    passages. Builds then draw BM25 distractors (--distractors
    bm25|mixed --index DIR) or retrieved passages (--setting retrieved --index DIR) from it. The directory holds
    bm25s's matrix (memory-mapped when loaded), the passages, the rankings and a manifest (source checksums,
    tokenizer, BM25 parameters, counts), written last. The BM25 search is compiled (numba) before the command
    returns and cached, so `curriculum serve` on this machine is healthy in seconds from its first start.

    [bold]Examples[/]

      curriculum index --dataset hotpotqa --input hotpot_train_v1.1.json --out indexes/hotpotqa-train

      curriculum index -d musique -i musique_ans_v1.0_dev.jsonl --corpus wiki-18.jsonl -o indexes/wiki18-musique

      curriculum index --corpus wiki-18.jsonl -o indexes/wiki18

    Serve it to RL trainers (Search-R1's protocol): curriculum serve --index indexes/wiki18
    """
    logging.getLogger("bm25s").setLevel(logging.WARNING)  # its per-step debug lines are not for users
    flags = given(options)
    with reported_errors(lambda e: "check --input, --corpus and --out" if isinstance(e, OSError) else
                         data_error_hint(e)):
        if not ("dataset" in flags and "input" in flags) and "corpus" not in flags:
            raise UsageError("curriculum index needs --dataset and --input (a dataset file), --corpus (a corpus), or "
                             "both", hint="e.g. curriculum index --dataset musique --input musique_ans_v1.0_dev.jsonl "
                                          "--out indexes/musique-dev, or curriculum index --corpus wiki-18.jsonl "
                                          "--out indexes/wiki18")
        cfg = bind(IndexConfig, flags)
        if print_config:
            show_config(cfg)
            return
        # the placement options (--engine ray ...) say where the work ran, not what it made: left out of the record
        m = build_index(cfg, progress=progress and console.is_terminal,
                        command=drop_options(current_command(), placement_flags()))
        if get_kind(m["retriever"]).warm_on_build:  # BM25: the search compiled now, so the first serve starts cached
            with console.status("compiling the search (cached for every later start on this machine)"):
                load_index(cfg.out, check="sizes").warm()  # (its files were hashed as they were written)
    out.print(f"[green]indexed[/] {m['passages']:,} passages ({_sources(m)}) into [bold]{cfg.out}[/] ({_kind(m)})"
              + (f"; ranked {m['questions']:,} questions to depth {m['depth']}" if m["questions"] else ""))
    tuned = (m.get("dense") or {}).get("tuned")
    if tuned:
        out.print(_tuned(tuned))


def _tuned(t: dict[str, Any]) -> str:
    """The ``--target-recall`` line: the setting chosen, its recall on the queries it was chosen on and on those
    held out of the choice."""
    setting = ", ".join(f"{name} {t[key]}" for key, name in (("nprobe", "nprobe"), ("ef_search", "efSearch"),
                                                             ("refine", "refine")) if key in t)
    held = t.get("held_out")
    line = (f"tuned to target recall@{t['k']} {t['target_recall']:g}: {setting}; recall {t['recall']:.4f} on "
            f"{t['queries']:,} tuning queries ({t['queries_from']})")
    if not held:
        return line + ", none held out (too few)"
    mark = "" if held["recall"] >= t["target_recall"] else " [yellow](below the target)[/]"
    return line + f", {held['recall']:.4f} on {held['queries']:,} held out of the choice{mark}"


def _sources(m: dict[str, Any]) -> str:
    parts = []
    for s in m["sources"]:
        if s["kind"] == "dataset":
            parts.append(f"{s['distinct']:,} distinct of {s['paragraphs']:,} paragraphs of {s['questions']:,} "
                         "questions")
        else:
            parts.append(f"{s['lines']:,} corpus lines")
    return " + ".join(parts)


def _kind(m: dict[str, Any]) -> str:
    kind = get_kind(m["retriever"])
    vocabulary = f", vocabulary {m['vocab_size']:,}" if "vocab_size" in m else ""
    return f"{kind.title()}: {kind.settings_line(m)}{vocabulary}"


def register(app: typer.Typer) -> None:
    app.command("index", context_settings={"help_option_names": ["-h", "--help"]})(index)
