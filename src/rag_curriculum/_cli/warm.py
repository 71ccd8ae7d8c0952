"""`curriculum warm-start`: a tiny model that can learn on a CPU (a short supervised warm start on training rows)."""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ..shards import read_manifest
from ..train import WarmStartConfig, compose_train_config
from ..train import warm_start as run
from .common import out, reported_errors


def warm_start(
    shards: Annotated[Path, typer.Argument(help="The training rows: a curriculum build (curriculum build ... --out "
                                           "DIR). Evaluate on rows built from another file (the dev set).",
                                           show_default=False)],
    out_dir: Annotated[Path, typer.Option("--out", help="Where the warm-started model goes (written in a "
                                          "hidden folder beside it, moved into place when done).",
                                          show_default=False)],
    model: Annotated[str, typer.Option(help="A local model folder or .gguf file to fine-tune (a base model without a "
                                       "chat template is taught after its completion-style prompt: "
                                       "docs/base-models.md); empty: a tiny Qwen2-style model made here, its "
                                       "tokenizer trained on the rows' text (nothing is downloaded).")] = "",
    rows: Annotated[int, typer.Option(help="The first ROWS rows of the curriculum are taught (and trained on "
                                      "after: recipe=cpu-learn uses 8).")] = 8,
    epochs: Annotated[float | None, typer.Option(
        help="Passes over the ROWS x COPIES examples; few on purpose, so the model stays imperfect. \\[default: 20; "
             "40 with --agent]", show_default=False)] = None,
    copies: Annotated[int, typer.Option(help="Examples per row.")] = 4,
    plain: Annotated[float | None, typer.Option(
        help="The fraction of a row's copies that answer in a plain sentence, without the format's tags (the RAG-RL "
             "reward scores them as format errors; with --agent, a turn with no action, scored 0): the model then "
             "writes the format (searches) on some samples only. \\[default: 0.5; 0.75 with --agent]",
        show_default=False)] = None,
    learning_rate: Annotated[float, typer.Option("--learning-rate", help="The SFT learning rate (constant).")] = 3e-3,
    batch_size: Annotated[int, typer.Option(help="Examples per SFT step. Each batch is padded to its longest prompt: "
                                            "1 trains a large model on a CPU with the least work and memory "
                                            "(Gemma 3 270M: activations of about 2 MB a token).")] = 4,
    seed: Annotated[int, typer.Option(help="Seeds the model's weights, the examples' order and the SFT.")] = 0,
    hidden_size: Annotated[int, typer.Option(help="The tiny model's width (without --model).")] = 128,
    layers: Annotated[int, typer.Option(help="The tiny model's layers (without --model).")] = 2,
    agent: Annotated[str, typer.Option(help="search-r1: warm-start a search agent (Search-R1's tags): per row a "
                                       "search for the question's first entity, then the gold answer after what "
                                       "--retriever returns for it; the --plain copies write a turn with no action. "
                                       "Left out: RAG-RL's closed-context format.", show_default=False)] = "",
    retriever: Annotated[str, typer.Option(help="With --agent: the index directory (curriculum index) or the URL "
                                           "of `curriculum serve` the agent will train against.",
                                           show_default=False)] = "",
    retriever_retries: Annotated[int, typer.Option(help="With --agent and a server's URL: times a request is sent "
                                                   "again after a connection error or a 502, 503 or 504 answer "
                                                   "(waiting 0, 1, 2, 4, 8, ... s before each).")] = 5,
    top_k: Annotated[int | None, typer.Option(help="With --agent: passages per search (as the training recipe's "
                                             "agent.top_k). \\[default: 3]", show_default=False)] = None,
    template: Annotated[str | None, typer.Option(help="With --agent: the search prompt (search-r1 | "
                                                 "search-r1-original), as the recipe's agent.template. "
                                                 "\\[default: search-r1]", show_default=False)] = None,
    freeze_embeddings: Annotated[bool, typer.Option(
        help="Leave the token embeddings (and a tied output layer) as they are: for a small model with a large "
             "vocabulary on a CPU (Gemma 3 270M: 168M of its 268M weights).")] = False,
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

    A search agent (docs/search-agents.md): --agent search-r1 --retriever indexes/musique-train --top-k 2, then
    curriculum train recipe=search-learn.
    """
    with reported_errors():
        result = run(WarmStartConfig(
            shards=str(shards), out=str(out_dir), model=model, rows=rows, epochs=epochs, copies=copies, plain=plain,
            learning_rate=learning_rate, batch_size=batch_size, seed=seed, hidden_size=hidden_size, layers=layers, agent=agent,
            retriever=retriever, retriever_retries=retriever_retries, top_k=top_k, template=template, freeze_embeddings=freeze_embeddings,
            overwrite=overwrite))
    table = Table(title=f"warm start of {escape(model or 'a tiny model made here')}", title_justify="left")
    for col in ("rows", "examples", "loss first", "loss last", "seconds", "model"):
        table.add_column(col)
    table.add_row(str(rows), str(result.examples), f"{result.loss_first:.3f}", f"{result.loss_last:.3f}",
                  f"{result.seconds:.0f}", escape(str(result.out)))
    out.print(table)
    out.print(f"next: {escape(next_train_command(shards, result.out, model=model, rows=rows, agent=agent, retriever=retriever, top_k=top_k, template=template))}")


#: A curriculum smaller than one run of recipe=cpu-gemma takes (prompts a step x steps) is trained on in one pass, 2
#: prompts x 2 generations a step: the README walkthrough's 4 rows are its 2 steps. (The tiny recipes go over the
#: rows the warm start taught many times on purpose.)
SMALL_RUN = ("batch.prompts_per_step=2", "batch.per_device_completions=2", "grpo.num_generations=2")


def next_train_command(shards: Path, model_out: Path, *, model: str = "", rows: int = 8, agent: str = "",
                       retriever: str = "", top_k: int | None = None, template: str | None = None) -> str:
    """The training command that follows a warm start, as the docs give it: ``recipe=search-learn`` for a search
    agent, ``cpu-gemma`` for a given model (a real one: Gemma 3 270M in the README), else ``cpu-learn``; on the
    warm start's shards and model, the rows it taught (the tiny recipes'), its retriever and top-k, the shards'
    dataset, and a curriculum smaller than cpu-gemma's run trained on in one pass (:data:`SMALL_RUN`)."""
    recipe = "search-learn" if agent else "cpu-gemma" if model else "cpu-learn"
    args = [f"model.name_or_path={_arg(model_out)}", f"data.shards={_arg(shards)}"]
    cfg = compose_train_config(recipe, ["model.name_or_path=x", "data.shards=x"])
    manifest = read_manifest(shards)
    datasets = sorted({str(s.get("dataset")) for s in manifest.get("sources") or [] if s.get("dataset")})
    if len(datasets) == 1 and datasets[0] != cfg.dataset:
        args.insert(0, f"dataset={datasets[0]}")
    if cfg.data.max_rows is not None and rows != cfg.data.max_rows:
        args.append(f"data.max_rows={rows}")
    if agent:
        args.append(f"agent.retriever={_arg(retriever)}")
        if top_k is not None and top_k != cfg.agent.top_k:
            args.append(f"agent.top_k={top_k}")
        if template and template != cfg.agent.template:
            args.append(f"agent.template={template}")
    total = int(manifest.get("num_rows") or 0)
    if recipe == "cpu-gemma" and 0 < total < (cfg.batch.prompts_per_step or 0) * int(cfg.grpo.get("max_steps") or 0):
        steps = math.ceil(total / 2)
        args += [*SMALL_RUN, f"grpo.max_steps={steps}", f"grpo.save_steps={steps}"]
    return " ".join(["curriculum train", f"recipe={recipe}", *args])


def _arg(path: object) -> str:
    """A path as the user gave it, quoted for the shell where it needs it."""
    return shlex.quote(str(path))


def register(app: typer.Typer) -> None:
    app.command("warm-start")(warm_start)
