"""Write tests/file_seconds.json, each test file's seconds, from the JUnit XML of whole runs:

    bash scripts/test.sh --junitxml=main.xml      # the main tier's XML
    python scripts/test_durations.py main.xml [more.xml ...]

tests/conftest.py hands pytest-xdist's workers the longest files first, so no long file starts last and runs alone
on one core while the other idles. Only the order of the files depends on these figures: stale ones cost minutes,
never a result. Files under a second are left out (they count as 0 s). Add the engine tiers' XML
(``.venv-vllm/bin/python -m pytest tests/tier_vllm --junitxml=vllm.xml``) to order theirs too."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "file_seconds.json"


def file_of(classname: str) -> str | None:
    """``tests.cli.test_x.TestY`` -> ``tests/cli/test_x.py`` (the longest prefix that is a file of the checkout)."""
    parts = [part for part in classname.split(".") if part]
    for end in range(len(parts), 0, -1):
        path = Path(*parts[:end]).with_suffix(".py")
        if (ROOT / path).is_file():
            return path.as_posix()
    return None


def file_seconds(xml_paths: list[str]) -> dict[str, float]:
    seconds: Counter[str] = Counter()
    for xml in xml_paths:
        for case in ET.parse(xml).getroot().iter("testcase"):
            path = file_of(case.get("classname") or "")
            if path is not None:
                seconds[path] += float(case.get("time") or 0)
    return {path: round(s) for path, s in seconds.most_common() if s >= 1}


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    seconds = file_seconds(argv)
    text = json.dumps({"about": "each test file's seconds in a whole run on 2 cores (scripts/test_durations.py)",
                       "seconds": seconds}, indent=1)
    OUT.write_text(text + "\n", encoding="utf-8")
    print(f"{OUT.relative_to(ROOT)}: {len(seconds)} files, {sum(seconds.values())} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
