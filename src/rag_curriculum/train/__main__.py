"""``python -m rag_curriculum.train recipe=NAME [overrides...]``: the entry point for launchers that start one
process per GPU (``accelerate launch -m rag_curriculum.train ...``, ``torchrun -m``); same arguments, options and
exit codes as ``curriculum train``, whose command it runs alone.

The command lives in the CLI, a layer above this package (docs/development.md, "Layers"), so it is reached
through the installed ``curriculum`` console entry point (``rag_curriculum.cli:main``, called with ``"train"``)
rather than imported from here.
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points


def main() -> None:
    found = [ep for ep in entry_points(group="console_scripts", name="curriculum")
             if ep.value.startswith("rag_curriculum.")]
    if not found:
        sys.stderr.write("error: no `curriculum` console entry point: rag-curriculum is not installed in this "
                         f"environment ({sys.executable})\nhint: pip install -e . (or pip install rag-curriculum)\n")
        sys.exit(1)
    found[0].load()("train")


if __name__ == "__main__":
    main()
