"""The Python API page (docs/api.md) is drawn from the docstrings by mkdocstrings: it has a ``:::`` directive for the
package and for every public module that declares its public names (``__all__``), and nothing else but its title
(prose belongs in the docstrings, and the page stays out of the site's word count). The griffe extension that
adapts the docstrings (docs/griffe_docstrings.py) is checked by its doctests."""

from __future__ import annotations

import doctest
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "rag_curriculum"
PAGE = ROOT / "docs" / "api.md"


def modules_with_all() -> set[str]:
    found = set()
    for path in [*PKG.glob("[!_]*.py"), *PKG.glob("*/__init__.py")]:
        name = path.parent.name if path.name == "__init__.py" else path.stem
        if not name.startswith("_") and re.search(r"^__all__\b", path.read_text(encoding="utf-8"), re.M):
            found.add(f"rag_curriculum.{name}")
    return found


def test_every_public_module_with_all_has_its_directive():
    text = PAGE.read_text(encoding="utf-8")
    directives = re.findall(r"^::: (\S+)$", text, re.M)
    wanted = modules_with_all() | {"rag_curriculum"}
    assert {"rag_curriculum.train", "rag_curriculum.shards", "rag_curriculum.models"} <= wanted  # the scan worked
    missing = sorted(wanted - set(directives))
    assert not missing, f"add '::: NAME' to docs/api.md for {missing}"
    assert len(directives) == len(set(directives)), "a module is documented twice"


def test_the_page_is_its_title_and_directives_only():
    lines = [line for line in PAGE.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert lines[0] == "# Python API"
    prose = [line for line in lines[1:] if not line.startswith("::: ")]
    assert not prose, f"docs/api.md holds prose (write it in the docstrings): {prose}"


def test_the_docstring_extension():
    spec = importlib.util.spec_from_file_location("griffe_docstrings", ROOT / "docs" / "griffe_docstrings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = doctest.testmod(module)
    assert result.attempted >= 3 and not result.failed
