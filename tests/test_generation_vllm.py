"""The vLLM backend. These tests run where vLLM and a CUDA GPU exist and are skipped cleanly elsewhere (the
``vllm`` marker, see conftest.py); the model is a tiny random Qwen2 built on the spot (head size 64, which every
vLLM attention backend supports)."""

from __future__ import annotations

import pytest

from rag_curriculum.generation import BACKENDS, GenerationError, PromptTooLongError, SamplingConfig


def needs_vllm(f):
    """vLLM and a CUDA GPU, else skipped (conftest.py)."""
    return pytest.mark.vllm(pytest.mark.gpu(pytest.mark.slow(f)))


PROMPTS = [
    [{"role": "system", "content": "Respond in the following format:"},
     {"role": "user", "content": "Who wrote the novel about the whale?"}],
    [{"role": "user", "content": "Which river flows through the capital?"}],
]


@pytest.fixture(scope="module")
def vllm_model_dir(tmp_path_factory, shared_data):
    from tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2-vllm"), shared_data, hidden_size=256)


@pytest.fixture(scope="module")
def llm(vllm_model_dir):
    from rag_curriculum.generation.vllm_backend import VLLMBackend

    b = VLLMBackend(str(vllm_model_dir), max_model_len=4096, dtype="float16", gpu_memory_utilization=0.25,
                    enforce_eager=True)
    yield b
    b.close()


@needs_vllm
def test_registered_by_dotted_path():
    from rag_curriculum.generation.vllm_backend import VLLMBackend

    assert BACKENDS.get("vllm") is VLLMBackend


@needs_vllm
def test_explicit_sampling_params(llm):
    p = llm.sampling_params(SamplingConfig(n=8, temperature=0.7, top_p=0.9, max_tokens=800, seed=1), 42)
    assert (p.n, p.temperature, p.top_p, p.max_tokens, p.seed) == (8, 0.7, 0.9, 800, 42)
    assert p.top_k in (0, -1) and p.repetition_penalty == 1.0 and p.min_p == 0.0


@needs_vllm
def test_n_completions_and_seeded_reproducibility(llm):
    s = SamplingConfig(n=4, temperature=1.0, max_tokens=16)
    a = llm.generate(PROMPTS, s, seeds=[1, 2])
    assert len(a) == 2 and all(len(x) == 4 for x in a)
    assert llm.generate(PROMPTS, s, seeds=[1, 2]) == a  # per-request seeds: the same samples again
    assert llm.generate(PROMPTS, s, seeds=[3, 4]) != a


@needs_vllm
def test_too_long_prompts_are_refused(llm):
    long = [{"role": "user", "content": "word " * 6000}]
    with pytest.raises(PromptTooLongError) as e:
        llm.generate([PROMPTS[0], long], SamplingConfig(n=1, max_tokens=4), seeds=[1, 2])
    assert e.value.indices == [1]


@needs_vllm
def test_partition_end_to_end_on_the_gpu(llm, shared_data, tmp_path):
    from conftest import MUSIQUE_TRAIN

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.partition import PartitionConfig, partition

    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 6, K=2)], schedule="max",
                                 out=str(tmp_path / "max"), seed=0), command="test")
    res = partition(PartitionConfig(shards=str(tmp_path / "max"), out=str(tmp_path / "p"), backend="vllm",
                                    model="tiny", k=4, max_tokens=16, chunk_size=4), backend=llm, command="test")
    assert res.complete and res.counts["questions"] == 6 and res.counts["scored"] == 6


def test_a_missing_vllm_is_a_clear_error(monkeypatch):
    """Runs everywhere: without vLLM the backend says how to install it (and nothing imports vLLM earlier)."""
    import builtins

    real = builtins.__import__

    def no_vllm(name, *a, **k):
        if name == "vllm":
            raise ImportError("no vllm here")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_vllm)
    from rag_curriculum.generation.vllm_backend import VLLMBackend

    with pytest.raises(GenerationError, match="pip install"):
        VLLMBackend("x")


# -- everywhere: the backend's own logic against a stand-in `vllm` module (no GPU needed) --------------------------
class _FakeTokenizer:
    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        assert tokenize is False
        return "".join(f"<{m['role']}> {m['content']} " for m in messages) + "<assistant>"

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": text.split()}


class _FakeLLM:
    instances: list = []

    def __init__(self, **kwargs):
        import types

        self.kwargs = kwargs
        self.calls = []
        self.llm_engine = types.SimpleNamespace(model_config=types.SimpleNamespace(
            max_model_len=kwargs.get("max_model_len", 64)))
        _FakeLLM.instances.append(self)

    def get_tokenizer(self):
        return _FakeTokenizer()

    def chat(self, messages, sampling_params, use_tqdm=True):
        import types

        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(messages)
        self.calls.append((messages, sampling_params, use_tqdm))
        outs = []
        for m, p in zip(messages, params, strict=True):
            comps = [types.SimpleNamespace(index=j, text=f"{m[-1]['content']}|{p.seed}|{j}") for j in range(p.n)]
            outs.append(types.SimpleNamespace(outputs=comps[::-1]))  # any order: the backend sorts by index
        return outs


