"""Retrieval throughput on a corpus the size of BEIR-HotpotQA's (5,233,329 passages), against the published
single-core figure of Search-R1's BM25 server backend (pyserini: about 10 queries/s on BEIR-HotpotQA).

1. The input: the HotpotQA-train-sized file of bench/bench_index.py (90,447 questions, the shared sample's words
   perturbed per replica group), made once under the temp folder.
2. The corpus: that input's distinct paragraphs, each group of them perturbed again with a group number of its
   own (a word gets the suffix when ``crc32(word) + group`` is divisible by 3, as bench_index.py does), until
   ``--passages`` passages (default 5,233,329): JSONL of ``{"title", "text"}``, made once (about 3.5 GB).
3. The index: ``curriculum index --dataset hotpotqa --input <the shared sample> --corpus <the corpus>`` in a child
   process (wall time and peak RSS reported; reused when it already exists).
4. ``bench/bench_serve.py --index <it> --queries <the input>`` on it: in process with 4 callers, 1 caller, 1 caller on
   one thread (the single-core figure), and ``curriculum serve`` with 4 clients, answers checked against the
   in-process rankings; start-up time and memory.

    python bench/bench_serve_wiki.py [--passages 5233329] [--repeats 1] [--seconds 8] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import HOTPOT_SAMPLE, HOTPOT_TRAIN_RECORDS, ROOT, run_child
from bench_index import _perturb, synth_file

BEIR_HOTPOTQA_PASSAGES = 5_233_329


def _available() -> int:
    """MemAvailable of the machine, in kB (Linux)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    return 0


def corpus_file(source: Path, passages: int) -> Path:
    """``passages`` passages: the distinct paragraphs of ``source``, group after group, each group's words perturbed
    with its own number (1000 + group, beyond the input's groups), JSONL of title and text; made once."""
    path = Path(tempfile.gettempdir()) / f"rag-curriculum-bench-wiki-{passages}.jsonl"
    if path.exists():
        return path
    seen: set[tuple[str, str]] = set()
    paragraphs: list[tuple[str, str]] = []
    for rec in json.loads(source.read_text(encoding="utf-8")):
        for title, sents in rec["context"]:
            key = (title, "".join(sents))
            if key not in seen:
                seen.add(key)
                paragraphs.append(key)
    del seen
    memo: dict[str, int] = {}
    tmp = path.with_suffix(".tmp")
    t0, n, group = time.perf_counter(), 0, 0
    with open(tmp, "w", encoding="utf-8") as f:
        while n < passages:
            g = 1000 + group
            for title, text in paragraphs:
                if n == passages:
                    break
                f.write(json.dumps({"title": _perturb(title, g, memo), "text": _perturb(text, g, memo)},
                                   ensure_ascii=False) + "\n")
                n += 1
            group += 1
            print(f"corpus: {n:,} passages ({group} groups of {len(paragraphs):,}), {time.perf_counter() - t0:.0f} s",
                  flush=True)
    os.replace(tmp, path)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passages", type=int, default=BEIR_HOTPOTQA_PASSAGES)
    ap.add_argument("--questions", type=int, default=HOTPOT_TRAIN_RECORDS, help="size of the input the corpus comes from")
    ap.add_argument("--index", type=Path, help="the index folder (default: under the temp folder, reused)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--keep", action="store_true", help="keep the index (a later run reuses it)")
    args = ap.parse_args()

    source = synth_file(args.questions)
    corpus = corpus_file(source, args.passages)
    index = args.index or Path(tempfile.gettempdir()) / f"rag-curriculum-bench-wiki-index-{args.passages}"
    try:
        if not (index / "manifest.json").exists():
            used = [0]
            done = threading.Event()

            def watch() -> None:  # the machine's memory in use (all processes; page cache not counted)
                base = _available()
                while not done.wait(0.5):
                    used[0] = max(used[0], base - _available())

            th = threading.Thread(target=watch, daemon=True)
            th.start()
            body = (f"from rag_retriever import IndexConfig, build_index\n"
                    f"m = build_index(IndexConfig(dataset='hotpotqa', input={str(HOTPOT_SAMPLE)!r}, "
                    f"corpus={str(corpus)!r}, out={str(index)!r}, depth=10, overwrite=True))\n"
                    f"print(json.dumps(m['seconds']))")
            out = run_child(body)
            done.set()
            th.join()
            print(f"index built in {out['wall']:,.0f} s (CPU {out['cpu']:,.0f} s), peak RSS of the building process "
                  f"{out['peak_mb']:,.0f} MB; the machine's memory in use rose by at most {used[0] / 1024:,.0f} MB "
                  f"(the forked passage-side worker included)")
        m = json.loads((index / "manifest.json").read_text())
        print(f"index: {m['passages']:,} passages, vocabulary {m['vocab_size']:,}")
        subprocess.run([sys.executable, str(ROOT / "bench" / "bench_serve.py"), "--index", str(index),
                        "--queries", str(source), "--repeats", str(args.repeats), "--seconds", str(args.seconds),
                        "--single-core"], check=True)
        print("published: pyserini (Search-R1's BM25 backend) about 10 queries/s on one core, BEIR-HotpotQA "
              f"({BEIR_HOTPOTQA_PASSAGES:,} passages)")
    finally:
        if not args.keep and not args.index:
            shutil.rmtree(index, ignore_errors=True)


if __name__ == "__main__":
    main()
