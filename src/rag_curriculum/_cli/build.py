"""`curriculum build`: a curriculum (or an evaluation set) from a dataset file or the Hub, or from a recipe."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

import typer
from rich.markup import escape

from ..config import resolve
from ..curricula import BuildConfig, SourceSpec, build_curriculum, merge_build_flags
from ..errors import DataError
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
from .data import print_shard_summary

B = BuildConfig
#: The options of a build: a source's (SourceSpec: --dataset, --input, --n, --split; repeated for a mixture) and
#: BuildConfig's, one per field (its sources are the SourceSpec options; ability is a recipe key).
OPTIONS = [
    *config_options(SourceSpec, only=("dataset", "input", "n", "split"), short={"dataset": "-d", "input": "-i",
                                                                                  "n": "-n"},
                    types={"dataset": list[str], "input": list[str], "n": str},
                    extra={"dataset": "Repeat for a mixture, with a quota as NAME:N (e.g. -d musique:10000 -d "
                           "hotpotqa:5000).", "input": "One for each --dataset, in the same order."},
                    defaults={"n": "all, or the recipe's"}),
    *config_options(B, exclude=("sources",), short={"K": "-K", "batch_prompts": "-P", "out": "-o"},
                    defaults={"K": "the paper's: HotpotQA 10, MuSiQue 20, 2Wiki 10",
                              "out": "outputs/DATASET-SCHEDULE, or the recipe's"}),
]


@with_options(OPTIONS)
def build(
    overrides: Annotated[list[str] | None, typer.Argument(
        help="recipe=NAME and key=value overrides of the recipe (Hydra syntax), e.g. recipe=musique-min-max n=500",
        show_default=False)] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
    print_config: PrintConfig = False,
    **options: Any,
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
    with reported_errors(_hint):
        cfg = resolve(BuildConfig, "build", overrides, options, merge=partial(merge_build_flags, note=_note))
        if print_config:
            cfg.validate()
            show_config(cfg)
            return
        result = build_curriculum(cfg, progress=progress and console.is_terminal)
    print_shard_summary(result.out, result.manifest, capped=False)  # the build's log said which levels collapse
    if result.manifest.get("prompt_tokens"):
        pt = result.manifest["prompt_tokens"]
        lg = pt["longest"]
        out.print(f"longest prompt: [bold]{lg['tokens']}[/] tokens with {escape(pt['tokenizer'])}'s chat template (row "
                  f"{lg['id']}, curriculum_index {lg['curriculum_index']}, level {lg['level']}); mean {pt['mean']}")
        by_level = pt.get("max_by_level") or {}
        if by_level:  # what each level asks of a trainer's context (the hardest levels come last in a curriculum)
            out.print("longest prompt per level: " + ", ".join(f"{lv}: {t}" for lv, t in
                                                              sorted(by_level.items(), key=lambda x: int(x[0]))))
    # (without tokenizer=MODEL nothing is said: `curriculum train` and `curriculum verl check-lengths` count the
    # prompts themselves, with the model they are given; the counts in the manifest only spare them that)
    if result.manifest.get("profile"):
        print_schedules(result.manifest["profile"], str(cfg.profile))
    tail = result.manifest.get("trainer_tail")
    steps = (f": {tail['steps']} step{'s' if tail['steps'] != 1 else ''} of {tail['batch_prompts']} prompts"
             if tail else "")
    out.print(f"[green]wrote[/] {result.rows} rows to [bold]{result.out}[/]{steps}")


def print_schedules(record: dict[str, Any], path: str) -> None:
    """The expected informative fraction of each schedule for the profiled model (the manifest's ``profile``, which
    records the profile's ``path`` from the output: ``path`` is the profile as given, from where the command ran)."""
    from rich.table import Table

    t = Table(title=f"expected informative groups (G = {record['group_size']}) for {escape(str(record.get('model')))}"
              f", from {escape(path)} ({record['profiled_questions']} of {record['questions']} questions "
              "profiled)", title_justify="left")
    for col in ("schedule", "whole", "first quarter", "last quarter", "mean pass rate"):
        t.add_column(col, justify="left" if col == "schedule" else "right")
    for name, f in {**record["schedules"], "this build": record["this_build"]}.items():
        t.add_row(escape(name), f"{f['whole']:.3f}", f"{f['first_quarter']:.3f}", f"{f['last_quarter']:.3f}",
                  f"{f['mean_pass_rate']:.3f}")
    out.print(t)
    start = record["adaptive_start"]
    there = f"; informative {start['informative']:.3f}" if "informative" in start else ""
    out.print(f"an adaptive controller aiming at {start['target']:g} starts at level {start['level']} "
              f"(adaptive.kwargs.start={start['level']}; pass rate {start['pass_rate']:.3f}{there} there)")
    band = (record.get("calibrated") or {}).get("band")
    if band:
        outside = record["calibrated"]["outside_band"]
        out.print(f"calibrated band {band[0]:g}-{band[1]:g}: {outside['above'] + outside['below']} questions with no "
                  f"level inside it, at the level nearest it ({outside['above']} above, {outside['below']} below)")


def _note(message: str) -> None:
    console.print(f"[yellow]note:[/] {escape(message)}")


def _hint(e: BaseException) -> str | None:
    if isinstance(e, DataError):
        return data_error_hint(e)
    if isinstance(e, OSError):
        return "check --input and --out"
    return None


def register(app: typer.Typer) -> None:
    app.command("build", context_settings={"help_option_names": ["-h", "--help"]})(build)
