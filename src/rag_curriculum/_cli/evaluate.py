"""`curriculum eval`: answer, citation and joint F1 of models on evaluation sets; `curriculum eval compare`.

    curriculum eval --model base=Qwen/Qwen2.5-7B-Instruct --model min-max=outputs/mm/checkpoint-120 \\
        --data outputs/eval/musique-distractor --data outputs/eval/musique-ideal --backend vllm --out outputs/eval-run
    curriculum eval compare outputs/eval-run outputs/other-run --out comparison.md
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from .common import (
    AllowIdenticalSamples,
    ApiKey,
    BackendArg,
    BaseUrl,
    BatchSize,
    Concurrency,
    Device,
    Dtype,
    GpuMemoryUtilization,
    MaxModelLen,
    TensorParallelSize,
    backend_args_for,
    console,
    fail,
    out,
    parse_backend_args,
    redacted,
    reported_errors,
)

eval_app = typer.Typer(
    name="eval",
    help=(
        "Evaluate models on evaluation sets (made by `curriculum build --setting distractor|ideal`): answer, "
        "citation and joint F1 averaged over m samples per question, with breakdowns by hops, level, format "
        "validity and base-answerable / base-unanswerable, a Markdown table laid out like the paper's Table 1, "
        "and plots. Rerunning the same command resumes. `curriculum eval compare RUN...` puts runs side by side."
    ),
    no_args_is_help=True,
    rich_markup_mode="rich",
)


def run(
    model: Annotated[list[str] | None, typer.Option(
        "--model", "-M", help="A model to evaluate: PATH or NAME=PATH (a local model or checkpoint, a Hub id, or "
        "the name an OpenAI-compatible server serves). Repeat for several; NAME labels its row.",
        show_default=False)] = None,
    data: Annotated[list[str] | None, typer.Option(
        "--data", "-D", help="Evaluation shard directory (`curriculum build --setting distractor|ideal`); dataset "
        "and setting come from its manifest and rows. Repeatable. (-d, its old short form, still works but is "
        "deprecated: -d is --dataset in build and partition.)", show_default=False)] = None,
    data_old: Annotated[list[str] | None, typer.Option("-d", hidden=True, show_default=False)] = None,
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Output directory: results/, summary.json, "
                                          "table.md, plots/.")] = Path("outputs/eval"),
    backend: Annotated[str, typer.Option(help="Generation backend: vllm (GPU, the paper's; as in partition) | openai "
                                         "(a server such as `vllm serve`) | transformers (the CPU choice; GPU "
                                         "too) | scripted.")] = "vllm",
    max_model_len: MaxModelLen = None,
    tensor_parallel_size: TensorParallelSize = None,
    dtype: Dtype = None,
    gpu_memory_utilization: GpuMemoryUtilization = None,
    batch_size: BatchSize = None,
    device: Device = None,
    base_url: BaseUrl = None,
    api_key: ApiKey = None,
    concurrency: Concurrency = None,
    backend_arg: BackendArg = None,
    allow_identical_samples: AllowIdenticalSamples = False,
    samples: Annotated[int, typer.Option("--samples", "-m", help="Samples per question, averaged (RAG-RL: 3).")]
    = 3,
    temperature: Annotated[float, typer.Option(help="Sampling temperature.")] = 1.0,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling top-p.")] = 1.0,
    max_tokens: Annotated[int, typer.Option(help="Most tokens per completion (RAG-RL: 800).")] = 800,
    seed: Annotated[int, typer.Option(help="Sampling seed (per-chunk seeds derive from it).")] = 0,
    limit: Annotated[int | None, typer.Option(help="Evaluate only the first N questions of each set.",
                                              show_default=False)] = None,
    stats: Annotated[list[str] | None, typer.Option(
        "--stats", help="A partition's stats.parquet (or its directory): adds the base-answerable / "
        "base-unanswerable breakdown. Repeatable.", show_default=False)] = None,
    strict_format: Annotated[bool, typer.Option(
        help="Score completions that break the output format as 0 (default: score what the parser extracts).")]
    = False,
    chunk_size: Annotated[int, typer.Option(help="Questions per resumable generation chunk.")] = 64,
    plots: Annotated[bool, typer.Option(help="Write PNG plots.")] = True,
    overwrite: Annotated[bool, typer.Option(
        help="Generate again where --out holds results made with other generation settings.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Evaluate one or more models on one or more evaluation sets."""
    from ..curricula.builder import current_command
    from ..evaluation import EvalConfig, ModelSpec, run_eval

    if data_old:
        console.print("[yellow]note:[/] -d is deprecated for `curriculum eval` (it means --dataset in build and "
                      "partition): use -D or --data")
        data = [*(data or []), *data_old]
    if not model:
        fail("no model given", "pass --model PATH or --model NAME=PATH (repeat for several)")
    if not data:
        fail("no evaluation set given", "pass --data DIR, made by `curriculum build --setting distractor|ideal`")
    flags = {"tensor_parallel_size": tensor_parallel_size, "max_model_len": max_model_len, "dtype": dtype,
             "gpu_memory_utilization": gpu_memory_utilization, "batch_size": batch_size, "device": device,
             "base_url": base_url, "api_key": api_key, "concurrency": concurrency}
    args = backend_args_for(backend, flags, parse_backend_args(backend_arg))
    with reported_errors():
        cfg = EvalConfig(models=[ModelSpec.parse(m) for m in model], data=list(data), out=str(out_dir),
                         backend=backend, backend_args=args, m=samples,
                         temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed, limit=limit,
                         stats=list(stats or []), strict_format=strict_format, chunk_size=chunk_size, plots=plots,
                         overwrite=overwrite, allow_identical_samples=allow_identical_samples)
        cfg.validate()
        cfg.check_models()  # a mistyped path stops here, not deep inside the model loader
        result = run_eval(cfg, progress=progress and console.is_terminal, command=redacted(current_command()))
    out.print(_rich_table(result.summary, title=f"{len(result.summary['evals'])} evaluation(s), scores x 100"))
    what = f"generated {result.generated} question(s)" if result.generated else "reused every completion"
    console.print(f"[green]done[/] ({what}): {result.out}/table.md, summary.json, results/"
                  + (f", {len(result.summary['plots'])} plot(s) in plots/" if result.summary.get("plots") else ""))


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
    from ..evaluation import compare_summaries, render_report, write_plots

    with reported_errors():
        merged = compare_summaries(runs, names=name)
        check_section(merged, section)
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
    from .._settings import SettingError, suggest

    known = sections(summary)
    if section not in known:
        raise SettingError("section", section, "", flag="--section", message=(
            f"--section {section!r} is not in these runs{suggest(section, known)} Known: {', '.join(known)}"))


