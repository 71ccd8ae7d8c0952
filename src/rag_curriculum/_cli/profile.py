"""`curriculum profile`: a model's pass rate on the same questions at several levels (1, 2, 4, 8 and K by default),
with paired bootstrap intervals and the expected informative fraction of a GRPO group.

    curriculum profile --dataset musique --input musique_ans_v1.0_train.jsonl --n 500 \\
        --model Qwen/Qwen2.5-7B-Instruct --samples 8 --out outputs/musique-profile
    curriculum profile outputs/musique-adaptive --backend transformers --model $GEMMA --levels 1,4,K
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from .._settings import MAX_COUNT, check_value
from ..config import bind, field_help
from ..partition import ProfileConfig
from ..partition import profile as run_profile
from .common import PrintConfig, config_options, console, out, reported_errors, show_config, with_options
from .generating import BACKEND_OPTIONS, ENGINE_OPTIONS, GENERATION_ONLY, backend_options, generation_run

P = ProfileConfig
OPTIONS = config_options(P, exclude=("shards", "backend_args"), types={"out": Path},
                         short={"out": "-o", "dataset": "-d", "input": "-i", "n": "-n", "K": "-K", "model": "-M"})
CLI_ONLY = ("max_chunks", *GENERATION_ONLY)


@with_options(OPTIONS, BACKEND_OPTIONS, ENGINE_OPTIONS)
def profile(
    input_dir: Annotated[Path | None, typer.Argument(metavar="SHARDS", help=field_help(P, "shards"),
                                                  show_default=False)] = None,
    max_chunks: Annotated[int | None, typer.Option(help="Stop after generating this many chunks (run again to "
                                                   "continue).", show_default=False)] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    print_config: PrintConfig = False,
    **options: Any,
) -> None:
    """Measure a model's pass rate and training reward on the same questions at several synthetic levels: k samples
    per question and level through the partition's engines (resumable: run the same command again after a stop),
    each scored with the training reward (--recipe's rewards, or --reward; default the RAG-RL total) and by answer
    F1 (the pass rate). Sampling defaults to the recipe's. Writes profile.parquet (every question and level: the
    samples, their rewards and components, the predictions, c, the pass rate), profile.json (per level: the mean
    pass rate and reward, and the expected share of informative GRPO groups of G samples, rewards not all equal
    (spread above --max-spread), of the reward, of each component and of the pass rate alone, each with a paired
    bootstrap 95% interval) and profile.png. `curriculum build --profile OUT` reads it."""
    with reported_errors():
        if max_chunks is not None:
            check_value("max_chunks", max_chunks, int, {"ge": 1, "le": MAX_COUNT}, flag="--max-chunks")
        flags = {k: v for k, v in options.items() if k not in CLI_ONLY and v is not None}
        flags["shards"] = str(input_dir) if input_dir is not None else None
        if "out" in flags:
            flags["out"] = str(flags["out"])
        flags["backend_args"] = backend_options(flags.get("backend", P.backend), options)
        cfg = bind(ProfileConfig, flags)
        cfg.validate()
        if print_config:
            show_config(cfg)
            return
        if cfg.model is not None:
            cfg.check_model()
        result = run_profile(cfg, max_chunks=max_chunks, **generation_run(options, progress))
    rep = result.run
    if rep is not None and rep.generated_chunks:
        console.print(f"generated {rep.generated_questions:,} question-level(s), {rep.completions:,} completions in "
                      f"{rep.seconds:,.1f}s ({rep.completions_per_second:.3g} completions/s)")
    if not result.complete:
        console.print("[yellow]stopped before the end: run the same command again to continue[/]")
        return
    print_profile(result.summary or {})
    console.print(f"[green]done:[/] {result.out}/ profile.parquet, profile.json, profile.png")


def print_profile(summary: dict[str, Any]) -> None:
    """The per-level table of a profile's summary."""
    from rich.table import Table

    g = summary.get("group_size")
    reward = summary.get("reward") or {}
    names = reward.get("components") or []
    spread = (summary.get("sampling") or {}).get("max_spread") or 0.0
    t = Table(title=f"pass rate and {_reward_name(reward)} per level over {summary.get('paired_questions')} "
              f"questions x {summary.get('samples_per_question')} samples (95% paired bootstrap intervals); "
              f"informative: a group of G={g} with rewards {'not all equal' if not spread else f'spread > {spread:g}'}",
              title_justify="left")
    alone = "/".join(n.rsplit("/", 1)[-1] for n in names)
    cols = ["level", "distractors", "pass rate", "vs first level", "reward", f"informative (G={g})",
            *([f"{alone} alone"] if names else []), "pass rate alone"]
    for col in cols:
        t.add_column(col, justify="right")
    for lv in summary.get("levels") or []:
        f = _figures(summary, lv)
        if f.get("pass_rate") is None:
            t.add_row(str(lv), "", "no scored question", *[""] * (len(cols) - 3))
            continue
        comps = f.get("components") or {}
        t.add_row(str(lv), f"{f['mean_distractors']}", _ci(f, "pass_rate"), _ci(f, "change", signed=True),
                  f"{f['reward']:+.2f}" if f.get("reward") is not None else "", _ci(f, "informative"),
                  *(["/".join(f"{comps[n]['informative']:.2f}" if n in comps else "-" for n in names)] if names
                    else []),
                  f"{f['informative_pass_rate']:.3f}" if "informative_pass_rate" in f else "")
    out.print(t)


def _reward_name(reward: dict[str, Any]) -> str:
    rewards = reward.get("rewards") or []
    if not rewards:
        return "reward"
    return "reward " + " + ".join(f"{r['weight']:g} x {r['name']}" if r["weight"] != 1 else r["name"]
                                  for r in rewards)


def _figures(summary: dict[str, Any], level: int) -> dict[str, Any]:
    table = summary.get("per_level") or {}
    return table.get(str(level)) or {}


def _ci(f: dict[str, Any], key: str, *, signed: bool = False) -> str:
    lo, hi = f[f"{key}_ci"]
    fmt = "+.3f" if signed else ".3f"
    return f"{f[key]:{fmt}} [{lo:{fmt}},{hi:{fmt}}]"


def register(app: typer.Typer) -> None:
    """Add `curriculum profile` to the `curriculum` app."""
    app.command("profile")(profile)
