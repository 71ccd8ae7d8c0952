"""Loading a HotpotQA-train-sized file (90,447 records, official layout) with `load_examples` against a plain
`json.load` of the same file, in the same run. Targets: wall time ratio <= 1.3, peak memory <= 1.2x.

    python bench/bench_load.py [--records 90447] [--repeats 3]
"""

from __future__ import annotations

import argparse

from _common import HOTPOT_TRAIN_RECORDS, big_hotpot_file, compare

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=HOTPOT_TRAIN_RECORDS)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    path = big_hotpot_file(args.records)
    size = path.stat().st_size / 1e6
    baseline = f"import json\ndata = json.load(open({str(path)!r}, encoding='utf-8'))\nn = len(data)"
    ours = ("from rag_curriculum import load_examples\n"
            f"n = sum(1 for _ in load_examples('hotpotqa', {str(path)!r}))")
    r = compare("json.load", baseline, "load_examples", ours, repeats=args.repeats)
    b, o = r["json.load"], r["load_examples"]
    print(f"input: {path} ({args.records:,} records, {size:,.0f} MB)")
    print(f"json.load      wall {b['wall']:6.2f} s   peak {b['peak_mb']:8,.0f} MB")
    print(f"load_examples  wall {o['wall']:6.2f} s   peak {o['peak_mb']:8,.0f} MB   "
          f"({args.records / o['wall']:,.0f} records/s)")
    print(f"ratio: wall {o['wall'] / b['wall']:.2f}x (target <= 1.3), peak memory {o['peak_mb'] / b['peak_mb']:.2f}x "
          "(target <= 1.2)")
