"""Output formats: a prompt template (from :mod:`rag_curriculum.prompts`) paired with the parser of its completions.

The builder renders prompts with ``get_format(name).template`` and rewards parse completions with
``get_format(name).parse``; adding a companion paper's format is one ``register_format`` call (and a template
registered under the same name), with no change to the builder, the rewards or the trainer.

A parser is called as ``parse(text, labels=None, *, max_chars=...)`` and returns an object with ``answer``,
``citations``, ``valid`` and ``reason`` (such as :class:`~rag_curriculum.rewards.ParsedCompletion`).

>>> fmt = get_format("rag-rl")
>>> fmt.template.name, fmt.parse("<reasoning></reasoning><answer>Final answer: 4\\nSupporting passages:</answer>").valid
('rag-rl', True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..prompts import PromptTemplate, get_template
from ..registry import Registry
from ._parser import parse_completion

__all__ = ["FORMATS", "OutputFormat", "get_format", "register_format"]


@dataclass(frozen=True)
class OutputFormat:
    """A named output format: the template that asks for it and the parser that reads it.

    ``template_name`` defaults to ``name``; the template is looked up when first used, so a format may be
    registered before its template.
    """

    name: str
    parse: Callable[..., Any]
    template_name: str | None = None

    @property
    def template(self) -> PromptTemplate:
        return get_template(self.template_name or self.name)


FORMATS: Registry[OutputFormat] = Registry("output format", check=OutputFormat)
FORMATS.register("rag-rl", OutputFormat("rag-rl", parse_completion))


def get_format(name: str) -> OutputFormat:
    """The output format registered under ``name`` (``"rag-rl"`` built in).

    Args:
        name: a format's name (``rag-rl``, ``craft-v1`` ... ``craft-v5``, or one registered).

    Returns:
        The format: its name, its parser (``parse``) and its template.

    Raises:
        UnknownNameError: no format of that name (with a "did you mean").

    Examples:
        >>> from rag_curriculum.rewards import get_format
        >>> fmt = get_format("rag-rl")
        >>> text = "<reasoning>\\nx\\n</reasoning>\\n<answer>\\nFinal answer: Rome\\nSupporting passages: Ada\\n</answer>"
        >>> fmt.parse(text, ["Ada", "Bob"]).citations
        ('Ada',)
    """
    return FORMATS.get(name)


def register_format(fmt: OutputFormat, *, overwrite: bool = False) -> None:
    """Register ``fmt`` under ``fmt.name``; a typo'd lookup later gets a "did you mean".

    Args:
        fmt: the format: its name, its parser (``parse(text, labels=None, *, max_chars=None)`` returning a
            :class:`ParsedCompletion`) and the name of the template that asks for it (default: its own name).
        overwrite: replace a format already registered under that name.

    Raises:
        ConfigError: the name is taken (without ``overwrite``), or ``fmt`` is not an :class:`OutputFormat`.
    """
    FORMATS.register(fmt.name, fmt, overwrite=overwrite)

