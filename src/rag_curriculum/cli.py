"""The ``curriculum`` command: thin. It parses arguments and calls the library; heavy optional dependencies (torch,
vLLM, bm25s, fastapi ...) are imported inside the commands. Each command's options live with it in ``rag_curriculum._cli``."""

from __future__ import annotations

import importlib
import typing
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import typer
from typer.core import TyperGroup

from ._cli.common import configure_logging
from ._plumbing import mask_output
from ._version import __version__

#: Every command, in the order ``curriculum --help`` lists them: name -> (the module of ``rag_curriculum._cli`` that
#: registers it, its line in that list). A command's module is imported when the command runs or its own help is
#: asked for, never for ``curriculum --help``: each module imports the library it drives (pyarrow, the trainers'
#: configuration, rag-retriever ...), and the command line starts in a fraction of a second without them.
COMMANDS: dict[str, tuple[str, str]] = {
    "build": ("build", "Build a curriculum of controlled difficulty as ordered Parquet shards, a manifest and a data card."),
    "index": ("index", "Index a dataset's paragraphs and/or a corpus (BM25, dense or hybrid) for distractors and serving."),
    "serve": ("serve", "Serve an index (BM25, dense or hybrid) over HTTP with Search-R1's retriever protocol."),
    "inspect": ("data", "Summarise a source file, a shard directory, or an evaluation's or partition's predictions."),
    "validate": ("data", "Check a shard directory or an index against its manifest; exits 1 when anything is wrong."),
    "push": ("hub", "Upload a curriculum to the Hugging Face Hub as a dataset, its card the data card."),
    "partition": ("partition", "Partition questions by what a base model can answer (pass@k)."),
    "partition-merge": ("partition", "Join the work directories of a partition sharded over several machines."),
    "profile": ("profile", "Measure a model's pass rate and training reward per level (the level profile)."),
    "train": ("train", "Train a RAG answer generator with GRPO (TRL's GRPOTrainer) on a curriculum, in its order."),
    "warm-start": ("warm", "Warm-start a model on the answer format, so that GRPO has something to learn on a CPU."),
    "recipes": ("recipes", "List the shipped recipes."),
    "eval": ("evaluate", "Evaluate models: answer, citation and joint F1, Table 1's layout, plots; compare runs."),
    "globalrag": ("globalrag", "GlobalRAG: gold plan graphs for training, and an agent evaluation in its Table 1."),
    "verl": ("verl", "For verl launch scripts: shard files, reward file, prompt limit, steps, agent rows."),
}

#: The modules that need rag-retriever (the retrieval extra): without it, ``no_retriever`` registers their commands,
#: which say what to install.
NEEDS_RETRIEVER = {"index", "serve"}

_LOADED: dict[str, Any] = {}  # command name -> its click command, built once per process


def _load(module: str) -> dict[str, Any]:
    """The click commands ``rag_curriculum._cli.<module>`` registers (each once per process), their metavars plain
    (:func:`plain_metavars`) and their line in ``curriculum --help`` the table's."""
    try:
        mod = importlib.import_module(f"{__package__}._cli.{module}")
    except ModuleNotFoundError as e:
        if module not in NEEDS_RETRIEVER or e.name != "rag_retriever":
            raise
        mod = importlib.import_module(f"{__package__}._cli.no_retriever")
    sub = typer.Typer(rich_markup_mode="rich", pretty_exceptions_show_locals=False)
    mod.register(sub)
    built = typer.main.get_group(sub).commands
    for name, cmd in built.items():
        plain_metavars(cmd)
        if name in COMMANDS:
            cmd.short_help = COMMANDS[name][1]
        _LOADED.setdefault(name, cmd)
    return {name: _LOADED[name] for name in built}


def load_command(name: str) -> Any:
    """The click command ``curriculum NAME`` runs (its module imported now), or None for a name that is none."""
    if name not in _LOADED and name in COMMANDS:
        _load(COMMANDS[name][0])
    return _LOADED.get(name)


def _type_word(param: Any) -> str:
    """A valued option's type in a word (INT, FLOAT, PATH, TEXT), or its choices a|b|c."""
    desc = getattr(param, "type_descriptor", None)  # typer >= 0.2x builds its own parameter types
    if desc is not None:
        if getattr(desc, "is_choice", False) and desc.choices:
            return "|".join(str(getattr(c, "value", c)) for c in desc.choices)
        annotation = desc.annotation
        if getattr(desc, "is_list", False):
            annotation = (typing.get_args(annotation) or (str,))[0]
        if getattr(desc, "is_path", False):
            return "PATH"
        name = getattr(annotation, "__name__", str(annotation))
    else:  # click's types (typer before 0.2x)
        kind = getattr(param, "type", None)
        if getattr(kind, "choices", None):
            return "|".join(str(getattr(c, "value", c)) for c in kind.choices)
        name = getattr(kind, "name", "text")
    name = name.lower()
    return ("INT" if name.startswith("int") else "FLOAT" if name.startswith("float")
            else "PATH" if "path" in name else "TEXT")


