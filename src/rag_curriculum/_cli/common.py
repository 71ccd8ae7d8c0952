"""Options and helpers shared by the commands (defined once, used everywhere)."""

from __future__ import annotations

import copy
import dataclasses
import errno as _errno
import inspect
import logging
import os
import re
import sys
import types as _types
import typing
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import click
import typer
from rag_plumbing import _errors as _base
from rich.console import Console, ConsoleDimensions
from rich.markup import escape

from .._plumbing import MaskingFilter, mask_secrets, redact_command
from .._settings import setting_flag
from ..config import field_help
from ..errors import CurriculumError, DataError, UnknownNameError, UsageError

#: The errors that carry their own hint: the toolkit's and the retriever's (its own distribution, which need not be
#: installed), whose classes both derive from the plumbing's they share.
OWN_ERRORS = (CurriculumError, _base.HintedError)
#: The errors of a wrong command (exit status 2), the toolkit's and the retriever's.
USAGE_ERRORS = (UsageError, UnknownNameError, _base.UsageError, _base.UnknownNameError)
DATA_ERRORS = (DataError, _base.DataError)


#: The width tables are laid out at when written to a file or a pipe with no terminal in sight (and ``COLUMNS``
#: does not say): rich takes 80 columns there, where a table of ten columns folds every cell into a column of ten
#: characters.
PIPED_WIDTH = 200


def _watched() -> bool:
    """Whether a person is watching: one of the standard streams is a terminal (``curriculum ... | tee log`` run
    from a shell: its output goes through a pipe to the terminal it came from)."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return True
        except OSError:
            continue
    return False


class _Console(Console):
    """rich's Console, wrapping lines at the width only on a terminal: written to a file or a pipe a line is one
    line, as a log reader or ``grep`` wants it. Tables fit the terminal's width, also through a pipe to it
    (``| tee log``); with no terminal at all (a log, CI) they are laid out at :data:`PIPED_WIDTH` columns (or
    ``COLUMNS``) instead of rich's 80."""

    @property  # type: ignore[override]
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self.is_terminal or self._width is not None or self._environ.get("COLUMNS") or _watched():
            return size  # (rich reads the width of whichever standard stream is a terminal)
        return ConsoleDimensions(max(size.width, PIPED_WIDTH), size.height)

    @size.setter
    def size(self, value: tuple[int, int]) -> None:
        Console.size.fset(self, value)  # type: ignore[attr-defined]

    @property  # type: ignore[override]
    def soft_wrap(self) -> bool:
        return self._soft_wrap or not self.is_terminal

    @soft_wrap.setter
    def soft_wrap(self, value: bool) -> None:
        self._soft_wrap = value


console = _Console(stderr=True)
out = _Console()

#: The exit status of a command that failed while it ran (bad input data, a missing file, an output in the way, a
#: model or server error, a failed write).
EXIT_ERROR = 1
#: The exit status of a usage error, the command itself being wrong: as click's own (an option that does not
#: parse, a missing argument), and the toolkit's UsageError / UnknownNameError (a value a setting cannot take, an
#: unknown option, name, recipe or argument).
EXIT_USAGE = 2


#: The loggers whose INFO lines the command line shows (the toolkit's own: its progress, what it wrote); every other
#: library shows its warnings and errors only (matplotlib's font cache, an HTTP client's line per request ...).
OWN_LOGGERS = ("rag_curriculum", "rag_retriever", "rag_plumbing")

#: Libraries that set their own loggers' level below WARNING, whose lines are dropped below WARNING at the handler
#: too: bm25s's own DEBUG line per index ("Building index from IDs": it sets its logger to DEBUG), faiss's loader
#: trying its CPU builds in turn ("Could not load library with AVX512 support due to: ModuleNotFoundError(...)": the
#: normal path on a CPU without those instructions, not a fault), an HTTP client's line per request (which names the
#: server's URL). Their warnings and errors are kept.
QUIET_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore2", "bm25s", "faiss")


