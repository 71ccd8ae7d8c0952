"""Griffe extension (mkdocs.yml, the mkdocstrings handler's ``extensions``): the docstrings as docs/api.md shows them.

The docstrings are written for ``help()`` and for pytest's ``--doctest-modules`` as well as for the site, so two
habits of theirs are turned into Markdown here, when the site is built, instead of being written twice:

* a doctest in the prose (a ``>>>`` line at the docstring's own indentation, up to the next blank line) becomes a
  ``pycon`` code block (Markdown would read ``>>>`` as nested quotes); doctests inside an ``Examples:`` section are
  indented and left to the Google-style parser, which already shows them as code;
* a Sphinx role (:class:`~rag_curriculum.records.Example`, :func:`build_curriculum`) becomes inline code of the
  name it shows (``Example``, ``build_curriculum``), and a reStructuredText ``::`` before an indented block one
  colon (the block is a Markdown code block already);
* a config field declared with ``rule(..., help="...")`` (:func:`rag_curriculum._settings.rule`, the text the
  command line's ``--help`` shows) gets that help as its docstring, and its default as its value.

>>> markdown(">>> 1 + 1\\n2\\n\\nProse :func:`~a.b.c` and :mod:`a.b`, a block::")
'```pycon\\n>>> 1 + 1\\n2\\n```\\n\\nProse `c` and `a.b`, a block:'
"""

from __future__ import annotations

import ast
import re
from typing import Any

try:
    from griffe import Docstring, Extension
except ImportError:  # the doctests of this file run without griffe
    Extension = object  # type: ignore[assignment,misc]

ROLE = re.compile(r":(?:class|func|mod|meth|attr|data|exc|obj):`(~?)([^`]+)`")


def _role(m: re.Match[str]) -> str:
    name = m.group(2)
    return f"`{name.rsplit('.', 1)[-1] if m.group(1) else name}`"


def markdown(text: str) -> str:
    """``text`` (a docstring, dedented) with its prose doctests fenced and its Sphinx roles as inline code."""
    out: list[str] = []
    fence = False
    for line in text.splitlines():
        if not fence and line.startswith(">>>"):
            out.append("```pycon")
            fence = True
        elif fence and not line.strip():
            out.append("```")
            fence = False
        if not fence and line.rstrip().endswith("::"):
            line = "" if line.strip() == "::" else line.rstrip()[:-1]
        out.append(line if fence else ROLE.sub(_role, line))
    if fence:
        out.append("```")
    return "\n".join(out)


def rule_field(node: Any) -> tuple[str | None, str | None] | None:
    """(help, default) of a field assigned ``rule(...)`` (the default as source, None when the field has none), or
    None for any other attribute.

    >>> rule_field(ast.parse('seed: int = rule(0, ge=0, help="Sampling " "seed.")').body[0])
    ('Sampling seed.', '0')
    >>> rule_field(ast.parse('xs: list = rule(default_factory=list)').body[0])
    (None, 'list()')
    """
    call = getattr(node, "value", None)
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "rule"):
        return None
    kws = {kw.arg: kw.value for kw in call.keywords}
    help_ = kws.get("help")
    text = help_.value if isinstance(help_, ast.Constant) and isinstance(help_.value, str) else None
    if call.args:
        return text, ast.unparse(call.args[0])
    return text, f"{ast.unparse(kws['default_factory'])}()" if "default_factory" in kws else None


class DocstringMarkdown(Extension):  # type: ignore[misc,valid-type]
    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)

    def on_attribute_instance(self, *, node: Any, attr: Any, **kwargs: Any) -> None:
        field = rule_field(node)
        if field is None:
            return
        text, attr.value = field
        if text and attr.docstring is None:
            attr.docstring = Docstring(markdown(text), parent=attr)
