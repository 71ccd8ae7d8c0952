"""The layout in docs/development.md is drawn from the code: every package and top-level module of
``src/rag_curriculum`` has its line there, and the page names none that is gone. And no folder of ``tests/`` (which
is on ``sys.path``) is named after a package the toolkit imports: ``tests/verl`` would shadow verl itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_layers import HEAVY, module_graph

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "rag_curriculum"
DOC = ROOT / "docs" / "development.md"


def documented_layout(text: str | None = None) -> set[str]:
    """The entries under ``src/rag_curriculum/`` in the block between the ``<!-- layout -->`` markers: ``name/`` for
    a package, ``name.py`` for a module."""
    text = DOC.read_text(encoding="utf-8") if text is None else text
    block = re.search(r"<!-- layout -->(.*?)<!-- /layout -->", text, re.S)
    assert block, f"{DOC}: no <!-- layout --> ... <!-- /layout --> block"
    lines = block.group(1).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("src/rag_curriculum/"))
    entries = set()
    for line in lines[start + 1:]:
        if line and not line.startswith(" "):
            break  # the next top-level folder
        m = re.match(r"  (\S+(?:/|\.py))\s", line + " ")
        if m:
            entries.add(m.group(1))
    return entries


def code_layout() -> set[str]:
    packages = {f"{p.name}/" for p in PKG.iterdir() if (p / "__init__.py").is_file()}
    modules = {p.name for p in PKG.glob("*.py")}
    return packages | modules


def test_every_package_and_module_has_its_line_in_the_documented_layout():
    documented, code = documented_layout(), code_layout()
    assert len(code) >= 25 and {"verl/", "train/", "shards.py", "__init__.py"} <= code  # the scan found the package
    missing = sorted(code - documented)
    assert not missing, f"add {missing} to the layout in docs/development.md (section Layout)"
    stale = sorted(documented - code)
    assert not stale, f"docs/development.md's layout names {stale}, which src/rag_curriculum no longer has"


def test_the_layout_reader_reads_only_the_packages_lines():
    text = ("<!-- layout -->\n```text\nsrc/rag_curriculum/\n  a/           what a is\n                 more about a\n"
            "  b.py         what b is\nrecipes/         not a module\n```\n<!-- /layout -->")
    assert documented_layout(text) == {"a/", "b.py"}


@pytest.mark.slow
def test_no_test_folder_shadows_a_package_the_toolkit_imports():
    _, third, _ = module_graph()
    imported = set().union(*third.values()) | HEAVY
    assert {"verl", "pyarrow", "trl"} <= imported  # the toolkit's own imports were read
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    assert "train" in folders and "verl_wing" in folders
    shadowing = sorted(folders & imported)
    assert not shadowing, (f"tests/{shadowing} would shadow the package of that name (tests/ is on sys.path); "
                           "name the folder otherwise (tests/verl_wing holds verl/'s tests)")
