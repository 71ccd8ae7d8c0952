"""mkdocs hook (mkdocs.yml ``hooks:``): the reference tables of every command's settings, generated from the config
dataclasses when the site is built, so a new field is documented without being written again.

A page writes ``<!-- settings rag_curriculum.partition:PartitionConfig -->`` (add `` keys`` after the class for a
config set by key=value overrides only, without flags) and gets the table of
:func:`rag_curriculum._settings.settings_table` in its place.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from rag_curriculum._settings import settings_table

MARKER = re.compile(r"<!-- settings ([\w.]+):(\w+)( keys)? -->")


def render(markdown: str) -> str:
    """``markdown`` with every settings marker replaced by its table."""
    def table(m: re.Match[str]) -> str:
        cls = getattr(importlib.import_module(m.group(1)), m.group(2))
        return settings_table(cls, flags=not m.group(3))

    return MARKER.sub(table, markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return render(markdown)