#: Deprecation warnings of dependencies that a user of the command line can do nothing about (the library calls
#: its own deprecated API), hidden on the command line (Python callers keep their own filters):
#: (category, message regex).
KNOWN_WARNINGS = (
    (FutureWarning, r"`is_gradient_checkpointing` is deprecated"),  # transformers 5, called by TRL's trainer
    # TRL's notice on the two trainer hooks the search agents are built on (train/_rollout.py, train/_tools.py),
    # chosen knowingly and pinned by the trl-newest tier; TRL_EXPERIMENTAL_SILENCE=1 is its own switch for it
    (UserWarning, r"You are using '(rollout_func|environment_factory)', which is an experimental feature"),
)


LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class _LineEnds:
    """``sys.stderr`` when it is a file or a pipe, remembering whether what was written last ended its line: a
    progress bar (tqdm's ``\r`` updates, a bar cleared on close) leaves it open, and :class:`_OwnLine` then starts
    the next log line on a line of its own instead of gluing ``WARNING ...`` to the bar. Everything else is the
    stream's own."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.open_line = False

    def write(self, text: str) -> int:
        if text:
            self.open_line = not text.endswith("\n")
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _OwnLine(logging.Formatter):
    """The command line's log format, each record on a line of its own after an unfinished line on stderr."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        stream = sys.stderr
        if isinstance(stream, _LineEnds) and stream.open_line:
            stream.open_line = False  # the handler ends this record's line
            return "\n" + text
        return text


#: The variables that turn the libraries' progress bars off (huggingface_hub's, which transformers follows, and
#: datasets'), set when stderr is a file or a pipe (a variable already set is left as it is).
PIPED_QUIET_BARS = ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")


def configure_logging(*, verbose: bool = False, quiet: bool = False) -> None:
    """The command line's logging to stderr: the toolkit's INFO lines and up (:data:`OWN_LOGGERS`), the libraries'
    warnings and errors only, a filter on the handler deciding (``quiet``: warnings and errors only; ``verbose``:
    the toolkit's own debug messages too, not every library's). Every line passes the masking rule of
    :mod:`rag_plumbing._secrets` (credentials in URLs), whoever logs it."""
    for category, message in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    level = logging.WARNING if quiet else logging.INFO
    if not _isatty(sys.stderr):
        # a file or a pipe: the libraries' bars (Hub downloads, transformers' loading and saving, datasets' splits)
        # are redrawn lines there; the toolkit's own progress lines say it once
        for variable in PIPED_QUIET_BARS:
            os.environ.setdefault(variable, "1")
    if not _isatty(sys.stderr) and not isinstance(sys.stderr, _LineEnds):
        sys.stderr = _LineEnds(sys.stderr)  # a file or a pipe: a log line after a progress bar's \r starts anew
    before = list(logging.getLogger().handlers)
    logging.basicConfig(level=level, format=LOG_FORMAT)
    for handler in logging.getLogger().handlers:
        if handler not in before:  # the one basicConfig made, on stderr
            handler.setFormatter(_OwnLine(LOG_FORMAT))
    if quiet:
        logging.getLogger().setLevel(logging.WARNING)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    if verbose:
        for name in ("rag_curriculum", "rag_retriever"):  # the toolkit and its retriever
            logging.getLogger(name).setLevel(logging.DEBUG)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, MaskingFilter) for f in handler.filters):
            handler.addFilter(MaskingFilter())
        if _quiet_libraries not in handler.filters:  # also what a library logs after setting its own level
            handler.addFilter(_quiet_libraries)  # (bm25s sets DEBUG on import)


def _quiet_libraries(record: Any) -> bool:
    """Drop every library's INFO and DEBUG lines, whatever level it sets itself: below WARNING, only the toolkit's
    own (:data:`OWN_LOGGERS`) are shown."""
    return record.levelno >= logging.WARNING or record.name.split(".")[0] in OWN_LOGGERS


