"""`curriculum globalrag plans | table`: GlobalRAG's gold plan graphs and its Table 1 (docs/globalrag.md)."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..loaders import load_examples
from ..methods.globalrag import gold_plans, read_agent_summary, render_table1, write_plans
from .common import out, reported_errors

globalrag_app = typer.Typer(
    help="GlobalRAG (docs/globalrag.md): gold plan graphs for training, and an agent evaluation in its Table 1.",
    no_args_is_help=True, rich_markup_mode="rich", pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]})


class PlanDataset(str, Enum):
    hotpotqa = "hotpotqa"
    musique = "musique"
    twowiki = "2wikimultihopqa"


class Arrows(str, Enum):
    rewrite = "rewrite"
    keep = "keep"


@globalrag_app.command("plans")
def plans(
    dataset: Annotated[PlanDataset, typer.Option("--dataset", "-d", help="Whose annotations make the plans: "
                                                 "MuSiQue's decompositions, 2Wiki's evidences, HotpotQA's "
                                                 "supporting facts.", show_default=False)],
    input_: Annotated[Path, typer.Option("--input", "-i", help="The dataset file (any layout the loaders read).",
                                         show_default=False)],
    out_file: Annotated[Path, typer.Option("--out", "-o", help="The plan file to write (JSONL, written "
                                           "atomically).", show_default=False)],
    musique_arrows: Annotated[Arrows, typer.Option(help="MuSiQue's 'subject >> relation' steps: rewritten as "
                                                   "questions, or kept as they are.")] = Arrows.rewrite,
) -> None:
    """Write the gold plan graph of every row of a dataset file, keyed by row id.

    The plans come from the dataset's own annotations (no teacher model); `curriculum train recipe=globalrag`
    rewards the model's plans against them. Prints how many rows got a plan.

    [bold]Example[/]

      curriculum globalrag plans --dataset musique --input musique_ans_v1.0_train.jsonl --out plans/musique-train.jsonl
    """
    with reported_errors():
        recs, counts = gold_plans(load_examples(dataset.value, input_), musique_arrows=musique_arrows.value)
        write_plans(out_file, recs)
    out.print(f"{escape(str(out_file))}: {escape(json.dumps(counts))}", soft_wrap=True, highlight=False)


@globalrag_app.command("table")
def table(
    summary: Annotated[Path, typer.Argument(help="An agent evaluation: the --out folder of `curriculum eval "
                                            "--agent`, or its summary.json.", show_default=False)],
    paper_rows: Annotated[bool, typer.Option(help="Show the paper's GlobalRAG rows beside the evaluation's.")] = True,
) -> None:
    """Print an agent evaluation in the layout of GlobalRAG's Table 1.

    EM / F1 x 100 per dataset, with the paper's GlobalRAG rows beside the evaluation's.

    [bold]Example[/]

      curriculum globalrag table outputs/eval-grag
    """
    with reported_errors():
        text = render_table1(read_agent_summary(summary), paper_rows=paper_rows)
    typer.echo(text, nl=False)


def register(app: typer.Typer) -> None:
    app.add_typer(globalrag_app, name="globalrag")
