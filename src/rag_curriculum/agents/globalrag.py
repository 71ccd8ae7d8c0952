"""Deprecated: GlobalRAG's commands are ``curriculum globalrag plans`` and ``curriculum globalrag table``
(docs/globalrag.md). This module keeps the old spelling working for one release, saying where the command went::

    python -m rag_curriculum.agents.globalrag plans --dataset musique --input FILE --out plans/musique-train.jsonl
    python -m rag_curriculum.agents.globalrag table OUT      # an agent evaluation's summary.json, Table 1's layout

``plans`` writes the gold plan graphs of a dataset file (:func:`~rag_curriculum.methods.globalrag.gold_plans`) and
prints the counts; ``table`` prints :func:`~rag_curriculum.methods.globalrag.render_table1`. Usage errors exit 2
(argparse's), bad input exits 1 with one line naming the file and what to do, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import warnings
from collections.abc import Sequence

from ..errors import CurriculumError
from ..loaders import load_examples

__all__ = ["main"]


def _run(a: argparse.Namespace) -> None:
    # GlobalRAG lives in rag_curriculum.methods.globalrag, a floor above this package: this deprecated spelling
    # reaches it by name when it runs, so the agents package imports nothing of a method
    globalrag = importlib.import_module("rag_curriculum.methods.globalrag")
    gold_plans, read_agent_summary = globalrag.gold_plans, globalrag.read_agent_summary
    render_table1, write_plans = globalrag.render_table1, globalrag.write_plans
    if a.cmd == "plans":
        recs, counts = gold_plans(load_examples(a.dataset, a.input), musique_arrows=a.musique_arrows)
        write_plans(a.out, recs)
        sys.stdout.write(f"{a.out}: {json.dumps(counts)}\n")
        return
    summary = read_agent_summary(a.summary)
    sys.stdout.write(render_table1(summary, paper_rows=not a.no_paper_rows))


#: What the old spelling says before it runs.
MOVED = ("`python -m rag_curriculum.agents.globalrag` goes in the next release: run `curriculum globalrag plans` "
         "or `curriculum globalrag table`")


def main(argv: Sequence[str] | None = None) -> int:
    warnings.warn(MOVED, DeprecationWarning, stacklevel=2)
    sys.stderr.write(f"warning: {MOVED}\n")
    ap = argparse.ArgumentParser(prog="python -m rag_curriculum.agents.globalrag",
                                 description="GlobalRAG: gold plan graphs and Table 1 (docs/globalrag.md)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plans", help="gold plan graphs from a dataset's own annotations (no teacher)")
    p.add_argument("--dataset", required=True, choices=["hotpotqa", "musique", "2wikimultihopqa"])
    p.add_argument("--input", required=True, help="the dataset file (any layout the loaders read)")
    p.add_argument("--out", required=True, help="the plan file to write (JSONL, atomically)")
    p.add_argument("--musique-arrows", default="rewrite", choices=["rewrite", "keep"],
                   help="MuSiQue's 'subject >> relation' steps: rewritten as questions (default) or kept")
    t = sub.add_parser("table", help="Table 1's layout from an agent evaluation (its --out folder or summary.json)")
    t.add_argument("summary")
    t.add_argument("--no-paper-rows", action="store_true", help="leave out the paper's GlobalRAG rows")
    a = ap.parse_args(argv)
    try:
        _run(a)
    except (CurriculumError, ValueError, KeyError, OSError) as e:
        hint = getattr(e, "hint", None)
        sys.stderr.write(f"error: {e}\n" + (f"hint: {hint}\n" if hint else ""))
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
