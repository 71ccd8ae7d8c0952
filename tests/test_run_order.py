"""The order the suite runs in: the longest files first (tests/conftest.py's ``LONGEST_FIRST``), kept under
pytest-xdist, so two processes finish together instead of one idling while the other runs a walkthrough begun last."""

from __future__ import annotations

import subprocess
import sys

from conftest import LONGEST_FIRST, ROOT


def test_every_file_named_longest_first_exists():
    missing = [name for name in LONGEST_FIRST if not (ROOT / "tests" / name).is_file()]
    assert not missing, f"tests/conftest.py's LONGEST_FIRST names files that are gone: {missing}"


def test_xdist_keeps_the_collection_order(request):
    if request.config.pluginmanager.hasplugin("xdist"):
        assert request.config.option.loadscopereorder is False


def test_the_longest_files_are_collected_first():
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                        "tests/test_layout.py", "tests/test_models.py", "tests/test_readme.py"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    files = [line.split("::")[0] for line in r.stdout.splitlines() if "::" in line]
    assert files, r.stdout + r.stderr
    order = list(dict.fromkeys(files))
    assert order == ["tests/test_readme.py", "tests/test_models.py", "tests/test_layout.py"], order
