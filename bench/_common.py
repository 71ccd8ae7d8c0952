"""Shared bench helpers: the HotpotQA-train-sized input, and timing / peak memory of a child process."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
HOTPOT_SAMPLE = SHARED / "hotpotqa" / "hotpot_train_v1.1.sample100.json"
HOTPOT_TRAIN_RECORDS = 90_447  # the official hotpot_train_v1.1.json


def big_hotpot_file(records: int = HOTPOT_TRAIN_RECORDS, path: Path | None = None) -> Path:
    """The real HotpotQA samples repeated with fresh ids to a train-sized official-layout JSON list."""
    path = path or Path(tempfile.gettempdir()) / f"rag-curriculum-bench-hotpot-{records}.json"
    if path.exists():
        return path
    sample = json.loads(HOTPOT_SAMPLE.read_text(encoding="utf-8"))
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("[")
        for i in range(records):
            rec = dict(sample[i % len(sample)])
            rec["_id"] = f"{rec['_id']}-{i:06d}"
            rec["question"] = f"{rec['question']} ({i})"
            if i:
                f.write(", ")
            json.dump(rec, f, ensure_ascii=False)
        f.write("]")
    os.replace(tmp, path)
    return path


CHILD = r"""
import resource, sys, time, json
t = time.perf_counter()
{body}
wall = time.perf_counter() - t
print(json.dumps({{"wall": wall, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def run_child(body: str, env: dict | None = None) -> dict:
    code = CHILD.format(body=body)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, **(env or {})})
    return json.loads(res.stdout.strip().splitlines()[-1])


def compare(name_a: str, body_a: str, name_b: str, body_b: str, repeats: int = 3) -> dict:
    """Alternate the two bodies ``repeats`` times in fresh processes; median wall time and peak RSS of each."""
    a, b = [], []
    for _ in range(repeats):
        a.append(run_child(body_a))
        b.append(run_child(body_b))
    med = {
        name_a: {"wall": statistics.median(x["wall"] for x in a), "peak_mb": statistics.median(x["peak_mb"] for x in a)},
        name_b: {"wall": statistics.median(x["wall"] for x in b), "peak_mb": statistics.median(x["peak_mb"] for x in b)},
    }
    return med