#: ``--print-config`` of every command that composes a configuration (Hydra's ``--cfg job``).
PrintConfig = Annotated[bool, typer.Option(
    "--print-config", help="Print the composed configuration (recipe, overrides and options, as the run would use "
    "them; secrets masked) as YAML and exit without running.", show_default=False)]


def show_config(cfg: Any) -> None:
    """``cfg`` (its ``to_dict()``, as saved with the outputs) as YAML on stdout, with every field of its dataclass,
    also one the saved config leaves out while it is unset; secrets masked by the one rule; nothing is run or
    written."""
    from omegaconf import OmegaConf

    shown = cfg.to_dict()
    if dataclasses.is_dataclass(cfg):
        whole = dataclasses.asdict(cfg)
        names = [f.name for f in dataclasses.fields(cfg)]
        shown = {**{k: shown[k] if k in shown else whole[k] for k in names}, **{k: v for k, v in shown.items()
                                                                                  if k not in names}}
    out.print(OmegaConf.to_yaml(mask_secrets(shown)), end="", markup=False, highlight=False)


def fail(message: str, hint: str | None = None, code: int = EXIT_ERROR) -> NoReturn:
    """Print an error (and what to do next) and exit with ``code``. Both are plain text: ``[...]`` in them (an
    install extra, a list) is printed as it is, never read as console markup; credentials in URLs are masked."""
    # credentials in a URL the user gave (--input, --index, --base-url) are masked, as in every file written
    console.print(f"[bold red]error:[/] {plain(mask_secrets(str(message)))}", soft_wrap=True)
    if hint:
        console.print(f"[yellow]hint:[/] {plain(mask_secrets(str(hint)))}", soft_wrap=True)
    sys.stdout.flush()
    raise typer.Exit(code)


def plain(text: str) -> str:
    """``text`` on one line, escaped for the console (a caller's own ``escape()`` is not doubled)."""
    return escape(re.sub(r"\\(\[)", r"\1", one_line(text)))


def one_line(text: str) -> str:
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def error_text(e: BaseException) -> str:
    """What went wrong, as one line: a KeyError's message without the quotes ``str()`` adds, an OSError as
    ``PATH: what the system said``."""
    if isinstance(e, KeyError) and len(e.args) == 1 and isinstance(e.args[0], str):
        text = e.args[0]
    elif isinstance(e, OSError) and e.strerror and (blocker := _file_in_the_way(e)) is not None:
        path = Path(e.filename)
        text = (f"{path} is a file, where a folder is needed" if blocker == path else
                f"cannot create {path}: {blocker} is a file, where a folder is needed")
    elif isinstance(e, OSError) and e.strerror:
        where = " -> ".join(str(p) for p in (e.filename, e.filename2) if p not in (None, ""))
        text = f"{where}: {e.strerror}" if where else e.strerror
    else:
        text = str(e)
    text = one_line(text)
    return text or type(e).__name__


def _file_in_the_way(e: OSError) -> Path | None:
    """For "File exists" / "Not a directory" on making a folder: the file that stands where a folder is needed
    (the path itself or one of its parents), or None."""
    if e.errno not in (_errno.EEXIST, _errno.ENOTDIR) or not e.filename or e.filename2:
        return None
    path = Path(e.filename)
    for p in (path, *path.parents):
        if p.exists() and not p.is_dir():
            return p
    return None


