"""The documentation shows public imports only: no code block of docs/*.md or the README imports one of the
toolkit's private modules (``rag_curriculum.<...>._name``), so what a reader copies keeps working when the private
modules move."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
PRIVATE = re.compile(r"rag_curriculum(?:\.\w+)*\._[a-z]\w*")


def private_paths(text: str) -> list[tuple[int, str]]:
    """(line, path) of every private module path inside a fenced code block of a Markdown page."""
    found, fence = [], None
    for i, line in enumerate(text.splitlines(), 1):
        m = re.match(r"\s*(`{3,}|~{3,})", line)
        if m and (fence is None or m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence)):
            fence = m.group(1) if fence is None else None
            continue
        if fence is not None:
            found += [(i, p) for p in PRIVATE.findall(line)]
    return found


def test_no_page_shows_an_import_of_a_private_module():
    assert len(PAGES) >= 20  # the pages were found
    offenders = {page.name: private_paths(page.read_text(encoding="utf-8")) for page in PAGES}
    offenders = {k: v for k, v in offenders.items() if v}
    assert not offenders, f"code blocks import private modules (export the name from its package): {offenders}"


def test_the_scan_finds_a_private_import_in_a_code_block_only():
    text = ("`rag_curriculum.rewards._judge` in prose is not a code block\n```python\nfrom rag_curriculum.loaders "
            "import DATASETS\nfrom rag_curriculum.loaders._base import DatasetLoader\n```\n"
            "```bash\npython -m rag_curriculum.verl reward-path\npython -m rag_curriculum.agents._teacher\n```\n")
    assert private_paths(text) == [(4, "rag_curriculum.loaders._base"), (8, "rag_curriculum.agents._teacher")]
