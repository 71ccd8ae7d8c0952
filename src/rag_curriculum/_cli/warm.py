"""`curriculum warm-start`: a tiny model that can learn on a CPU (a short supervised warm start on training rows)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ..train import WarmStartConfig
from ..train import warm_start as run
from .common import out, reported_errors


def warm_start(
    shards: Annotated[Path, typer.Argument(help="The training rows: a curriculum build (curriculum build ... --out "
                                           "DIR). Evaluate on rows built from another file (the dev set).",
                                           show_default=False)],
    out_dir: Annotated[Path, typer.Option("--out", help="Where the warm-started model goes (written as "
                                          "OUT.partial, renamed when done).", show_default=False)],
    model: Annotated[str, typer.Option(help="A local model to fine-tune; empty: a tiny Qwen2-style model made "
                                       "here, its tokenizer trained on the rows' text (nothing is downloaded).")] = "",
    rows: Annotated[int, typer.Option(help="The first ROWS rows of the curriculum are taught (and trained on "
                                      "after: recipe=cpu-learn uses 8).")] = 8,
    epochs: Annotated[float, typer.Option(help="Passes over the ROWS x COPIES examples; few on purpose, so the "
                                          "model stays imperfect.")] = 20.0,
    copies: Annotated[int, typer.Option(help="Examples per row.")] = 4,
    plain: Annotated[float, typer.Option(help="The fraction of a row's copies that answer in a plain sentence, "
                                         "without the format's tags (the RAG-RL reward scores them as format "
                                         "errors): the model then writes the format on some samples only.")] = 0.5,
    learning_rate: Annotated[float, typer.Option("--learning-rate", help="The SFT learning rate (constant).")] = 3e-3,
    seed: Annotated[int, typer.Option(help="Seeds the model's weights, the examples' order and the SFT.")] = 0,
    hidden_size: Annotated[int, typer.Option(help="The tiny model's width (without --model).")] = 128,
    layers: Annotated[int, typer.Option(help="The tiny model's layers (without --model).")] = 2,
    overwrite: Annotated[bool, typer.Option(help="Replace a non-empty --out.")] = False,
) -> None:
    """Warm-start a model so that GRPO has something to learn on a CPU.

    A random model scores alike on every sample of a group: every GRPO advantage is zero and a run shows loss 0 at
    every step. This fine-tunes (TRL's SFTTrainer, the loss on completions only) on the first ROWS training rows,
    each answered in RAG-RL's format with its gold answer and gold passages cited, or (the --plain fraction) in a
    plain sentence; the model comes out mixed, and `curriculum train recipe=cpu-learn` then shows the reward and the
    exact match rising (docs/learning.md).

    [bold]Example[/]

      curriculum build --dataset musique --input TRAIN.jsonl --schedule min-max --K 3 --n 48 --out outputs/musique-learn

      curriculum warm-start outputs/musique-learn --out outputs/tiny-warm

      curriculum train recipe=cpu-learn
    """
    with reported_errors():
        result = run(WarmStartConfig(
            shards=str(shards), out=str(out_dir), model=model, rows=rows, epochs=epochs, copies=copies, plain=plain,
            learning_rate=learning_rate, seed=seed, hidden_size=hidden_size, layers=layers, overwrite=overwrite))
    table = Table(title=f"warm start of {escape(model or 'a tiny model made here')}", title_justify="left")
    for col in ("rows", "examples", "loss first", "loss last", "seconds", "model"):
        table.add_column(col)
    table.add_row(str(rows), str(result.examples), f"{result.loss_first:.3f}", f"{result.loss_last:.3f}",
                  f"{result.seconds:.0f}", escape(str(result.out)))
    out.print(table)
    out.print(f"next: curriculum train recipe=cpu-learn model.name_or_path={escape(str(result.out))}")


def register(app: typer.Typer) -> None:
    app.command("warm-start")(warm_start)
