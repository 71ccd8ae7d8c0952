"""`curriculum build`: a curriculum (or an evaluation set) from a dataset file or the Hub, or from a recipe."""

from __future__ import annotations

from functools import partial
from typing import Annotated

import typer
from rich.markup import escape

from ..curricula.config import BuildConfig, SourceSpec
from .common import PrintConfig, console, option, out, reported_errors, show_config

B = BuildConfig


def build(
    ctx: typer.Context,
    overrides: Annotated[list[str] | None, typer.Argument(
        help="recipe=NAME and key=value overrides of the recipe (Hydra syntax), e.g. recipe=musique-min-max n=500",
        show_default=False)] = None,
    dataset: Annotated[list[str] | None, option(SourceSpec, "dataset", "--dataset", "-d", extra=(
        "Repeat for a mixture, with a quota as NAME:N (e.g. -d musique:10000 -d hotpotqa:5000)."))] = None,
    input: Annotated[list[str] | None, option(SourceSpec, "input", "--input", "-i", extra=(
        "One for each --dataset, in the same order."))] = None,
    schedule: Annotated[str | None, option(B, "schedule")] = None,
    pieces: Annotated[str | None, option(B, "pieces")] = None,
    K: Annotated[int | None, option(B, "K", "--K", "-K", default="the paper's: HotpotQA 10, MuSiQue 20, 2Wiki 10")
                 ] = None,
    n: Annotated[str | None, option(SourceSpec, "n", "--n", "-n", default="all, or the recipe's")] = None,
    seed: Annotated[int | None, option(B, "seed")] = None,
    order: Annotated[str | None, option(B, "order")] = None,
    setting: Annotated[str | None, option(B, "setting")] = None,
    split: Annotated[str | None, option(SourceSpec, "split")] = None,
    max_distractors: Annotated[int | None, option(B, "max_distractors")] = None,
    distractors: Annotated[str | None, option(B, "distractors")] = None,
    index: Annotated[str | None, option(B, "index", "--index")] = None,
    top_k: Annotated[int | None, option(B, "top_k", "--top-k")] = None,
    template: Annotated[str | None, option(B, "template")] = None,
    index_base: Annotated[int | None, option(B, "index_base")] = None,
    batch_prompts: Annotated[int | None, option(B, "batch_prompts", "--batch-prompts", "-P")] = None,
    tail: Annotated[str | None, option(B, "tail")] = None,
    eval_sets: Annotated[list[str] | None, option(B, "eval_sets", "--eval-set", extra="Repeatable.")] = None,
    leakage: Annotated[str | None, option(B, "leakage")] = None,
    rows_per_shard: Annotated[int | None, option(B, "rows_per_shard")] = None,
    on_error: Annotated[str | None, option(B, "on_error")] = None,
    out_dir: Annotated[str | None, option(B, "out", "--out", "-o", default="outputs/DATASET-SCHEDULE, or the "
                                         "recipe's")] = None,
    allow_split_mismatch: Annotated[bool | None, option(B, "allow_split_mismatch")] = None,
    include_unanswerable: Annotated[bool | None, option(B, "include_unanswerable")] = None,
    unanswerable_fraction: Annotated[float | None, option(B, "unanswerable_fraction")] = None,
    abstention_answer: Annotated[str | None, option(B, "abstention_answer")] = None,
    workers: Annotated[int | None, option(B, "workers")] = None,
    tokenizer: Annotated[str | None, option(B, "tokenizer", "--tokenizer")] = None,
    overwrite: Annotated[bool | None, option(B, "overwrite")] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
    print_config: PrintConfig = False,
) -> None:
    """Build a curriculum of controlled difficulty (RAG-RL 3.2, 4.4) as ordered Parquet shards, a manifest and a
    data card. Options override the recipe's values; the recipe overrides the defaults.

    [bold]Examples[/]

      curriculum build --dataset musique --input musique_ans_v1.0_train.jsonl --schedule min-max --K 20 --n 5000

      curriculum build recipe=hotpotqa-linear input=hotpot_train_v1.1.json

      curriculum build -d musique:10000 -d hotpotqa:5000 -i musique_train.jsonl -i hotpot_train.json

      curriculum build --setting distractor -d musique -i musique_ans_v1.0_dev.jsonl --n 1000 -o eval/musique

      curriculum build -d hotpotqa -i hotpot_train_v1.1.json --distractors bm25 --index idx/hotpotqa-train

      curriculum build --setting retrieved --index idx/musique-dev --top-k 10 -d musique -i musique_ans_v1.0_dev.jsonl
    """
    from ..config import resolve
    from ..curricula import build_curriculum
    from ..curricula.config import merge_flags
    from .data import print_shard_summary

    flags = {("out" if k == "out_dir" else k): v for k, v in ctx.params.items()
             if k not in ("overrides", "progress", "print_config")}
    with reported_errors(_hint):
        cfg = resolve(BuildConfig, "build", overrides, flags, merge=partial(merge_flags, note=_note))
        if print_config:
            cfg.validate()
            show_config(cfg)
            return
        result = build_curriculum(cfg, progress=progress and console.is_terminal)
    print_shard_summary(result.out, result.manifest)
    if result.manifest.get("prompt_tokens"):
        pt = result.manifest["prompt_tokens"]
        lg = pt["longest"]
        out.print(f"longest prompt: [bold]{lg['tokens']}[/] tokens with {escape(pt['tokenizer'])}'s chat template (row "
                  f"{lg['id']}, curriculum_index {lg['curriculum_index']}, level {lg['level']}); mean {pt['mean']}")
    out.print(f"[green]wrote[/] {result.rows} rows to [bold]{result.out}[/]")


def _note(message: str) -> None:
    console.print(f"[yellow]note:[/] {escape(message)}")


def _hint(e: BaseException) -> str | None:
    from ..errors import DataError

    if isinstance(e, DataError):
        return "fix the record, or pass --on-error skip to skip bad records (they are counted and reported)"
    if isinstance(e, OSError):
        return "check --input and --out"
    return None


def register(app: typer.Typer) -> None:
    app.command("build", context_settings={"help_option_names": ["-h", "--help"]})(build)
