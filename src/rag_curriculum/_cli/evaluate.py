"""`curriculum eval`: answer, citation and joint F1 of models on evaluation sets; `curriculum eval compare`.

    curriculum eval recipe=rag-rl --model base=Qwen/Qwen2.5-7B-Instruct --model min-max=outputs/mm/checkpoint-120
    curriculum eval --model base=Qwen/Qwen2.5-7B-Instruct --data outputs/eval/musique-distractor \\
        --data outputs/eval/musique-ideal --backend vllm --out outputs/eval-run
    curriculum eval compare outputs/eval-run outputs/other-run --out comparison.md
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from .._plumbing import current_command
from .._settings import suggest
from ..agents import FAITHFULNESS_MEASURES, TRAJECTORY_REWARDS
from ..config import bind, merge_flags, resolve
from ..errors import SettingError, UsageError
from ..evaluation import (
    ZERO_MARK,
    ZERO_WHY,
    AgentEvalConfig,
    EvalConfig,
    compare_summaries,
    endings,
    format_errors,
    main_table,
    paired_across_runs,
    paired_table,
    render_report,
    run_agent_eval,
    run_eval,
    table_rows,
    write_plots,
    zero_notes,
)
from .common import (
    PrintConfig,
    config_options,
    console,
    out,
    redacted,
    reported_errors,
    show_config,
    with_options,
)
from .generating import (
    BACKEND_FLAGS,
    BACKEND_OPTIONS,
    ENGINE_OPTIONS,
    GENERATION_ONLY,
    backend_options,
    generation_run,
    parse_backend_args,
)

E = EvalConfig
A = AgentEvalConfig
#: EvalConfig's options, one per field (backend_args is the shared backend block's --backend-arg).
OPTIONS = config_options(E, exclude=("backend_args",), types={"out": Path},
                         short={"models": "-M", "data": "-D", "out": "-o", "m": "-m"},
                         extra={"data": "(-d, its old short form, still works but is deprecated: -d is --dataset in "
                                "build and partition.)"})
#: A search agent's options (AgentEvalConfig's fields that EvalConfig has not; its template is --template's first,
#: react_sentences a recipe key).
AGENT_OPTIONS = config_options(A, only=[f.name for f in dataclasses.fields(A) if f.name != "template"
                                         and f.name not in {g.name for g in dataclasses.fields(E)}],
                               panel="Search agents (--agent)")
#: The options only an agent evaluation takes (ignored without one).
AGENT_ONLY = tuple(p.name for p in AGENT_OPTIONS)
#: The parameters of the command line only, not fields of EvalConfig.
CLI_ONLY = ("overrides", "data_old", *GENERATION_ONLY)


class _RunByDefault(TyperGroup):
    """`curriculum eval [ARGS]` is `curriculum eval run [ARGS]` unless the first argument names a subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands:
            args = ["run", *args]
        return super().parse_args(ctx, args)


eval_app = typer.Typer(
    name="eval",
    cls=_RunByDefault,
    help=(
        "Evaluate models on evaluation sets (made by `curriculum build --setting distractor|ideal`): answer, "
        "citation and joint F1 averaged over m samples per question, with breakdowns by hops, level, format "
        "validity and base-answerable / base-unanswerable, a Markdown table laid out like the paper's Table 1, "
        "and plots. Rerunning the same command resumes. `curriculum eval compare RUN...` puts runs side by side."
    ),
    no_args_is_help=True,
    rich_markup_mode="rich",
)


