"""`curriculum verl ...`: what a verl run is pointed at, made from a curriculum (the shard files, the reward file,
the prompt limit, the run's steps, search-agent rows), for verl launch scripts (``recipes/verl/*.sh``,
docs/own-trainer.md). Each command is :mod:`rag_curriculum.verl.data`'s; ``python -m rag_curriculum.verl COMMAND``
runs the same on a node with the core install only. The ``VERL_OVERRIDES`` are the launch script's own Hydra
overrides (``data.max_prompt_length=6144`` ...), read for the settings that decide lengths and steps."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..verl.data import main as verl_main

verl_app = typer.Typer(
    help="For verl launch scripts: the shard files, the reward file, the prompt limit, the run's steps and "
         "search-agent rows of a curriculum (docs/own-trainer.md). `python -m rag_curriculum.verl` runs the same.",
    no_args_is_help=True, rich_markup_mode="rich", pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]})

Shards = Annotated[Path, typer.Argument(help="The curriculum's output folder (`curriculum build --out`).",
                                        show_default=False)]
Overrides = Annotated[list[str] | None, typer.Argument(
    help="The launch script's verl overrides (KEY=VALUE), read for the lengths and steps they set.",
    show_default=False)]
Model = Annotated[str | None, typer.Option("--model", help="The model whose tokenizer counts the prompts "
                                           "(a folder or Hub id; actor_rollout_ref.model.path among the overrides "
                                           "wins).", show_default=False)]


def _run(*args: str | None) -> None:
    raise typer.Exit(verl_main([a for a in args if a is not None]))


def _opt(name: str, value: object) -> tuple[str, str] | tuple[()]:
    return () if value is None else (name, str(value))


@verl_app.command("train-files",
    help=(
         "Print the shard files in curriculum order as a Hydra list, for `data.train_files`."))
def train_files(shards: Shards) -> None:
    _run("train-files", str(shards))


@verl_app.command("reward-path",
    help=(
         "Print the reward file for `reward.custom_reward_function.path` (rag_curriculum/verl/rewards.py)."))
def reward_path() -> None:
    _run("reward-path")


@verl_app.command("reward-manager-path",
    help=(
         "Print Search-R1's reward manager file (its decoding), for reward=search-r1."))
def reward_manager_path() -> None:
    _run("reward-manager-path")


@verl_app.command("lengths", context_settings={"ignore_unknown_options": True},
    help=(
         "Print the longest prompt of the curriculum, in the model's tokens."))
def lengths(shards: Shards, overrides: Overrides = None, model: Model = None) -> None:
    _run("lengths", str(shards), *_opt("--model", model), *(overrides or []))


@verl_app.command("check-lengths", context_settings={"ignore_unknown_options": True},
    help=(
         "Refuse (exit 2) a curriculum whose longest prompt exceeds verl's prompt limits (verl would "
         "left-truncate it with a warning only); on success print the data.max_prompt_length to use."))
def check_lengths(
    shards: Shards,
    overrides: Overrides = None,
    prompt_length: Annotated[str | None, typer.Option("--prompt-length", help="data.max_prompt_length: a number, "
                                                      "or `auto` (the longest prompt).", show_default=False)] = None,
    response_length: Annotated[int | None, typer.Option("--response-length", help="data.max_response_length.",
                                                        show_default=False)] = None,
    model: Model = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="A tokenizer that cannot be loaded (offline) says what "
                                          "it could not check instead of stopping.")] = False,
) -> None:
    _run("check-lengths", str(shards), *_opt("--prompt-length", prompt_length), *_opt("--response-length", response_length),
         *_opt("--model", model), "--dry-run" if dry_run else None, *(overrides or []))


@verl_app.command("steps", context_settings={"ignore_unknown_options": True},
    help=(
         "Print the run's steps and say which rows verl leaves out (drop_last) and what epochs and step limits "
         "do to the curriculum's order; refuse (exit 2) a run of no steps."))
def steps(
    shards: Shards,
    overrides: Overrides = None,
    train_batch_size: Annotated[int | None, typer.Option("--train-batch-size", help="data.train_batch_size "
                                                         "(the overrides' value wins).", show_default=False)] = None,
    total_epochs: Annotated[int | None, typer.Option("--total-epochs", help="trainer.total_epochs (default 1; the "
                                                     "overrides' value wins).", show_default=False)] = None,
) -> None:
    _run("steps", str(shards), *_opt("--train-batch-size", train_batch_size), *_opt("--total-epochs", total_epochs),
         *(overrides or []))


@verl_app.command("agent-data",
    help=(
         "Write the curriculum's rows as verl search-agent rows (ToolAgentLoop with the toolkit's SearchTool), "
         "in curriculum order."))
def agent_data(
    shards: Shards,
    out: Annotated[Path, typer.Argument(help="The Parquet file to write.", show_default=False)],
    template: Annotated[str, typer.Option("--template", help="The search agent's prompt template.")] = "search-r1",
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing file.")] = False,
) -> None:
    _run("agent-data", str(shards), str(out), "--template", template, "--overwrite" if overwrite else None)


@verl_app.command("layout",
    help=(
         "Refuse (exit 2) a layout over which verl cannot split a step's prompts x rollouts sequences, offering "
         "first the nodes and GPUs per node that keep the step's sequences, then the prompts per step that change "
         "them (each with its sequences)."))
def layout(
    prompts: Annotated[int, typer.Option("--prompts", help="data.train_batch_size (PROMPTS_PER_STEP).")] = 42,
    rollouts: Annotated[int, typer.Option("--rollouts", help="actor_rollout_ref.rollout.n (ROLLOUTS).")] = 7,
    nnodes: Annotated[int, typer.Option("--nnodes", help="trainer.nnodes (NNODES).")] = 1,
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", help="trainer.n_gpus_per_node.")] = 7,
) -> None:
    _run("layout", "--prompts", str(prompts), "--rollouts", str(rollouts), "--nnodes", str(nnodes),
         "--gpus-per-node", str(gpus_per_node))


def register(app: typer.Typer) -> None:
    app.add_typer(verl_app, name="verl")
