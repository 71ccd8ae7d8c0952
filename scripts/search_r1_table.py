"""Score the test trajectories (``tests/support/search_r1_trajectories.py``) with Search-R1's own reward and compare the
toolkit's ``search-r1`` with it.

    python scripts/search_r1_table.py --search-r1 PATH/TO/Search-R1            # compare, print the counts
    python scripts/search_r1_table.py --search-r1 PATH/TO/Search-R1 --write    # and freeze the table

``PATH/TO/Search-R1`` is a checkout of PeterGriffinJin/Search-R1 (the table was made at a14dc3a); its
``verl/utils/reward_score/qa_em.py`` is loaded by path (it imports only ``re``, ``string`` and ``random``) and its
``compute_score_em`` called on every trajectory's decoded prompt plus response, under Search-R1's settings
(``format_score`` 0) and with ``format_score`` 0.1. ``--write`` writes ``tests/rewards/search_r1_table.json``:
per trajectory its id, the digest of what was scored, and the original's scores, which the main tier's
``tests/rewards/test_search_r1_reward.py`` holds the toolkit to without Search-R1 installed. Exit 1 when the
toolkit and the original disagree anywhere.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.search_r1_trajectories import SETTINGS, TABLE, digest, trajectories  # noqa: E402

from rag_curriculum.methods.search_r1 import search_r1_score  # noqa: E402


def load_original(repo: Path):
    path = repo / "verl" / "utils" / "reward_score" / "qa_em.py"
    if not path.is_file():
        sys.exit(f"{path}: no such file (pass a checkout of PeterGriffinJin/Search-R1 as --search-r1)")
    spec = importlib.util.spec_from_file_location("search_r1_qa_em", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--search-r1", type=Path, required=True, help="a checkout of PeterGriffinJin/Search-R1")
    ap.add_argument("--write", action="store_true", help=f"write the frozen table ({TABLE.relative_to(ROOT)})")
    args = ap.parse_args(argv)
    qa_em = load_original(args.search_r1)
    rows, disagree = [], 0
    trajs = trajectories()
    for t in trajs:
        scores = []
        for s in SETTINGS:
            with contextlib.redirect_stdout(io.StringIO()):  # it prints one call in 64 at random
                theirs = qa_em.compute_score_em(t["sequence"], {"target": t["target"]}, **s)
            ours = search_r1_score(t["sequence"], t["target"], **s)
            if float(theirs) != ours:
                disagree += 1
                print(f"DISAGREE {t['id']} {s}: Search-R1 {theirs!r}, toolkit {ours!r}")
            scores.append(float(theirs))
        rows.append({"id": t["id"], "digest": digest(t), "behaviour": t["behaviour"], "template": t["template"],
                     "scores": scores})
    pairs = len(trajs) * len(SETTINGS)
    print(f"{len(trajs)} trajectories x {len(SETTINGS)} settings: the toolkit's search-r1 equals Search-R1's "
          f"compute_score_em on {pairs - disagree} of {pairs}")
    by = {}
    for r in rows:
        by.setdefault(r["behaviour"], []).append(r["scores"][0])
    print("mean score by behaviour (format_score 0): " + ", ".join(
        f"{k} {sum(v) / len(v):.2f} (n={len(v)})" for k, v in sorted(by.items())))
    if args.write:
        TABLE.write_text(json.dumps({"source": "PeterGriffinJin/Search-R1 verl/utils/reward_score/qa_em.py "
                                               "compute_score_em", "settings": list(SETTINGS), "trajectories": rows},
                                    indent=1) + "\n")
        print(f"wrote {TABLE.relative_to(ROOT)}")
    return 1 if disagree else 0


if __name__ == "__main__":
    raise SystemExit(main())
