"""`curriculum push`: a shard directory uploaded to the Hugging Face Hub as a dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..hub import push as push_folder
from .common import out, reported_errors


def push(
    directory: Annotated[Path, typer.Argument(help="A folder made by `curriculum build`, or a bucket of "
                                              "`curriculum partition` (answerable/, ...).", show_default=False)],
    repo: Annotated[str, typer.Argument(help="The Hub dataset repository, OWNER/NAME (made if missing).",
                                        show_default=False)],
    private: Annotated[bool, typer.Option(help="Make a new repository private (an existing one keeps its "
                                          "visibility).")] = False,
    message: Annotated[str | None, typer.Option("--message", "-m", help="The commit message \\[default: what "
                                                "the folder holds]", show_default=False)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check the folder and its card, list what would be "
                                          "sent, send nothing.")] = False,
) -> None:
    """Upload a curriculum to the Hugging Face Hub as a dataset whose card is its data card, so that
    `datasets.load_dataset(REPO, split="train")` reads the shards in curriculum order. The folder's hashes and the
    card's YAML (configs resolved to the shards in order, dataset_info) are checked first, offline; the upload is
    one commit, replacing the repository's earlier shards. Log in first (`hf auth login`, or set HF_TOKEN).

    [bold]Examples[/]

      curriculum push outputs/hotpotqa-linear me/hotpotqa-linear --dry-run

      curriculum push outputs/hotpotqa-linear me/hotpotqa-linear --private
    """
    with reported_errors():
        sent = push_folder(directory, repo, private=private or None, commit_message=message, dry_run=dry_run)
    what = f"{sent.num_rows:,} rows, {len(sent.data_files)} shard(s), {len(sent.files)} files, {sent.bytes / 1e6:.2f} MB"
    if dry_run:
        out.print(f"[green]ready[/]: {escape(str(directory))} -> dataset {escape(repo)} ({what}); card checked: "
                  "configs -> data/*.parquet in curriculum order. Nothing sent (--dry-run).", soft_wrap=True)
        for f in sent.files:
            out.print(f"  {escape(f)}", highlight=False)
        return
    out.print(f"[green]pushed[/]: {escape(str(directory))} -> {escape(sent.url or repo)} ({what})", soft_wrap=True)
    out.print(f'load it: datasets.load_dataset("{escape(repo)}", split="train")', highlight=False)


def register(app: typer.Typer) -> None:
    app.command("push")(push)