@eval_app.command("run")
@with_options(OPTIONS, BACKEND_OPTIONS, ENGINE_OPTIONS, AGENT_OPTIONS)
def run(
    overrides: Annotated[list[str] | None, typer.Argument(
        help="recipe=NAME and key=value overrides of the recipe (Hydra syntax), e.g. recipe=rag-rl limit=100",
        show_default=False)] = None,
    data_old: Annotated[list[str] | None, typer.Option("-d", hidden=True, show_default=False)] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    print_config: PrintConfig = False,
    **options: Any,
) -> None:
    """Evaluate one or more models on one or more evaluation sets: with options, or from a recipe
    (recipe=rag-rl: the paper's evaluation, both settings, m = 3) whose values the options override.
    With --agent search-r1 --retriever DIR|URL, the models are search agents: they search across turns and are
    scored by EM / F1, searches per question, gold recall and format errors. --agent react runs ReAct's
    Thought / Action / Observation format; with --best-of N it adds ReAct+CRAG's consistency-ranked best-of-N and
    self-consistency rows.
    `curriculum eval compare RUN...` puts runs side by side."""
    o = options
    if (o["agent"] is not None or o["retriever"] is not None or o["best_of"] is not None or o["crag_weights"]
            or o["faithfulness"] or o["reward"] is not None or o["reward_args"]):
        _run_agent({"overrides": overrides, "data_old": data_old, "progress": progress, "print_config": print_config,
                    **options})
        return
    if data_old:
        console.print("[yellow]note:[/] -d is deprecated for `curriculum eval` (it means --dataset in build and "
                      "partition): use -D or --data")
    flags = {k: v for k, v in options.items() if k not in (*CLI_ONLY, *AGENT_ONLY)}
    flags["data"] = [*(o["data"] or []), *data_old] if data_old else o["data"]
    flags["out"] = str(o["out"]) if o["out"] is not None else None
    flags["judge_args"] = parse_backend_args(o["judge_args"]) if o["judge_args"] else None

    def merge(recipe: dict[str, Any] | None, given: Any) -> dict[str, Any]:
        merged = merge_flags(recipe, given)
        args = backend_options(merged.get("backend", EvalConfig.backend), o)
        merged["backend_args"] = {**(merged.get("backend_args") or {}), **args}
        return merged

    with reported_errors():
        cfg = resolve(EvalConfig, "eval", overrides, flags, merge=merge)
        cfg.validate()
        if print_config:
            show_config(cfg)
            return
        cfg.check_models()  # a mistyped path stops here, not deep inside the model loader
        result = run_eval(cfg, **generation_run(options, progress))
    out.print(_rich_table(result.summary, title=f"{len(result.summary['evals'])} evaluation(s), scores x 100"))
    if (paired := _paired_rich(result.summary)) is not None:
        out.print(paired)
    what = f"generated {result.generated} question(s)" if result.generated else "reused every completion"
    console.print(f"[green]done[/] ({what}): {result.out}/table.md, summary.json, results/"
                  + (f", {len(result.summary['plots'])} plot(s) in plots/" if result.summary.get("plots") else ""))


#: `eval run` options an agent evaluation takes: AgentEvalConfig's fields (the others are refused with --agent);
#: --template, --crag-weight and --judge-arg are turned into its fields by :func:`_run_agent`.
_AGENT_FIELDS = tuple(f.name for f in dataclasses.fields(AgentEvalConfig)
                      if f.name not in ("template", "crag_weights", "judge_args", "reward_args", "backend_args"))


def _crag_weights(items: list[str] | None) -> dict[str, float]:
    """`--crag-weight KEY=VALUE` options (the consistency score's term weights)."""
    out: dict[str, float] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not key.strip():
            raise UsageError(f"--crag-weight must be KEY=NUMBER, got {item!r}", hint="e.g. --crag-weight loops=2")
    return out


def _given(v: Any) -> bool:
    return v is not None and v is not False and not (isinstance(v, (list, tuple)) and not v)


