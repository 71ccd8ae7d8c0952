"""`curriculum train`: GRPO on a curriculum with TRL's GRPOTrainer, from a Hydra recipe plus overrides.

The same command runs under a launcher, one process per GPU:
``accelerate launch --config_file recipes/accelerate/zero2-7gpu.yaml -m rag_curriculum.train recipe=NAME ...``.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from .._plumbing import mask_secrets
from ..config import recipes_root, resolve, split_args
from ..errors import TokenizerError, UsageError
from ..train import (
    INFORMATIVE_PLOT,
    INFORMATIVE_SUMMARY,
    RecipeError,
    TrainConfig,
    config_yaml,
    disk_lines,
    finished_message,
    grpo_kwargs,
    informative_table,
    learning_summary,
    memory_lines,
    order_issues,
    partial_history,
    prepare,
)
from ..train import train as run_training
from .common import LOG_FORMAT, OWN_LOGGERS, console, out, reported_errors
from .recipes import print_recipes


def _is_main_process() -> bool:
    return os.environ.get("RANK", "0") in ("0", "") and os.environ.get("LOCAL_RANK", "0") in ("0", "")


def _print_recipes() -> None:
    print_recipes("train")
    root = recipes_root()
    out.print(f"launcher configs: {root / 'accelerate'}   verl: {root / 'verl'}")


def _print_plan(plan: Any, tail: dict[str, Any] | None = None) -> None:
    table = Table(title="batch (TRL counts completions)", title_justify="left", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    rows = [
        ("training processes", plan.num_processes),
        ("generations per prompt", plan.num_generations),
        ("per_device_train_batch_size (completions)", plan.per_device_train_batch_size),
        ("gradient_accumulation_steps", plan.gradient_accumulation_steps),
        ("steps_per_generation", plan.steps_per_generation),
        ("completions per step", plan.completions_per_step),
        ("prompts per step", f"{plan.prompts_per_step:g}"),
    ]
    if plan.num_rows is not None:
        rows += [("rows", plan.num_rows), ("steps per epoch", plan.steps_per_epoch),
                 ("steps in this run", plan.total_steps), ("tail rows never trained on", plan.unseen_rows)]
        if plan.unreached_rows:
            rows += [("rows this run reaches", plan.rows_reached),
                     ("rows after its last step (never trained on)", plan.unreached_rows)]
    for k, v in rows:
        table.add_row(k, str(v))
    out.print(table)
    if tail and tail.get("unseen_curriculum_index"):
        lo, hi = tail["unseen_curriculum_index"]
        console.print(f"[yellow]warning:[/] rows with curriculum_index {lo}..{hi} are never trained on (TRL drops "
                      f"the incomplete last batch); build with --batch-prompts {plan.prompts_per_generation} "
                      "--tail trim or pad")
    if tail and tail.get("unreached_curriculum_index"):
        lo, hi = tail["unreached_curriculum_index"]
        console.print(f"[yellow]warning:[/] this run stops after {plan.total_steps} of {plan.steps_per_epoch} steps: "
                      f"rows with curriculum_index {lo}..{hi} (levels {tail.get('unreached_levels')}) are never "
                      "reached; use data.max_rows for a shorter curriculum")


def train(
    args: Annotated[list[str] | None, typer.Argument(
        help="recipe=NAME (or a path to a YAML file) and Hydra overrides key=value, e.g. recipe=rag-rl-min-max "
        "dataset=hotpotqa grpo.learning_rate=2e-6 data.shards=DIR", show_default=False)] = None,
    print_config: Annotated[bool, typer.Option(
        "--print-config", help="Print the resolved config and exit.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Compose, read the shards, plan the batch, run the order checks, bind TRL's GRPOConfig, "
        "check the prompt lengths against its limits, estimate the memory per GPU of each launcher config and size "
        "the checkpoints against the free disk; load no model and train nothing.")] = False,
    list_: Annotated[bool, typer.Option("--list", help="List the shipped training recipes and exit.")] = False,
    profile: Annotated[str | None, typer.Option(
        "--profile", help="A level profile (curriculum profile --out) to check the run against: each step logs the "
        "informative fraction it predicts for the step's rows beside the measured one (data.profile=DIR; default: "
        "the profile the shards were built with, if beside them).", show_default=False)] = None,
) -> None:
    """Train a RAG answer generator with GRPO (TRL's GRPOTrainer) on a curriculum, in curriculum order.

    The recipe (default rag-rl-min-max) reproduces RAG-RL 4.2 / appendix B; every key can be overridden. The
    resolved config is saved with the run (train_config.yaml; --print-config prints it), with the batch plan (train_plan.json)
    and the rows of each step (curriculum_steps.jsonl).

    [bold]Examples[/]

      curriculum train --list

      curriculum train recipe=rag-rl-min-max data.shards=outputs/musique-min-max

      curriculum train recipe=rag-rl-linear dataset=hotpotqa batch.num_processes=7 --dry-run

      accelerate launch --config_file recipes/accelerate/zero2-7gpu.yaml -m rag_curriculum.train
      recipe=rag-rl-min-max grpo.vllm_mode=server
    """
    if list_:
        _print_recipes()
        return
    main = _is_main_process()
    with reported_errors(lambda e: "curriculum train --list shows the recipes; overrides are key=value (Hydra "
                         "syntax)" if isinstance(e, RecipeError) else None):
        args = [*(args or []), *([f"data.profile={profile}"] if profile else [])]
        _one_profile(profile, args)
        recipe, overrides = split_args(args)
        cfg = resolve(TrainConfig, "train", args)
        cfg.validate()  # types, ranges, reward names, the model path: before the config is printed or used
    if main and (print_config or dry_run):  # secrets (grpo.hub_token, ...) masked by the one rule, as saved
        shown = TrainConfig.from_dict(mask_secrets(cfg.to_dict()))
        from rich.syntax import Syntax  # pygments: ~0.1 s, only for a printed config

        out.print(Syntax(config_yaml(shown), "yaml", theme="ansi_dark", background_color="default"))
    elif main:  # a real run: one line; the whole resolved config goes into the run folder (train_config.yaml),
        # named once it is written (a run refused before then names no file that does not exist)
        console.print(escape(mask_secrets(
            f"training {cfg.model.name_or_path} on {cfg.data.shards} (recipe {recipe or 'default'}; "
            "--print-config shows the resolved config without training)")))
    if print_config:
        return
    with reported_errors(_hint):
        if dry_run:
            _dry_run(cfg)
            return
        try:
            result = run_training(cfg, overrides=[*([f"recipe={recipe}"] if recipe else []), *overrides])
        except BaseException as e:  # a run that stops (an error, Ctrl-C) still says what its steps did
            if main:
                _print_stopped(partial_history(e))
            raise
    if main and result.finished:
        out.print(f"[yellow]nothing trained:[/] {escape(str(result.output_dir))} had already reached its "
                  f"{result.global_step} steps (run.name=NEW starts another run); what those steps did:")
        _print_change(result.log_history)
    elif main:
        out.print(f"[green]trained[/] {result.global_step} steps, loss {result.training_loss:.4g}; "
                  f"model, checkpoints and logs in [bold]{result.output_dir}[/] (the resolved config: "
                  f"{escape(str(Path(result.output_dir) / 'train_config.yaml'))})")
        _print_change(result.log_history)
        if result.informative:
            _print_informative(result.informative, result.output_dir)


def _one_profile(flag: str | None, args: list[str]) -> None:
    """``--profile A`` and an override ``data.profile=B`` name two profiles: refused in one line (the override
    list would silently keep the last)."""
    if not flag:
        return
    other = [a.split("=", 1)[1] for a in args if re.fullmatch(r"\+{0,2}data\.profile=.*", a, re.S)]
    differ = [v for v in other if v != flag]
    if differ:
        raise UsageError(f"--profile {flag} and data.profile={differ[0]}: two level profiles given two ways",
                         hint="give one of them: --profile DIR, or data.profile=DIR")


def _print_stopped(history: list[dict[str, Any]]) -> None:
    """The closing lines of a run that stopped before its end: how many steps it logged, and their change."""
    steps = sum(1 for h in history if "reward" in h)
    if steps:
        console.print(f"[yellow]stopped[/] after {steps} logged step{'s' * (steps != 1)}; what they did:")
        _print_change(history, to=console)


def _print_change(history: list[dict[str, Any]], to: Any = None) -> None:
    """The run's first steps against its last: mean reward and exact match (when logged)."""
    names = sorted({k for h in history for k in h if k.endswith("exact_match")})
    for key, s in learning_summary(history, keys=["reward", *names]).items():
        k = int(s["steps"])
        (to or out).print(f"{key}: {s['first']:.4g} over the first {k} step{'s' * (k > 1)}, {s['last']:.4g} over the "
                  f"last {k} ({s['last'] - s['first']:+.4g})")


def _print_informative(summary: dict[str, Any], folder: Path) -> None:
    """The level profile's prediction of the informative fraction against what the run measured, per level."""
    table = Table(title=f"informative groups (G = {summary['group_size']}): predicted by {summary['profile']} against "
                  "measured", title_justify="left")
    for col in ("", "groups", "predicted (95%)", "measured (95%)", "error (95%)", "inside"):
        table.add_column(col, justify="right")
    for row in informative_table(summary):
        table.add_row(*row)
    out.print(table)
    out.print(informative_verdict(summary)
              + escape(f"; {Path(folder) / INFORMATIVE_SUMMARY}, {Path(folder) / INFORMATIVE_PLOT}"))


def informative_verdict(summary: dict[str, Any]) -> str:
    """One sentence on where the measured informative fraction left the prediction's interval, that agrees with the
    table's ``all`` row: a quarter's interval is wider than the whole run's, so every quarter can hold while the
    whole does not (a small gap that persists).

    >>> informative_verdict({"drift": {"first_outside": None}, "whole": {"inside": True}})
    'the prediction held over the whole run and in every quarter'
    >>> informative_verdict({"drift": {"first_outside": None}, "whole": {"inside": False}})
    'every quarter inside its interval, the whole run not: a small gap that persists through the run'
    >>> informative_verdict({"drift": {"first_outside": [9, 16]}, "whole": {"inside": False}})
    "the measured fraction left the prediction's interval at steps 9-16"
    """
    drift = summary["drift"]["first_outside"]
    if drift is not None:
        return f"the measured fraction left the prediction's interval at steps {drift[0]}-{drift[1]}"
    if summary["whole"].get("inside", True):
        return "the prediction held over the whole run and in every quarter"
    return "every quarter inside its interval, the whole run not: a small gap that persists through the run"


def _hint(e: BaseException) -> str | None:
    if isinstance(e, ImportError):
        return "training needs the train extra: pip install 'rag-curriculum[train]' (and [vllm] on a GPU)"
    if isinstance(e, TokenizerError):
        return "the prompt lengths are counted with the model's tokenizer before the model is loaded"
    return None


def _dry_run(cfg: Any) -> None:
    """Every check of the real run before its model loads (``prepare``: the shards, the batch, the order, TRL's
    config, the prompt lengths, the retriever, the resume point, the controller), then what it found."""
    run = prepare(cfg, dry_run=True)
    plan, args, manifest = run.plan, run.args, run.manifest
    if run.lengths_error is not None:  # training would stop on it; a dry run says so and goes on
        console.print(f"[yellow]prompt lengths not checked:[/] {escape(str(run.lengths_error))} (training refuses "
                      "to start without them; build with --tokenizer MODEL to record them in the shards)")
    elif run.lengths is not None and run.lengths.tokens:
        top = run.lengths.longest()
        completion = args.max_completion_length or 0
        out.print(escape(f"longest prompt: {run.lengths.tokens[top]} tokens ({run.lengths.describe(top)}) + "
                         f"{completion} completion tokens; counted from {run.lengths.source}"))
    fitted = (manifest.get("trainer_tail") or {}).get("batch_prompts")
    if fitted and fitted != plan.prompts_per_generation:
        console.print(f"[yellow]warning:[/] the shards were fitted to {fitted} prompts per step, but this run "
                      f"takes {plan.prompts_per_generation} per batch")
    _print_plan(plan, run.tail)  # the tail warned once, here (the real run logs it with report_tail)
    for line in memory_lines(cfg, args, plan.num_processes, run.lengths.max_tokens if run.lengths else None):
        out.print(escape(line))
    for line in disk_lines(run.disk, run.free_disk, args):
        out.print(escape(line))
    for issue in order_issues(grpo_kwargs(cfg, num_processes=plan.num_processes), plan,
                              resuming=run.resume is not None):
        if issue.severity != "error":  # errors were raised by prepare
            console.print(f"[yellow]curriculum order:[/] {issue.message}")
    if run.retriever is not None:
        out.print(escape(mask_secrets(f"retriever: {cfg.agent.retriever} ({_describe_retriever(run.retriever)})")))
    if run.finished is not None:
        out.print(escape(finished_message(run)))
        return
    if run.resume is not None:
        out.print(escape(f"resumes from {run.resume}"))
    out.print(f"[green]ok:[/] binds to trl.GRPOConfig (output_dir={args.output_dir}, "
              f"shuffle_dataset={args.shuffle_dataset})" + ("; the prompt lengths not checked"
                                                            if run.lengths_error is not None else ""))


def _describe_retriever(retriever: Any) -> str:
    d = retriever.describe()
    index = d.get("index") if isinstance(d.get("index"), dict) else d
    fp = (index or {}).get("fingerprint")
    return f"{d.get('kind', 'index')}, fingerprint {str(fp)[:12]}" if fp else str(d.get("kind", "retriever"))


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `curriculum` app."""
    app.command("train", context_settings={"help_option_names": ["-h", "--help"]})(train)


def main(argv: list[str] | None = None) -> None:
    """``python -m rag_curriculum.train``: the `train` command alone (for accelerate / torchrun)."""
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)  # the libraries: warnings and errors
    for name in OWN_LOGGERS:  # the toolkit's INFO lines, from the main process only
        logging.getLogger(name).setLevel(logging.INFO if _is_main_process() else logging.WARNING)
    app = typer.Typer(add_completion=False, rich_markup_mode="rich", pretty_exceptions_show_locals=False)
    register(app)
    app(args=argv if argv is not None else sys.argv[1:], prog_name=f"{Path(sys.executable).name} -m "
        "rag_curriculum.train")
