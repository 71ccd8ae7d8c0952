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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .base import Messages, SamplingConfig

Script = Mapping[str, "str | Sequence[str]"] | Callable[[Messages, int, int], "str | Sequence[str]"]


def _load_script(model: str) -> Any:
    p = Path(model)
    if p.suffix == ".json" and p.exists():
        return json.loads(p.read_text(encoding="utf-8"))
    if ":" in model:
        from ..registry import import_dotted

        return import_dotted(model)
    raise ConfigError(f"scripted backend: --model must be a JSON file of {{prompt: completions}} or a dotted path "
                     f"'module:attribute' to a mapping or callable, got {model!r}")


def _cut(text: str, stop: Sequence[str]) -> str:
    ends = [i + len(s) for s in stop if s and (i := text.find(s)) >= 0]
    return text[:min(ends)] if ends else text


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
            raise TypeError(f"scripted backend: the script must be a mapping or a callable, got "
                            f"{type(script).__name__}")
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
            value = self.script(messages, n, seed)
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
        value = list(value)
        if len(value) < n or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"scripted backend: the script gave {len(value)} completion(s) where n={n} strings "
                             "are needed")
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
            out.append([_cut(c, stop) for c in got] if stop else got)
        return out

    def close(self) -> None:
        pass