def _default_hint(e: BaseException) -> str | None:
    if isinstance(e, OSError) and _file_in_the_way(e) is not None:
        return "choose another --out (a folder, or a path where none exists yet), or move the file away"
    if isinstance(e, OSError):
        if e.errno == _errno.ENOSPC:
            return "free some space on that disk, or write --out elsewhere, and run the same command again"
        if e.errno in (_errno.EACCES, _errno.EPERM, _errno.EROFS):
            return "choose a folder you can write to (--out), or fix its permissions"
        if e.errno == _errno.ENOENT:
            return "check the path"
    if isinstance(e, ModuleNotFoundError) and e.name and not e.name.startswith("rag_curriculum"):
        extra = EXTRAS.get(e.name.split(".")[0])
        if extra:
            clone = "; from a clone of this repository: pip install -e ./retriever" if extra == "retrieval" else ""
            return f"install what the command needs: pip install 'rag-curriculum[{extra}]' (missing: {e.name}){clone}"
        return (f"install {e.name.split('.')[0]}, which the command imports; or, if you named {e.name} yourself "
                "(module:attribute), check the name and that it is importable from here")
    return None


#: The install extra of each optional library (pyproject.toml's optional-dependencies).
EXTRAS = {"torch": "train", "transformers": "train", "trl": "train", "accelerate": "train", "vllm": "vllm",
          "openai": "openai", "bm25s": "retrieval", "scipy": "retrieval", "ray": "ray", "fastapi": "serve",
          "uvicorn": "serve", "mkdocs": "docs", "rag_retriever": "retrieval"}


