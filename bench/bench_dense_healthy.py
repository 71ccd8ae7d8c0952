"""Start-up to healthy of ``curriculum serve`` on a dense index of any size (an index `bench_dense_scale.py` made, or
your own): the encoder's ONNX export (onnxruntime, what the index serves) against loading the encoder with
sentence-transformers (the load path it replaced, asked for by ``RAG_CURRICULUM_ENCODER_RUNTIME``), alternated,
``--rounds`` start-ups each; wall seconds and the server's CPU seconds when ``/health`` first answered, medians,
and the ratio.

    python bench/bench_dense_healthy.py --index S/index [--rounds 5] [--port 8794]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from _common import runtime_startups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--port", type=int, default=8794)
    args = ap.parse_args()
    m = json.loads((args.index / "manifest.json").read_text())
    if "onnx" not in m.get("dense", {}):
        sys.exit(f"{args.index}: no ONNX export of its encoder in the manifest (an index made before it)")
    serve = [sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(args.index), "--port",
             str(args.port)]
    print(f"curriculum serve of {args.index} ({m['passages']:,} passages, FAISS {m['dense']['faiss']}) healthy "
          f"after {runtime_startups(serve, args.port, args.rounds)}", flush=True)

if __name__ == "__main__":
    main()