def _rich_table(summary: dict[str, Any], *, section: str = "overall", title: str | None = None):
    """The main table (Table 1 layout) as a rich Table, best values in bold."""
    import re

    from rich.table import Table

    from ..evaluation import main_table

    header, rows = main_table(summary, section=section)
    table = Table(title=title, show_lines=False, header_style="bold")
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i < 2 else "right")
    for r in rows:
        if r[0] and table.row_count:
            table.add_section()
        table.add_row(*(re.sub(r"\*\*(.+?)\*\*", r"[bold green]\1[/]", c) for c in r))
    return table


def _relative(path: Path, base: Path) -> str:
    import os

    return Path(os.path.relpath(path, base)).as_posix()


def _callback(ctx: typer.Context, **kwargs: Any) -> None:
    if ctx.invoked_subcommand is not None:
        return
    run(**kwargs)


# `curriculum eval [OPTIONS]` runs an evaluation and `curriculum eval run [OPTIONS]` is the same command: the
# group callback takes exactly `run`'s options (declared once, on `run`).
_callback.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
     *inspect.signature(run, eval_str=True).parameters.values()])
_callback.__annotations__ = {}
_callback.__doc__ = run.__doc__
eval_app.callback(invoke_without_command=True)(_callback)
eval_app.command("run")(run)


def register(app: typer.Typer) -> None:
    """Add ``curriculum eval`` (with ``run`` and ``compare``) to the `curriculum` app."""
    app.add_typer(eval_app, name="eval")