def plain_metavars(cmd: Any) -> None:
    """Give every parameter of ``cmd`` (and of its subcommands) a plain metavar where it has none (:func:`_plain`),
    its help option too, once its help is asked for (click makes that option then)."""
    for sub in getattr(cmd, "commands", {}).values():
        plain_metavars(sub)
    for param in cmd.params:
        _plain(param)
    format_help = cmd.format_help

    def plain_format_help(ctx: Any, formatter: Any) -> Any:
        for param in cmd.get_params(ctx):
            _plain(param)
        return format_help(ctx, formatter)

    cmd.format_help = plain_format_help


def _plain(param: Any) -> None:
    """Nothing for a flag, a valued option's type in a word or its choices (``--n INT``, ``--on-error
    raise|skip``), an argument's name in capitals (``PATH``), where the parameter has no metavar of its own: typer's
    (``<bool>`` after every flag, ``<int range>``, ``{path}``) are noise in help."""
    argument = getattr(param, "param_type_name", "") == "argument" or type(param).__name__.endswith("Argument")
    if argument and hasattr(param, "display_type_rich"):  # typer 0.2x: the name says it; no type column beside it
        param.display_type_rich = lambda ctx: None
    if param.metavar is not None:
        return
    if argument:
        param.metavar = (param.name or "arg").upper() + ("..." if param.nargs != 1 else "")
    elif getattr(param, "is_flag", False) or getattr(param, "count", False) or _is_bool(param):
        param.metavar = ""
    else:
        param.metavar = _type_word(param)


def _is_bool(param: Any) -> bool:
    desc = getattr(param, "type_descriptor", None)
    return desc is not None and desc.annotation is bool


class _Commands(dict):
    """The root's commands, each loaded when first asked for by name (:func:`load_command`); iterating loads them
    all (a test walking every command's options)."""

    def __missing__(self, name: str) -> Any:
        cmd = load_command(name)
        if cmd is None:
            raise KeyError(name)
        self[name] = cmd
        return cmd

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        try:
            return self[name]
        except KeyError:
            return default

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or name in COMMANDS

    def _all(self) -> None:
        for name in COMMANDS:
            self.get(name)

    def __iter__(self) -> Iterator[str]:
        self._all()
        return super().__iter__()

    def __len__(self) -> int:
        self._all()
        return super().__len__()

    def keys(self):  # type: ignore[override]
        self._all()
        return super().keys()

    def values(self):  # type: ignore[override]
        self._all()
        return super().values()

    def items(self):  # type: ignore[override]
        self._all()
        return super().items()


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
    """The root command: its commands loaded as they are asked for (:data:`COMMANDS`; its own help lists them from
    the table, importing none), renamed options read (:func:`renamed_options`) before any command parses them, and
    a command's own name said for an option given by another's (:func:`own_name`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _Commands(self.commands)
        self._listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return [*COMMANDS, *(n for n in dict.keys(self.commands) if n not in COMMANDS)]

    def get_command(self, ctx: Any, name: str) -> Any:
        if self._listing and name in COMMANDS:  # the root's help: a name and its line, nothing imported
            return SimpleNamespace(name=name, short_help=COMMANDS[name][1], help=COMMANDS[name][1], hidden=False,
                                   deprecated=False, get_short_help_str=lambda limit=45: COMMANDS[name][1])
        return self.commands.get(name)

    def format_help(self, ctx: Any, formatter: Any) -> Any:
        for param in self.get_params(ctx):
            _plain(param)
        self._listing = True
        try:
            return super().format_help(ctx, formatter)
        finally:
            self._listing = False

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
ALONE = {"train": "train"}


def main(alone: str | None = None) -> None:
    """The ``curriculum`` command; ``main("train")``: the train command alone (``python -m rag_curriculum.train``)."""
    if alone is not None:
        mask_output()  # (the root callback, which masks every printed line, does not run for a command alone)
        importlib.import_module(f"{__package__}._cli.{ALONE[alone]}").main()
        return
    app()


if __name__ == "__main__":
    main()