@contextmanager
def reported_errors(hint: Callable[[BaseException], str | None] | None = None,
                    code: int = EXIT_ERROR) -> Iterator[None]:
    """Turn the toolkit's errors (CurriculumError, and the ValueError / KeyError / OSError / ImportError /
    RuntimeError of bad input, a bad value or a failed write) into one line, a hint and exit status ``code``
    (:data:`EXIT_USAGE` for a usage error: :class:`~rag_curriculum.errors.UsageError`,
    :class:`~rag_curriculum.errors.UnknownNameError`): the one error handler of every command. The hint is the
    error's own (``CurriculumError.hint``, set where it was raised), else ``hint(e)``, a command's own, else a
    default for system errors."""
    try:
        yield
    except (typer.Exit, typer.Abort, click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
        raise  # already reported, or click's own usage error
    except (*OWN_ERRORS, ValueError, KeyError, OSError, ImportError, RuntimeError, OverflowError) as e:
        own = e.hint if isinstance(e, OWN_ERRORS) else None  # set where it was raised
        status = EXIT_USAGE if isinstance(e, USAGE_ERRORS) else code
        fail(error_text(e), own or (hint(e) if hint else None) or _default_hint(e), status)


#: What to do about a data file that cannot be read as a whole (no record of it can be skipped).
WHOLE_FILE_HINTS = {
    "invalid_parquet": "the Parquet file is damaged as a whole (footer or schema): re-download or re-export it",
    "truncated": "the file ends inside a record: it was cut short (an interrupted download or copy?); get the "
                 "whole file again (--on-error skip would read only the records before the cut)",
}
SKIP_HINT = "fix the record, or pass --on-error skip to skip bad records (they are counted and reported)"


def _first_record(record: str) -> bool:
    """Whether a :class:`DataError`'s record names the file's first record (line 1, row 0, record 0, index 0)."""
    import re

    m = re.match(r"(line|row|record|index|item) (\d+)", record)
    return bool(m) and int(m.group(2)) == (1 if m.group(1) == "line" else 0)


def data_error_hint(e: BaseException) -> str | None:
    """The hint of a :class:`DataError`: a bad record can be fixed or skipped (``--on-error skip``); a file that
    cannot be read as a whole (empty, not JSON, cut short, a damaged Parquet file) cannot be helped by skipping
    records, so the hint says what to check instead."""
    if not isinstance(e, DATA_ERRORS):
        return None
    if "truncated file?" in str(e):
        return WHOLE_FILE_HINTS["truncated"]
    if e.record is not None and e.kind == "missing_field" and _first_record(e.record):
        return (f"the first record has no {e.field!r}: if the file has no such column at all, skipping would skip "
                "every row; check that it is the file and --dataset you meant (fix the records, or pass --on-error "
                "skip only if a few lack it)")
    if e.record is not None:
        return SKIP_HINT
    return WHOLE_FILE_HINTS.get(e.kind, "the file as a whole cannot be read, so no record can be skipped: check "
                                "that it is the file you meant (--input)")


def option(cls: type, name: str, *param_decls: str, extra: str = "", default: str | None = None,
           **kwargs: Any) -> Any:
    r"""A typer option for the config field ``cls.name``: its help is the field's own (``metadata["help"]``, written
    once on the dataclass) plus ``extra`` (what only the command line adds), then ``[default: ...]``: ``default``,
    else the dataclass default (the option itself defaults to None, "not given", so a recipe's value is kept).

    >>> from rag_curriculum.curricula import BuildConfig
    >>> print(option(BuildConfig, "seed").help)
    Build seed: sampling, distractors, order. \[default: 0]
    """
    text = " ".join(t for t in (field_help(cls, name), extra) if t)
    if default is None:
        f = next(f for f in dataclasses.fields(cls) if f.name == name)
        value = f.default
        if value not in (dataclasses.MISSING, None) and not isinstance(value, bool):
            default = str(value)
    if default is not None:
        text += f" [default: {default}]"
    return typer.Option(*param_decls, help=escape(text), show_default=False, **kwargs)


def _unoptional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, _types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else str
    return tp


def option_type(tp: Any) -> Any:
    """The command-line type of a config field's annotation: ``X | None`` is X; a list is a repeatable option of its
    items (of strings when they are not int, float or str: ``--model NAME=PATH``); a mapping a repeatable
    ``KEY=VALUE`` option (list of strings); a type the command line cannot parse (``Any``, a union) a string."""
    tp = _unoptional(tp)
    origin = typing.get_origin(tp)
    if origin in (list, tuple, set, frozenset):
        item = (typing.get_args(tp) or (str,))[0]
        return list[item if item in (int, float, str) else str]
    if origin is dict:
        return list[str]
    return tp if tp in (int, float, str, bool, Path) else str


def _repeatable(tp: Any) -> bool:
    return typing.get_origin(_unoptional(tp)) in (list, tuple, set, frozenset, dict)


def config_options(cls: type, *, only: Iterable[str] | None = None, exclude: Iterable[str] = (),
                   short: Mapping[str, str] | None = None, extra: Mapping[str, str] | None = None,
                   defaults: Mapping[str, str] | None = None, types: Mapping[str, Any] | None = None,
                   panel: str | None = None, required: Iterable[str] = ()) -> list[inspect.Parameter]:
    r"""The command-line options of the config dataclass ``cls``, one per field, generated from the field (as TRL's
    ``HfArgumentParser`` builds the flags of its scripts from its config dataclasses): the flag is the field's
    ``flag`` metadata or ``--name-with-dashes`` (:func:`~rag_curriculum._settings.setting_flag`; a field with
    ``flag=""`` has none); the type comes from the annotation (:func:`option_type`; a bool is a
    ``--flag/--no-flag`` pair); the help is the field's own, plus
    ``Repeatable.`` for a list or mapping, ``extra[name]`` and ``[default: ...]`` (``defaults[name]``, else the
    dataclass default). Every option defaults to None, "not given", so a recipe's value is kept. Each parameter is
    named as its field: the command receives the values as keyword arguments by field name (:func:`with_options`).

    ``only`` / ``exclude`` choose fields, ``short`` gives a field its short alias (``{"n": "-n"}``), ``types`` a
    command-line type of its own (``{"out": Path}``); ``panel`` groups the options under a heading of ``--help``;
    ``required`` names fields whose option click itself requires (``Missing option '--index'``, exit 2), for a
    command that has no other source of the value (no recipe).

    >>> from rag_retriever import IndexConfig
    >>> [p.name for p in config_options(IndexConfig, only=("k1", "b"))]
    ['k1', 'b']
    >>> print(config_options(IndexConfig, only=("k1",))[0].annotation.__metadata__[0].help)
    BM25 k1 (term-frequency saturation); default: the preset's (bm25s 1.5, lucene 0.9).
    """
    short, extra, defaults, types, required = short or {}, extra or {}, defaults or {}, types or {}, set(required)
    hints = typing.get_type_hints(cls)
    chosen = None if only is None else list(only)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted((set(chosen or ()) | set(exclude) | set(short) | set(extra) | set(defaults) | set(types)
                      | required) - set(fields))
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {', '.join(unknown)}")
    params = []
    for name in chosen if chosen is not None else fields:
        f = fields[name]
        flag = setting_flag(f)
        if name in exclude or flag is None:
            continue
        tp = types.get(name, option_type(hints[name]))
        decls = [f"{flag}/--no-{flag[2:]}" if tp is bool else flag, *([short[name]] if name in short else [])]
        text = " ".join(t for t in ("Repeatable." if _repeatable(hints[name]) else "", extra.get(name, "")) if t)
        info = option(cls, name, *decls, extra=text, default=defaults.get(name), rich_help_panel=panel)
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                        default=inspect.Parameter.empty if name in required else None,
                                        annotation=Annotated[tp | None, info]))
    return params


