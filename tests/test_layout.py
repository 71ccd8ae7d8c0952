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


def _named(script: str, texts: dict[str, str]) -> list[str]:
    """The files whose text names ``bench/NAME.py`` (as a path, or as the module ``NAME`` a test or script imports)."""
    stem = script.removesuffix(".py")
    pattern = re.compile(rf"\b{re.escape(stem)}(?:\.py)?\b")
    return [f for f, text in texts.items() if pattern.search(text)]


def test_every_bench_script_backs_a_figure_on_a_page_or_a_test():
    """Each ``bench/`` script is named on a docs page (beside its figure) or by a test; a helper module (``_name``) is
    imported by such a script. A script nothing names measures nothing anyone reads: cite its figure or delete it."""
    bench = ROOT / "bench"
    scripts = sorted(p.name for p in bench.glob("*.py"))
    assert len(scripts) > 20 and "bench_mechanism.py" in scripts  # (the folder was found)
    cited = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8")
             for p in [*(ROOT / "docs").glob("*.md"), ROOT / "README.md", *(ROOT / "tests").rglob("*.py")]}
    code = {p.name: p.read_text(encoding="utf-8") for p in bench.glob("*.py")}
    unbacked = []
    for name in scripts:
        if name.startswith("_"):
            users = [f for f in _named(name, code) if f != name and not f.startswith("_")]
            if not users:
                unbacked.append(f"{name} (a helper no script imports)")
        elif not _named(name, cited):
            unbacked.append(name)
    assert not unbacked, ("bench scripts that no docs page or test names (cite the figure each measures on "
                          f"docs/benchmarks.md, beside its command, or delete it): {unbacked}")
