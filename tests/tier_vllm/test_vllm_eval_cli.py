"""`curriculum eval --backend vllm` end to end on the real engine, on real MuSiQue rows: the results and the
summary written, the engine's per-platform choices (prefix caching) recorded in the results' metadata."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm", reason="the vLLM tier runs in .venv-vllm (bash scripts/test.sh makes it)")

from conftest import MUSIQUE_DEV  # noqa: E402


@pytest.mark.timeout(600)
def test_eval_with_the_vllm_backend(vllm_model_dir, tmp_path, curriculum, shared_data):
    data = tmp_path / "musique-distractor"
    res = curriculum("build", "--dataset", "musique", "--input", str(MUSIQUE_DEV), "--setting", "distractor",
                     "--n", "6", "--out", str(data))
    assert res.returncode == 0, res.stderr[-3000:]
    out = tmp_path / "eval"
    res = curriculum("eval", "run", "-M", f"tiny={vllm_model_dir}", "-d", str(data), "--backend", "vllm",
                     "--max-tokens", "24", "-o", str(out), "--no-plots", "--no-progress",
                     "--backend-arg", "enforce_eager=true",  # no torch.compile warm-up: tens of seconds on 2 cores
                     "--backend-arg", "in_process_engine=true")
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    text = json.dumps(summary)
    assert "tiny" in text and "musique" in text
    import pyarrow.parquet as pq

    results = [pq.read_table(p) for p in sorted((out / "results").rglob("*.parquet"))]
    assert results and sum(t.num_rows for t in results) == 6
    from rag_curriculum.evaluation._run import read_results

    meta = read_results(sorted((out / "results").rglob("*.parquet"))[0])[1]
    assert meta["backend"]["backend"] == "vllm" and meta["backend"]["engine"]["enable_prefix_caching"] is True
