"""The ``curriculum`` command: thin. It parses arguments and calls the library; heavy optional dependencies (torch,
vLLM, bm25s, fastapi ...) are imported inside the commands. Each command's options live with it in ``rag_curriculum._cli``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer
from typer.core import TyperGroup

from ._cli import build as _build
from ._cli import data as _data
from ._cli import evaluate as _eval
from ._cli import globalrag as _globalrag
from ._cli import hub as _hub
from ._cli import partition as _partition
from ._cli import profile as _profile
from ._cli import recipes as _recipes
from ._cli import train as _train
from ._cli import verl as _verl
from ._cli import warm as _warm
from ._cli.common import configure_logging
from ._plumbing import mask_output
from ._version import __version__

try:  # rag-retriever (./retriever) is the retrieval extra: without it, index and serve say what to install
    from ._cli import index as _index
    from ._cli import serve as _serve

    _RETRIEVER_COMMANDS: tuple = (_index, _serve)
except ModuleNotFoundError as _e:
    if _e.name != "rag_retriever":
        raise
    from ._cli import no_retriever

    _RETRIEVER_COMMANDS = (no_retriever,)

#: Options renamed, each to its new name: the old name is read for one release, with a warning naming the new one.
RENAMED_OPTIONS = {"--topk": "--top-k"}


def renamed_options(args: list[str], takes: Callable[[str], bool] | None = None) -> list[str]:
    """``args`` with each renamed option (:data:`RENAMED_OPTIONS`, also as ``--old=VALUE``) named by its new name, and
    a warning on stderr for each; ``takes(new)``: whether the command takes the new name (where it does not, the
    option is left as written, so the command's refusal names what was typed).

    >>> renamed_options(["eval", "--topk", "2", "--topk=3", "--m", "1"])[1:4]
    ['--top-k', '2', '--top-k=3']
    """
    out = []
    for a in args:
        if a == "--":
            out.extend(args[len(out):])
            break
        old, eq, value = a.partition("=")
        if old in RENAMED_OPTIONS and (takes is None or takes(RENAMED_OPTIONS[old])):
            new = RENAMED_OPTIONS[old]
            typer.echo(f"warning: {old} is now called {new}; the old name is read until the next release", err=True)
            a = new + eq + value
        out.append(a)
    return out


class _Curriculum(TyperGroup):
    """The root command: reads renamed options (:func:`renamed_options`) before any command parses them, and says a
    command's own name for an option given by another's (:func:`own_name`)."""

    def parse_args(self, ctx, args):  # type: ignore[no-untyped-def]
        return super().parse_args(ctx, renamed_options(list(args), lambda new: _takes(self, ctx, list(args), new)))

    def invoke(self, ctx):  # type: ignore[no-untyped-def]
        try:
            return super().invoke(ctx)
        except Exception as e:  # (click's NoSuchOption: typer's click is its own copy, so it is told by its name)
            if type(e).__name__ == "NoSuchOption" and getattr(e, "ctx", None) is not None:
                name = own_name(self, e.ctx.command, e.option_name)
                if name is not None:
                    e.message = f"No such option: {e.option_name} (this command's name for it is {name})"
                    e.possibilities = None
            raise


def own_name(root: Any, command: Any, option: str) -> str | None:
    """The option of ``command`` that ``option`` means: the one whose setting has that name (``--samples`` is
    partition's ``--pass-at``: both set ``samples``), or the one setting what ``option`` sets in another command
    (``--pass-at`` is profile's ``--samples``); None when there is none."""
    params = [p for p in getattr(command, "params", []) if getattr(p, "opts", None)]
    wanted = option.split("=", 1)[0]
    names = {wanted.lstrip("-").replace("-", "_")}

    def walk(cmd: Any) -> None:
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)
        for p in getattr(cmd, "params", []):
            if wanted in getattr(p, "opts", ()) and p.name:
                names.add(p.name)

    walk(root)
    found = [p for p in params if p.name in names and wanted not in p.opts]
    return found[0].opts[0] if len(found) == 1 else None


def _takes(group: Any, ctx: Any, args: list[str], option: str) -> bool:
    """Whether the command ``args`` name (through its groups: ``verl steps``) has the option ``option``."""
    cmd = group
    for a in args:
        if not hasattr(cmd, "get_command"):  # (a command, not a group: typer's click is its own copy)
            break
        if not a.startswith("-"):
            cmd = cmd.get_command(ctx, a)
    return cmd is not None and not hasattr(cmd, "get_command") and any(
        option in p.opts or option in p.secondary_opts for p in cmd.params)


app = typer.Typer(
    name="curriculum",
    cls=_Curriculum,
    help=(
        "Build RAG-RL curricula of controlled difficulty from HotpotQA, MuSiQue and 2WikiMultihopQA, partition "
        "them by what a base model can answer, train on them with GRPO, and evaluate answer / citation / joint F1."
    ),
    no_args_is_help=True,
    add_completion=True,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# Each module registers its own commands (build; index; serve; inspect/validate; push; partition; profile; train;
# warm-start; eval; globalrag; recipes; verl).
for _module in (_build, *_RETRIEVER_COMMANDS, _data, _hub, _partition, _profile, _train, _warm, _eval, _globalrag,
                _recipes, _verl):
    _module.register(app)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rag-curriculum {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug messages (the toolkit's own)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Log warnings and errors only."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    if verbose and quiet:
        raise typer.BadParameter("--verbose and --quiet contradict each other; give one", param_hint="-v / -q")
    mask_output()  # every line printed (results, logs, errors, a library's own lines): secrets masked
    configure_logging(verbose=verbose, quiet=quiet)


#: Commands that also run alone as ``python -m rag_curriculum.<name>`` (one process per GPU under ``accelerate launch
#: -m`` / ``torchrun -m``). That package's ``__main__`` reaches them through this ``curriculum`` entry point
#: (``main(name)``), so the library never imports the CLI that sits above it.
ALONE = {"train": _train.main}


def main(alone: str | None = None) -> None:
    """The ``curriculum`` command; ``main("train")``: the train command alone (``python -m rag_curriculum.train``)."""
    if alone is not None:
        mask_output()  # (the root callback, which masks every printed line, does not run for a command alone)
        ALONE[alone]()
        return
    app()


if __name__ == "__main__":
    main()
