"""mkdocs hook (mkdocs.yml ``hooks:``): the reference tables of every command's settings, generated from the config
dataclasses when the site is built, so a new field is documented without being written again.

A page writes ``<!-- settings rag_curriculum.partition:PartitionConfig -->`` (add `` keys`` after the class for a
config set by key=value overrides only, without flags) and gets the table of
:func:`rag_curriculum._settings.settings_table` in its place; ``<!-- retriever kinds -->`` gets the table of the
registered retriever kinds (:func:`rag_retriever.kinds_table`), drawn from the registry.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from rag_curriculum._settings import settings_table
from rag_retriever import kinds_table

MARKER = re.compile(r"<!-- settings ([\w.]+):(\w+)( keys)? -->")
KINDS_MARKER = "<!-- retriever kinds -->"


def render(markdown: str) -> str:
    """``markdown`` with every settings marker replaced by its table."""
    def table(m: re.Match[str]) -> str:
        cls = getattr(importlib.import_module(m.group(1)), m.group(2))
        return settings_table(cls, flags=not m.group(3))

    if KINDS_MARKER in markdown:
        markdown = markdown.replace(KINDS_MARKER, kinds_table())
    return MARKER.sub(table, markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return render(markdown)