def _run_agent(p: dict[str, Any]) -> None:
    """`curriculum eval --agent search-r1|react --retriever DIR|URL [--best-of N] ...` (``p``: the options)."""
    with reported_errors():
        if p.get("overrides"):
            raise UsageError("--agent takes no recipe or key=value overrides yet", hint="pass options only")
        other = sorted(k for k, v in p.items() if _given(v) and k not in _AGENT_FIELDS
                       and k not in (*BACKEND_FLAGS, "backend_arg", "progress", "templates", "data_old",
                                     "crag_weights", "judge_args", "reward_args"))
        if other:
            raise UsageError(f"--agent does not take {', '.join('--' + k.replace('_', '-') for k in other)}",
                              hint="see curriculum eval --help")
        flags = {k: p[k] for k in _AGENT_FIELDS if _given(p.get(k))}
        if "out" in flags:
            flags["out"] = str(flags["out"])
        if p.get("templates"):
            if len(p["templates"]) > 1:
                raise UsageError("--agent takes one --template (search-r1 | search-r1-original)")
            flags["template"] = p["templates"][0]
        flags["data"] = [*(flags.get("data") or []), *(p.get("data_old") or [])]
        if p.get("crag_weights"):
            flags["crag_weights"] = _crag_weights(p["crag_weights"])
        if p.get("judge_args"):  # the faithfulness measure's judge options
            flags["judge_args"] = parse_backend_args(p["judge_args"])
        if p.get("reward_args"):  # the trajectory reward's options
            flags["reward_args"] = parse_backend_args(p["reward_args"])
        flags["backend_args"] = backend_options(flags.get("backend", AgentEvalConfig.backend), p)
        cfg = bind(AgentEvalConfig, flags)
        summary = run_agent_eval(cfg, progress=p.get("progress", True) and console.is_terminal,
                                 command=redacted(current_command()))
    # two tables, every column folded rather than cut: read whole at 80 columns (a name breaks across lines, never
    # ends in an ellipsis)
    parts = cfg.parts()
    rewards = [TRAJECTORY_REWARDS.get(cfg.reward)] if cfg.reward else []  # a column each, the mean of its key
    table = Table(title=f"search agent ({cfg.agent}), scores x 100", header_style="bold")
    heads = ("model", "set", "EM", "F1", "searches / q", "gold recall", *(r.column or r.label for r in rewards))
    for h in heads:
        table.add_column(h, justify="left" if h in ("model", "set") else "right", overflow="fold")
    ended = Table(title="format errors and how trajectories ended", header_style="bold")
    for h in ("model", "set", "format errors", "ended"):
        ended.add_column(h, overflow="fold")
    for e in summary["evals"]:
        for label, (o,) in table_rows(e["model"], [e]):
            table.add_row(label, e["set"], f"{o['em']:.1f}", f"{o['f1']:.1f}",
                          f"{o['searches']:.2f}" if "searches" in o else "-",
                          f"{o['gold_recall']:.1f}" if "gold_recall" in o else "-",
                          *(f"{o[r.key]:.1f}" if r.key in o else "-" for r in rewards))
        ended.add_row(e["model"], e["set"], format_errors(e), endings(e))
    out.print(table)
    out.print(ended)
    for part in parts:  # the parts' own tables (a faithfulness measure's, e.g.)
        got = part.console_table(summary)
        if got is not None:
            title, header, rows = got
            vt = Table(title=title, header_style="bold")
            for i, h in enumerate(header):
                vt.add_column(h, justify="left" if i == 0 else "right")
            for r in rows:
                if not any(r[1:]):  # a block's title
                    vt.add_section()
                    r = [f"[bold]{r[0]}[/]", *r[1:]]
                vt.add_row(*r)
            out.print(vt)
    plots = summary.get("plots") or []
    console.print(f"[green]done[/]: {cfg.out}/table.md, summary.json, trajectories/"
                  + (f", {len(plots)} plot(s) in plots/" if plots else "")
                  + "".join(f", {part.files}" for part in parts if part.files))


def _label_agreement(labels: Path, reference: Path, **fields: str) -> dict[str, Any]:
    """The agreement of judge labels with reference labels, as the first faithfulness measure (by name) that reads
    judge labels gives it (:meth:`~rag_curriculum.agents.AgentEvalPart.label_agreement`)."""
    for part in FAITHFULNESS_MEASURES.loaded().values():
        got = part.label_agreement(labels, reference, **fields)
        if got is not None:
            return got
    raise UsageError("no faithfulness measure reads judge labels",
                     hint="install a method that registers one in rag_curriculum.agents.FAITHFULNESS_MEASURES")


