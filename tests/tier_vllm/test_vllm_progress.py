"""The real vLLM engine reports each finished request to the runner's progress line: vLLM's
``LLM.generate(use_tqdm=factory)`` drives the toolkit's ``_Reported`` bar while the runner listens, and nothing is
asked of it otherwise."""

from __future__ import annotations

import pytest

from rag_curriculum.generation import SamplingConfig
from rag_curriculum.generation._base import listening

pytest.importorskip("vllm", reason="the vLLM tier runs in .venv-vllm (bash scripts/test.sh makes it)")


def m(text):
    return [{"role": "user", "content": text}]


def test_vllm_reports_each_finished_request_while_listened(engine):
    got: list = []
    prompts = [m(f"question {i}") for i in range(5)]
    sampling = SamplingConfig(n=3, temperature=1.0, max_tokens=4, seed=0)
    with listening(engine, lambda p, c: got.append((p, c))):
        out = engine.generate(prompts, sampling, seeds=list(range(5)))
    assert len(out) == 5 and all(len(o) == 3 for o in out)
    assert got == [(1, 3)] * 5  # one report per request, with its n completions
    got.clear()
    assert engine.generate(prompts, sampling, seeds=list(range(5))) == out  # not listened: same samples
    assert got == []