class _FakeSamplingParams:
    def __init__(self, **kw):
        self.__dict__.update(kw)


@pytest.fixture()
def fake_vllm(monkeypatch):
    import sys
    import types

    mod = types.ModuleType("vllm")
    mod.LLM = _FakeLLM
    mod.SamplingParams = _FakeSamplingParams
    monkeypatch.setitem(sys.modules, "vllm", mod)
    _FakeLLM.instances.clear()
    return mod


def test_engine_arguments_and_explicit_sampling_params_per_question(fake_vllm):
    from rag_curriculum.generation.vllm_backend import VLLMBackend

    b = VLLMBackend("Qwen/Qwen2.5-7B-Instruct", tensor_parallel_size=2, max_model_len=4096, dtype="bfloat16",
                    enforce_eager=True)
    kw = _FakeLLM.instances[0].kwargs
    assert (kw["model"], kw["tensor_parallel_size"], kw["max_model_len"], kw["dtype"]) == (
        "Qwen/Qwen2.5-7B-Instruct", 2, 4096, "bfloat16")
    assert kw["enable_prefix_caching"] is True and kw["enforce_eager"] is True
    s = SamplingConfig(n=3, temperature=0.6, top_p=0.95, max_tokens=800, seed=1)
    out = b.generate(PROMPTS, s, seeds=[11, 22])
    assert out == [[f"Who wrote the novel about the whale?|11|{j}" for j in range(3)],
                   [f"Which river flows through the capital?|22|{j}" for j in range(3)]]
    messages, params, tqdm = _FakeLLM.instances[0].calls[0]
    assert messages == PROMPTS and tqdm is False and len(params) == 2  # one call, every prompt
    assert [vars(p) for p in params] == [dict(n=3, temperature=0.6, top_p=0.95, max_tokens=800, seed=sd)
                                         for sd in (11, 22)]
    b.generate(PROMPTS, s)  # without per-question seeds: one params object, the engine's own generator
    assert vars(_FakeLLM.instances[0].calls[1][1]) == dict(n=3, temperature=0.6, top_p=0.95, max_tokens=800,
                                                           seed=None)
    assert b.describe() == {"backend": "vllm", "model": "Qwen/Qwen2.5-7B-Instruct", "dtype": "bfloat16",
                            "max_model_len": 4096, "quantization": None}
    assert b.call_size == 2048
    b.close()


def test_prompts_over_the_context_are_refused_before_generating(fake_vllm):
    from rag_curriculum.generation.vllm_backend import VLLMBackend

    b = VLLMBackend("m", max_model_len=300)
    long = [{"role": "user", "content": "word " * 400}]
    longish = [{"role": "user", "content": "w" * 400}]  # many characters, few tokens: fits
    with pytest.raises(PromptTooLongError) as e:
        b.generate([PROMPTS[0], long, longish], SamplingConfig(n=1), seeds=[1, 2, 3])
    assert e.value.indices == [1] and e.value.limit == 300
    assert _FakeLLM.instances[0].calls == []  # nothing generated


class _ByteTokenizer(_FakeTokenizer):
    """A byte-level BPE at its worst: one token per UTF-8 byte (CJK characters take 3 tokens each)."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": list(text.encode("utf-8"))}


def test_prompts_with_more_tokens_than_characters_are_still_caught(fake_vllm, monkeypatch):
    """Byte-level tokenizers can give a character several tokens, so a prompt with fewer characters than the
    context may still overflow it; vLLM would then reject the whole call (and the same call again on resume)."""
    from rag_curriculum.generation.vllm_backend import VLLMBackend

    b = VLLMBackend("m", max_model_len=1000)
    monkeypatch.setattr(_FakeLLM, "get_tokenizer", lambda self: _ByteTokenizer())
    cjk = [{"role": "user", "content": "北" * 400}]  # 400 characters, 1,200 bytes
    with pytest.raises(PromptTooLongError) as e:
        b.generate([PROMPTS[0], cjk], SamplingConfig(n=1), seeds=[1, 2])
    assert e.value.indices == [1] and _FakeLLM.instances[0].calls == []


def test_the_runner_drives_it_in_calls_of_call_size(fake_vllm, tmp_path):
    from rag_curriculum.generation.runner import read_results, run_chunks
    from rag_curriculum.generation.vllm_backend import VLLMBackend

    b = VLLMBackend("m", call_size=6)
    ids = [f"q{i}" for i in range(10)]
    prompts = [[{"role": "user", "content": f"p{i}"}] for i in range(10)]
    rep = run_chunks(tmp_path / "w", ids=ids, prompts=prompts, backend=b, sampling=SamplingConfig(n=2),
                     fingerprint=b.describe(), chunk_size=3)
    assert rep.complete
    assert [len(c[0]) for c in _FakeLLM.instances[0].calls] == [6, 4]  # two chunks per call
    t = read_results(tmp_path / "w")
    seeds = t.column("seed").to_pylist()
    assert t.column("completions").to_pylist()[4] == [f"p4|{seeds[4]}|0", f"p4|{seeds[4]}|1"]
