"""Building a min-max curriculum over every record of a HotpotQA-train-sized input (90,447 records) against a
plain `json.load` of the same file, in the same run. Target: at most 2x.

    python bench/bench_build.py [--records 90447] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile

from _common import HOTPOT_TRAIN_RECORDS, big_hotpot_file, compare

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=HOTPOT_TRAIN_RECORDS)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    path = big_hotpot_file(args.records)
    out = tempfile.mkdtemp(prefix="rag-curriculum-bench-build-")
    baseline = f"import json\ndata = json.load(open({str(path)!r}, encoding='utf-8'))\nn = len(data)"
    ours = ("from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum\n"
            f"cfg = BuildConfig(sources=[SourceSpec('hotpotqa', {str(path)!r}, None)], schedule='min-max', "
            f"out={out + '/c'!r}, overwrite=True)\n"
            "res = build_curriculum(cfg, command='bench')\nassert res.rows > 0")
    load_before = os.getloadavg()[0]
    try:
        r = compare("json.load", baseline, "build", ours, repeats=args.repeats)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    b, o = r["json.load"], r["build"]
    print(f"input: {path} ({args.records:,} records, {path.stat().st_size / 1e6:,.0f} MB)")
    print(f"json.load            wall {b['wall']:6.2f} s   cpu {b['cpu']:6.2f} s   peak {b['peak_mb']:8,.0f} MB")
    print(f"build min-max (all)  wall {o['wall']:6.2f} s   cpu {o['cpu']:6.2f} s   peak {o['peak_mb']:8,.0f} MB   "
          f"({args.records / o['wall']:,.0f} rows/s)")
    print(f"machine: {os.cpu_count()} CPUs, load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after "
          "(the ratio is only comparable between quiet runs)")
    print(f"ratio: {o['wall'] / b['wall']:.2f}x json.load (target <= 2)")