@eval_app.command("agreement")
def agreement_cmd(
    labels: Annotated[Path, typer.Argument(help="JSONL labels to check, one {id, label} per line (e.g. the pairs/ "
                                           "files of `eval --faithfulness veritas --judge ...`).", show_default=False)],
    reference: Annotated[Path, typer.Argument(help="JSONL reference labels by the same ids (a stronger judge's, a "
                                              "person's).", show_default=False)],
    field: Annotated[str, typer.Option(help="The label field of LABELS.")] = "label",
    reference_field: Annotated[str, typer.Option(help="The label field of REFERENCE.")] = "label",
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Agreement of judge labels with reference labels, matched by id: consistency (VERITAS's "Consistent Ratio")
    and Cohen's kappa (docs/veritas.md)."""
    with reported_errors():
        got = _label_agreement(labels, reference, field=field, reference_field=reference_field)
    if as_json:
        out.print_json(json.dumps(got))
        return
    out.print(f"{got['n']} pairs labelled on both sides: consistency {got['consistency']:.3f}, Cohen's kappa "
              f"{got['kappa']:.3f} ({got['unlabelled']} unlabelled, {got['only_labels']} only in {labels.name}, "
              f"{got['only_reference']} only in {reference.name})")


@eval_app.command("compare")
def compare(
    runs: Annotated[list[Path], typer.Argument(help="Run directories (the --out of `curriculum eval`) or their "
                                               "summary.json files.", show_default=False)],
    name: Annotated[list[str] | None, typer.Option(
        "--name", help="A name per run, in order (default: the directory names).", show_default=False)] = None,
    out_file: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Write the full Markdown report (tables and breakdowns) here.", show_default=False)]
    = None,
    plots_dir: Annotated[Path | None, typer.Option(
        "--plots", help="Write the comparison plots (PNG) into this directory.", show_default=False)] = None,
    section: Annotated[str, typer.Option(
        help="Which aggregate to show: overall, or e.g. by_bucket.unanswerable, by_hops.3, by_format.valid.")]
    = "overall",
    as_json: Annotated[bool, typer.Option("--json", help="Print the merged summary as JSON instead.")] = False,
) -> None:
    """Put the summaries of several evaluation runs side by side (the paper's Table 1 layout)."""
    with reported_errors():
        merged = compare_summaries(runs, names=name)
        check_section(merged, section)
        if paired := paired_across_runs(merged):  # the same questions in two runs: their paired differences
            merged["paired"] = paired
    plots: list[str] = []
    if plots_dir is not None:
        written = write_plots(merged, plots_dir)
        base = out_file.parent if out_file is not None else Path(".")
        plots = [_relative(p, base) for p in written]
    if out_file is not None:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(render_report(merged, title="Comparison", plots=plots), encoding="utf-8")
    if as_json:
        out.print_json(json.dumps(merged))
        return
    out.print(_rich_table(merged, section=section,
                              title=f"{len(merged['runs'])} run(s), {section}, scores x 100"))
    if (paired_view := _paired_rich(merged)) is not None:
        out.print(paired_view)
    if out_file is not None:
        console.print(f"[green]wrote[/] {out_file}" + (f" and {len(plots)} plot(s)" if plots else ""))


def sections(summary: dict[str, Any]) -> list[str]:
    """The aggregates ``--section`` can show: ``overall`` and every ``by_X.GROUP`` the summaries hold."""
    found = {"overall"}
    for e in summary.get("evals", []):
        for key, value in e.items():
            if key.startswith("by_") and isinstance(value, dict):
                found.update(f"{key}.{group}" for group, agg in value.items() if isinstance(agg, dict))
    return sorted(found)


def check_section(summary: dict[str, Any], section: str) -> None:
    known = sections(summary)
    if section not in known:
        raise SettingError("section", section, "", flag="--section", message=(
            f"--section {section!r} is not in these runs{suggest(section, known)} Known: {', '.join(known)}"))


def _rich_table(summary: dict[str, Any], *, section: str = "overall", title: str | None = None):
    """The main table (Table 1 layout) as a rich Table, best values in bold, each under its 95% interval (the
    overall section); a 0 that comes with no sample in the output format is marked, and its caption says why."""
    notes = zero_notes(summary, section=section)
    header, rows = main_table(summary, section=section, interval_sep="\n", zero_mark=ZERO_MARK if notes else None)
    caption = "\n".join([*(f"{ZERO_MARK} {escape(n)}" for _, n in notes), escape(ZERO_WHY)]) if notes else None
    if section == "overall" and any(e.get("intervals") for e in summary["evals"]):
        title = f"{title}; \\[low, high]: 95% bootstrap interval over questions" if title else None
    table = Table(title=title, show_lines=False, header_style="bold", caption=caption, caption_justify="left")
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i < 2 else "right", overflow="fold")
    for r in rows:
        if r[0] and table.row_count:
            table.add_section()
        table.add_row(*(re.sub(r"\*\*(.+?)\*\*", r"[bold green]\1[/]", escape(c)) for c in r))
    return table


def _paired_rich(summary: dict[str, Any]) -> Table | None:
    """The paired differences (two models, or two settings, over the same questions) as a rich Table."""
    got = paired_table(summary, sep="\n")
    if got is None:
        return None
    header, rows = got
    table = Table(title="paired differences over the same questions, x 100, \\[95% paired bootstrap interval]",
                  header_style="bold", caption="an interval that holds 0 does not tell the two apart",
                  caption_justify="left")
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i < 2 else "right", overflow="fold", min_width=15 if i == 0 else None)
    for r in rows:
        table.add_row(*(escape(c) for c in r))
    return table


def _relative(path: Path, base: Path) -> str:
    return Path(os.path.relpath(path, base)).as_posix()


def register(app: typer.Typer) -> None:
    """Add ``curriculum eval`` (with ``run`` and ``compare``) to the `curriculum` app."""
    app.add_typer(eval_app, name="eval")