F = TypeVar("F", bound=Callable[..., Any])


def aliases(panel: str | None = None, /, **options: Any) -> list[inspect.Parameter]:
    """Options declared once as ``Annotated`` aliases (the backend block), as parameters for :func:`with_options`,
    under the ``--help`` heading ``panel``."""
    params = []
    for name, tp in options.items():
        base, info = typing.get_args(tp)[:2]
        info = copy.copy(info)
        info.rich_help_panel = panel
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=False if base is bool else None,
                                        annotation=Annotated[base, info]))
    return params


def _leading(p: inspect.Parameter, tp: Any) -> bool:
    """A parameter that stays before the generated options: the context and the positional arguments."""
    if tp is typer.Context:
        return True
    return typing.get_origin(tp) is Annotated and any(isinstance(m, typer.models.ArgumentInfo)
                                                     for m in typing.get_args(tp)[1:])


def with_options(*blocks: Sequence[inspect.Parameter]) -> Callable[[F], F]:
    """Give a command the options of ``blocks`` (:func:`config_options`, :func:`aliases`) without writing them in
    its signature: the function declares its context, its arguments and its own options, then ``**options``, which
    receives the generated ones by name. typer reads the signature this sets (``__signature__``): the context and
    arguments, then the blocks' options in order, then the function's own options.

    >>> from dataclasses import dataclass
    >>> from rag_curriculum._settings import rule
    >>> @dataclass
    ... class Demo:
    ...     seed: int = rule(0, help="Seed.")
    >>> @with_options(config_options(Demo))
    ... def demo(**options): return options
    >>> list(inspect.signature(demo).parameters)
    ['seed']
    """
    def decorate(func: F) -> F:
        hints = typing.get_type_hints(func, include_extras=True)
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints.get(p.name, p.annotation))
               for p in inspect.signature(func).parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        generated = [p for block in blocks for p in block]
        names = [p.name for p in [*own, *generated]]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise TypeError(f"{func.__name__}: option(s) declared twice: {', '.join(twice)}")
        lead = [p for p in own if _leading(p, p.annotation)]
        params = [*lead, *generated, *(p for p in own if p not in lead)]
        func.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
        func.__annotations__ = {**{p.name: p.annotation for p in params}, "return": None}
        return func

    return decorate


def redacted(command: str) -> str:
    """The command line with secrets hidden (it is recorded in manifests and data cards): the one rule of
    :mod:`rag_plumbing._secrets` (``--api-key``, ``--backend-arg hf_token=...``, Hydra overrides, URL credentials)."""
    return redact_command(command)
