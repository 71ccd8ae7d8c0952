"""A backend that answers from a script instead of a model: exact, instant, for tests, demos and benchmarks.

The script maps a prompt to its completions, either as a mapping keyed by the prompt's *last message content*
(for the RAG-RL template, the user message with the passages and the question) or as a callable
``script(messages, n, seed) -> completions``. A value may be one string (repeated ``n`` times) or a sequence of at
least ``n`` strings (the first ``n`` are used).

On the command line (``--backend scripted --model SCRIPT``) the script is a JSON file holding that mapping, or a
dotted path ``package.module:attribute`` to a mapping or callable.

>>> b = ScriptedBackend(script={"2+2?": ["4", "5"]}, default="no idea")
>>> b.generate([[{"role": "user", "content": "2+2?"}], [{"role": "user", "content": "?"}]], SamplingConfig(n=2))
[['4', '5'], ['no idea', 'no idea']]
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError, CurriculumError, UsageError
from ._base import Messages, SamplingConfig, cut_at_stop, report_progress


class ScriptError(ConfigError):
    """A script that fails or returns what is not completions (the user's code, named in the message).
    ``retryable``: the script raised (as a model's engine may fail once): a Ray pool retries the chunk; a script
    that returns what is not completions is refused at once."""

    retryable = False


class _ScriptTypeError(ConfigError, TypeError):
    """A script that is neither a mapping nor a callable (a TypeError too, as it always was)."""


Script = Mapping[str, "str | Sequence[str]"] | Callable[[Messages, int, int], "str | Sequence[str]"]


def _load_script(model: str) -> Any:
    """The script ``--model`` names: a JSON file's mapping, or the object a dotted path ``module:attribute`` names.
    Every way it can be wrong is one :class:`ConfigError` naming the file or the path (a usage error,
    :class:`UsageError`, for a module or attribute that does not exist)."""
    p = Path(model)
    if p.suffix == ".json" and p.exists():
        try:
            script = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ConfigError(f"scripted backend: --model {p}: not valid JSON ({e.msg}: line {e.lineno} column "
                              f"{e.colno}; a truncated file?)", hint=_SCRIPT_HINT) from None
        except (UnicodeDecodeError, OSError) as e:
            raise ConfigError(f"scripted backend: --model {p}: cannot be read ({e})", hint=_SCRIPT_HINT) from None
        if not isinstance(script, Mapping):
            raise ConfigError(f"scripted backend: --model {p} holds a JSON {type(script).__name__}, not an object "
                              "of {prompt: completions}", hint=_SCRIPT_HINT)
        return script
    if ":" in model:
        return _import_script(model)
    what = "no such file" if p.suffix == ".json" else "not a JSON file nor module:attribute"
    raise UsageError(f"scripted backend: --model {model!r}: {what}; --model must be a JSON file of "
                     "{prompt: completions} or a dotted path 'module:attribute' to a mapping or callable")


_SCRIPT_HINT = ("the scripted backend's --model is a JSON file of {prompt: completions} or module:attribute, a "
                "mapping or a function (messages, n, seed) -> completions")


def _import_script(model: str) -> Any:
    import difflib
    import importlib

    mod, _, attr = model.partition(":")
    try:
        obj = importlib.import_module(mod)
    except ModuleNotFoundError as e:
        if e.name and (mod == e.name or mod.startswith(e.name + ".")):
            raise UsageError(f"scripted backend: --model {model}: no module named {e.name!r} here",
                             hint="the script's module must be importable from here: run from its folder or put "
                             "that on PYTHONPATH; or give a JSON file") from None
        raise ConfigError(f"scripted backend: --model {model}: importing {mod} failed: no module named {e.name!r}",
                          hint=f"install {e.name}, which {mod} imports") from None
    except Exception as e:  # the user's module failing as it is imported (a syntax error, an exception)
        raise ConfigError(f"scripted backend: --model {model}: importing {mod} failed: {type(e).__name__}: {e}"
                          ) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=1)
            owner = getattr(obj, "__name__", mod)
            raise UsageError(f"scripted backend: --model {model}: {owner} has no attribute {part!r}"
                             + (f"; did you mean {close[0]!r}?" if close else ""), hint=_SCRIPT_HINT)
        obj = getattr(obj, part)
    return obj


def _name(script: Any) -> str:
    """How to name a user's script in a message: ``module.function``."""
    qual = getattr(script, "__qualname__", None) or type(script).__name__
    module = getattr(script, "__module__", None)
    return f"{module}.{qual}" if module else qual


class ScriptedBackend:
    """Completions from ``script`` (a mapping or a callable; see the module docstring).

    ``default`` answers prompts the mapping lacks (else :class:`KeyError`); ``delay`` sleeps that many seconds per
    prompt (to imitate a model in tests and benchmarks). ``calls`` records how many prompts each call had.
    Picklable when the script is (a dict, or a module-level function).
    """

    name = "scripted"

    def __init__(self, model: str | None = None, *, script: Script | None = None,
                 default: str | Sequence[str] | None = None, delay: float = 0.0) -> None:
        if script is None and model is None:
            raise ConfigError("scripted backend: give script= (a mapping or callable) or model= (a JSON file or a "
                             "dotted path to one)")
        if script is None:
            script = _load_script(str(model))
        if not (callable(script) or isinstance(script, Mapping)):
            where = f" ({model})" if model is not None else ""
            raise _ScriptTypeError(f"scripted backend: the script{where} must be a mapping or a callable, got "
                                   f"{type(script).__name__}", hint=_SCRIPT_HINT)
        if delay < 0:
            raise ConfigError(f"delay must be >= 0 seconds, got {delay}")
        self.model = model if model is not None else "inline"
        self.script = script
        self.default = default
        self.delay = float(delay)
        self.calls: list[int] = []

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "model": str(self.model)}

    def _completions(self, messages: Messages, n: int, seed: int) -> list[str]:
        if callable(self.script):
            try:
                value = self.script(messages, n, seed)
            except CurriculumError:
                raise  # the toolkit's own (a script imitating a backend: PromptTooLongError, ...)
            except Exception as e:  # the user's code: named, with its own error, on one line
                err = ScriptError(f"scripted backend: the script {_name(self.script)} raised "
                                  f"{type(e).__name__}: {e}",
                                  hint="fix the script (run it on one prompt in Python to see the traceback)")
                err.retryable = True
                raise err from e
        else:
            key = messages[-1]["content"] if messages else ""
            if key in self.script:
                value = self.script[key]
            elif self.default is not None:
                value = self.default
            else:
                raise KeyError(f"scripted backend: no completions for the prompt ending {key[-80:]!r}; add it to "
                               "the script or give default=")
        if isinstance(value, str):
            return [value] * n
        who = _name(self.script) if callable(self.script) else str(self.model)
        if isinstance(value, (bytes, Mapping)) or not isinstance(value, Iterable):
            raise ScriptError(f"scripted backend: the script {who} returned a {type(value).__name__}; it must "
                              f"return a string or a list of n={n} strings", hint=_SCRIPT_HINT)
        value = list(value)
        bad = sorted({type(v).__name__ for v in value if not isinstance(v, str)})
        if bad:
            raise ScriptError(f"scripted backend: the script {who} returned non-strings ({', '.join(bad)}) where "
                              f"completions must be strings (n={n})", hint=_SCRIPT_HINT)
        if len(value) < n:
            raise ScriptError(f"scripted backend: the script {who} returned {len(value)} completion(s) where n={n} "
                              "are needed", hint=_SCRIPT_HINT)
        return value[:n]

    def generate(self, prompts: Sequence[Messages], sampling: SamplingConfig, *,
                 seeds: Sequence[int] | None = None, stop: Sequence[str] | None = None) -> list[list[str]]:
        """``stop``: each completion is cut after the first of these strings (kept), as a model's generation stops
        there. A prompt ending with an assistant message asks for its continuation: the script sees it last."""
        if seeds is not None and len(seeds) != len(prompts):
            raise ConfigError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        self.calls.append(len(prompts))
        out = []
        for i, messages in enumerate(prompts):
            if self.delay:
                time.sleep(self.delay)
            got = self._completions(list(messages), sampling.n, seeds[i] if seeds is not None else sampling.seed)
            out.append([cut_at_stop(c, stop) for c in got] if stop else got)
            report_progress(self, 1, len(got))
        return out

    def close(self) -> None:
        pass
