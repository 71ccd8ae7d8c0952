"""`curriculum partition` (base-answerable / base-unanswerable by pass@k) and `curriculum partition-merge`.

    curriculum partition recipe=rag-rl-pass8 input=PATH/TO/musique_ans_v1.0_train.jsonl    # the paper's partition
    curriculum partition outputs/musique-max recipe=rag-rl-pass8 model=outputs/my-base --num-shards 8 ...
    curriculum partition outputs/musique-max --model Qwen/Qwen2.5-7B-Instruct --pass-at 8 --balance \\
        --out outputs/musique-partition
    for i in 0 1 2 3 4 5 6 7; do CUDA_VISIBLE_DEVICES=$i curriculum partition outputs/musique-max \\
        --model Qwen/Qwen2.5-7B-Instruct --num-shards 8 --shard-index $i --out outputs/musique-partition & done; wait
    curriculum partition-merge node0/musique-partition node1/musique-partition --out outputs/musique-partition
    curriculum partition outputs/musique-max --agent search-r1 --retriever indexes/musique-train \\
        --model PeterJinGo/SearchR1-nq_hotpotqa_train-qwen2.5-7b-em-ppo --pass-at 8 --out outputs/musique-agent

The options are PartitionConfig's fields (their help is the fields' own); a recipe (recipe=NAME, recipes/partition/)
and key=value overrides set the same fields, and the options given on the command line win.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from .._plumbing import current_command, rate_text
from .._settings import MAX_COUNT, check_value
from ..config import field_help, given, merge_flags, resolve
from ..errors import UsageError
from ..partition import PartitionConfig, merge_partitions
from ..partition import partition as run_partition
from .common import PrintConfig, config_options, console, out, reported_errors, show_config, with_options
from .generating import BACKEND_OPTIONS, ENGINE_OPTIONS, GENERATION_ONLY, backend_options, generation_run

P = PartitionConfig
#: PartitionConfig's options: one per field (SHARDS is the positional argument, rows_per_shard a recipe key, and
#: backend_args the shared backend block's --backend-arg), with their short aliases.
OPTIONS = config_options(P, exclude=("backend_args",), types={"out": Path},
                         short={"out": "-o", "dataset": "-d", "input": "-i", "n": "-n", "K": "-K", "model": "-M",
                                "samples": "-k"})
#: Options of the command line only (how this process runs), not fields of PartitionConfig.
CLI_ONLY = ("args", "max_chunks", *GENERATION_ONLY)


def split_shards(args: list[str] | None) -> tuple[str | None, list[str]]:
    """The positional arguments: the SHARDS directory (the one without ``=``), and recipe=NAME plus key=value
    overrides (every token with ``=``, or a Hydra ``~key`` deletion).

    >>> split_shards(["outputs/musique-max", "recipe=rag-rl-pass8", "samples=4"])
    ('outputs/musique-max', ['recipe=rag-rl-pass8', 'samples=4'])
    """
    paths = [a for a in args or [] if "=" not in a and not a.startswith("~")]
    if len(paths) > 1:
        raise UsageError(f"one shard directory, got {len(paths)}: {', '.join(paths)}",
                         hint="arguments are SHARDS (a directory), recipe=NAME and key=value overrides; a path with "
                         "'=' in its name goes as shards=PATH")
    return (str(Path(paths[0])) if paths else None), [a for a in args or [] if a not in paths]


def merge_options(data: dict[str, Any] | None, flags: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """A recipe's data (None: no recipe) with the options the user set on top; the backend options (among
    ``options``, the command's) go to ``backend_args`` when the chosen backend takes them. A shard directory
    replaces the recipe's ``dataset`` (the two are alternative inputs) unless an input file or --dataset is given
    too."""
    merged = merge_flags(data, flags)
    if data is not None and merged.get("shards") and not merged.get("input") and "dataset" not in given(flags):
        merged["dataset"] = None
    args = backend_options(merged.get("backend", P.backend), options)
    merged["backend_args"] = {**(merged.get("backend_args") or {}), **args}
    return merged


@with_options(OPTIONS, BACKEND_OPTIONS, ENGINE_OPTIONS)
def partition(
    args: Annotated[list[str] | None, typer.Argument(
        metavar="SHARDS recipe=NAME KEY=VALUE", show_default=False,
        help=f"SHARDS: {field_help(P, 'shards')} recipe=NAME (recipes/partition/, e.g. "
        "rag-rl-pass8: the paper's pass@8) and key=value overrides of its fields (Hydra syntax), e.g. samples=4.")] = None,
    max_chunks: Annotated[int | None, typer.Option(help="Stop after generating this many chunks (run again to "
                                                   "continue).", show_default=False)] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    print_config: PrintConfig = False,
    **options: Any,
) -> None:
    """Partition questions by what a base model can answer (RAG-RL 3.2, appendix A): sample k completions per
    question, score each final answer by F1, and write answerable/ (some sample has F1 = 1), unanswerable/ (none),
    learnable/ (0 < c < k), and stats.parquet (n, c, every sample's F1, pass@j for j <= k).

    With options, or from a recipe (recipe=rag-rl-pass8: the paper's pass@8 at level K, balanced) whose values
    key=value overrides and the options change. Resumable: results are flushed in chunks; after a crash or kill,
    run the same command again. Scale out with --num-shards N --shard-index I (one process per GPU,
    CUDA_VISIBLE_DEVICES=I); processes sharing --out write the outputs when the last one finishes; directories
    from separate machines are joined with `curriculum partition-merge`. Running again with other --balance /
    --correct-f1 / --strict-format re-buckets without generating.

    With --agent search-r1 (or react) --retriever DIR|URL the model is a search agent: k trajectories per question
    through the search environment (--template, --top-k, --max-turns, --max-context-tokens, --search-difficulty), split
    into answerable-without-search/, answerable-with-search/, unanswerable/ (and learnable/), with searches per
    success in stats.parquet."""
    # With --agent search-r1 --retriever DIR|URL: a search agent's partition (partition/_agent.py): k trajectories
    # per question through the search environment, split answerable-without-search / -with-search / unanswerable.
    with reported_errors():
        if max_chunks is not None:
            check_value("max_chunks", max_chunks, int, {"ge": 1, "le": MAX_COUNT}, flag="--max-chunks")
        shards, overrides = split_shards(args)
        flags = {k: v for k, v in options.items() if k not in CLI_ONLY}
        flags["shards"] = shards
        flags["out"] = str(flags["out"]) if flags["out"] is not None else None
        cfg = resolve(PartitionConfig, "partition", overrides, flags,
                      merge=lambda data, set_: merge_options(data, set_, options))
        cfg.validate()
        if print_config:
            show_config(cfg)
            return
        cfg.check_model()  # a mistyped path stops here, not deep inside the model loader
        result = run_partition(cfg, max_chunks=max_chunks, **generation_run(options, progress))
    if not result.complete:
        rep = result.run
        left = len(rep.remaining) if rep else 0
        what = (f"stopped with {left} chunk(s) of this shard left: run the same command again to continue" if left
                else f"shard {cfg.shard_index} of {cfg.num_shards} is done; the outputs are written when every shard "
                "is (processes sharing --out do it themselves; join directories of other machines with "
                "`curriculum partition-merge`)")
        if rep is not None:
            console.print(f"generated {rep.generated_questions:,} question(s), {rep.completions:,} completions in "
                          f"{rep.seconds:,.1f}s ({rate_text(rep.completions_per_second, 'completions')})")
        console.print(f"[yellow]{what}[/]")
        return
    print_summary(result)


def print_summary(result: Any) -> None:
    from rich.table import Table

    s = result.summary or {}
    c = s.get("counts", {})
    n = c.get("samples_per_question", 0)
    scored = max(c.get("scored", 0), 1)
    gen = (s.get("generation") or {}).get("fingerprint", {}).get("generation", {})
    t = Table(title=f"partition of {s.get('input', {}).get('path')} by {gen.get('model')} (pass@{n})",
              title_justify="left")
    t.add_column("")
    t.add_column("questions", justify="right")
    t.add_column("share", justify="right")
    t.add_row("questions", f"{c.get('questions', 0):,}", "")
    if c.get("skipped"):
        t.add_row("skipped (prompt too long)", f"{c['skipped']:,}", "")
    rows = (("answerable", "base-answerable (c > 0)"), ("unanswerable", "base-unanswerable (c = 0)"),
            ("learnable", "learnable (0 < c < k)"))
    if "answerable-with-search" in c:  # a search agent's partition (--agent)
        rows = (("answerable-without-search", "answerable without search"),
                ("answerable-with-search", "answerable with search only"), ("unanswerable", "unanswerable (c = 0)"),
                ("learnable", "learnable (0 < c < k)"))
    for key, label in rows:
        t.add_row(label, f"{c.get(key, 0):,}", f"{c.get(key, 0) / scored:.1%}")
    bal = s.get("balance") or {}
    if bal.get("enabled"):
        t.add_row("kept per bucket (--balance)", f"{bal.get('size', 0):,}", "")
    pak = c.get("mean_pass_at_k") or {}
    ci = c.get("pass_at_k_interval") or {}
    if pak:
        for k in dict.fromkeys(("1", str(n))):  # with its 95% interval over the questions (partitions since it)
            span = f" \\[{ci[k][0]:.4f}, {ci[k][1]:.4f}]" if ci.get(k) else ""
            t.add_row(f"mean pass@{k}" + (" (95% interval)" if span else ""), f"{pak.get(k) or 0:.4f}{span}", "")
    if c.get("format_valid_rate") is not None:
        t.add_row("samples in the output format", "", f"{c['format_valid_rate']:.1%}")
        if c["format_valid_rate"] == 0 and "answerable-with-search" in c:  # a search agent's: its protocol
            ends = ", ".join(f"{k} {v:,}" for k, v in sorted((c.get("status") or {}).items()))
            t.caption = (f"no trajectory kept the agent protocol's format (how they ended: {ends or '-'}): no "
                         "answer was taken from them; each sample's format errors are in stats.parquet "
                         "(sample_format_errors) and each trajectory in work/")
            t.caption_justify = "left"
        elif c["format_valid_rate"] == 0:  # what a base model does: said where the 0 is printed
            t.caption = ("no sample kept the output format (base models never do): the answers are scored all the "
                         "same; citation F1 needs it (docs/base-models.md#why-citation-and-joint-f1-are-0)")
            t.caption_justify = "left"
    if c.get("searches_per_sample") is not None:
        t.add_row("searches per sample", f"{c['searches_per_sample']:.3f}", "")
    if c.get("searches_per_success") is not None:
        t.add_row("searches per success", f"{c['searches_per_success']:.3f}", "")
    out.print(t)
    rep = result.run
    if rep is not None and rep.generated_chunks:
        console.print(f"generated {rep.generated_questions:,} question(s), {rep.completions:,} completions in "
                      f"{rep.seconds:,.1f}s ({rate_text(rep.completions_per_second, 'completions')})")
    elif rep is not None:
        console.print("every chunk was already generated; outputs re-written from work/")
    outputs = s.get("outputs") or {}
    console.print(f"[green]done:[/] {result.out}/ " + ", ".join(f"{k}/ ({v['rows']:,} rows)"
                                                                for k, v in outputs.items()) + ", stats.parquet")


#: The output settings a merge may change (PartitionConfig's fields, under a heading of their own): not given, the
#: run's recorded value holds.
MERGE_FIELDS = ("balance", "correct_f1", "strict_format", "keep_completions")
MERGE_OPTIONS = config_options(P, only=MERGE_FIELDS, defaults=dict.fromkeys(MERGE_FIELDS, "the run's"),
                               panel="Override the run's output settings")


@with_options(MERGE_OPTIONS)
def partition_merge(
    dirs: Annotated[list[Path], typer.Argument(help="The --out directories of the shard runs (one run, several "
                                               "machines). One directory re-writes its outputs.",
                                               show_default=False)],
    out_dir: Annotated[Path | None, typer.Option("--out", "-o", help="Where to write the joined outputs. "
                                                 "\\[default: the first directory]", show_default=False)] = None,
    shards: Annotated[Path | None, typer.Option("--shards", help="The input shard directory, when it is no longer "
                                                "where the runs recorded it.", show_default=False)] = None,
    **overrides: Any,
) -> None:
    """Join the work directories of a partition run that was sharded over several machines (copying each one's
    finished chunks into --out) and write answerable/, unanswerable/, learnable/ and stats.parquet. Output
    options can be changed here without generating again."""
    options = given(overrides)
    with reported_errors():
        result = merge_partitions(dirs, out=out_dir, shards=shards, command=current_command(), **options)
    print_summary(result)


def register(app: typer.Typer) -> None:
    """Add `curriculum partition` and `curriculum partition-merge` to the `curriculum` app."""
    app.command("partition")(partition)
    app.command("partition-merge")(partition_merge)
