"""The vLLM backend's own logic against a stand-in ``vllm`` module (runs everywhere, no engine). The real engine is
driven by the vLLM tier, tests/tier_vllm/ (run in .venv-vllm by scripts/test.sh)."""

from __future__ import annotations

import os

import pytest

from rag_curriculum.generation import GenerationError, PromptTooLongError, SamplingConfig

PROMPTS = [
    [{"role": "system", "content": "Respond in the following format:"},
     {"role": "user", "content": "Who wrote the novel about the whale?"}],
    [{"role": "user", "content": "Which river flows through the capital?"}],
]


def test_a_missing_vllm_is_a_clear_error(monkeypatch):
    """Runs everywhere: without vLLM the backend says how to install it (and nothing imports vLLM earlier)."""
    import builtins

    real = builtins.__import__

    def no_vllm(name, *a, **k):
        if name == "vllm":
            raise ImportError("no vllm here")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_vllm)
    from rag_curriculum.generation._vllm_backend import VLLMBackend

    with pytest.raises(GenerationError, match="pip install"):
        VLLMBackend("x")


# -- everywhere: the backend's own logic against a stand-in `vllm` module (no GPU needed) --------------------------
class _FakeTokenizer:
    chat_template = "{{ messages }}"

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        assert tokenize is False and add_generation_prompt is True
        return "".join(f"<{m['role']}> {m['content']} " for m in messages) + "<assistant>"

    def __call__(self, texts, add_special_tokens=False):
        assert add_special_tokens is False
        return {"input_ids": texts.split() if isinstance(texts, str) else [t.split() for t in texts]}


class _FakeLLM:
    instances: list = []

    def __init__(self, **kwargs):
        import types

        self.kwargs = kwargs
        self.calls = []
        self.multiprocessing_env = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")  # as vLLM reads it
        ns = types.SimpleNamespace
        self.llm_engine = ns(model_config=ns(max_model_len=kwargs.get("max_model_len", 64)), vllm_config=ns(
            scheduler_config=ns(enable_chunked_prefill=kwargs.get("enable_chunked_prefill", True),
                                max_num_batched_tokens=8192),
            cache_config=ns(enable_prefix_caching=kwargs["enable_prefix_caching"], cache_dtype="auto"),
            model_config=ns(enforce_eager=kwargs["enforce_eager"]),
            parallel_config=ns(tensor_parallel_size=kwargs["tensor_parallel_size"])))
        _FakeLLM.instances.append(self)

    def get_tokenizer(self):
        return _FakeTokenizer()

    def generate(self, prompts, sampling_params, use_tqdm=True):
        import types

        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        self.calls.append((prompts, sampling_params, use_tqdm))
        outs = []
        for pr, p in zip(prompts, params, strict=True):
            text = " ".join(pr["prompt_token_ids"])
            comps = [types.SimpleNamespace(index=j, text=f"{text}|{p.seed}|{j}") for j in range(p.n)]
            outs.append(types.SimpleNamespace(outputs=comps[::-1]))  # any order: the backend sorts by index
        return outs


class _FakePlatform:
    def __init__(self, device_type):
        self.device_type = device_type

    def is_cpu(self):
        return self.device_type == "cpu"


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
    mod.__version__ = "0.0-standin"
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = _FakePlatform("cuda")
    mod.platforms = platforms
    monkeypatch.setitem(sys.modules, "vllm", mod)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    _FakeLLM.instances.clear()
    from rag_curriculum.generation import _vllm_backend

    _vllm_backend._IN_PROCESS.clear()  # another test's engines, never closed, are not this test's
    return mod


def rendered(messages) -> str:
    """What the stand-in tokenizer makes of a prompt (the stand-in LLM echoes it)."""
    return " ".join(_FakeTokenizer()([_FakeTokenizer().apply_chat_template(messages)])["input_ids"][0])


@pytest.mark.slow
def test_engine_arguments_and_explicit_sampling_params_per_question(fake_vllm):
    from rag_curriculum.generation._vllm_backend import VLLMBackend

    b = VLLMBackend("Qwen/Qwen2.5-7B-Instruct", tensor_parallel_size=2, max_model_len=4096, dtype="bfloat16",
                    enforce_eager=True)
    kw = _FakeLLM.instances[0].kwargs
    assert (kw["model"], kw["tensor_parallel_size"], kw["max_model_len"], kw["dtype"]) == (
        "Qwen/Qwen2.5-7B-Instruct", 2, 4096, "bfloat16")
    assert kw["enable_prefix_caching"] is True and kw["enforce_eager"] is True
    assert "enable_chunked_prefill" not in kw  # a GPU: vLLM's own default
    s = SamplingConfig(n=3, temperature=0.6, top_p=0.95, max_tokens=800, seed=1)
    out = b.generate(PROMPTS, s, seeds=[11, 22])
    assert out == [[f"{rendered(PROMPTS[0])}|11|{j}" for j in range(3)],
                   [f"{rendered(PROMPTS[1])}|22|{j}" for j in range(3)]]
    prompts, params, tqdm = _FakeLLM.instances[0].calls[0]
    assert [" ".join(p["prompt_token_ids"]) for p in prompts] == [rendered(m) for m in PROMPTS]  # token ids
    assert tqdm is False and len(params) == 2  # one call, every prompt
    assert [vars(p) for p in params] == [dict(n=3, temperature=0.6, top_p=0.95, max_tokens=800, seed=sd)
                                         for sd in (11, 22)]
    b.generate(PROMPTS, s)  # without per-question seeds: one params object, the engine's own generator
    assert vars(_FakeLLM.instances[0].calls[1][1]) == dict(n=3, temperature=0.6, top_p=0.95, max_tokens=800,
                                                           seed=None)
    d = b.describe()
    assert {k: d[k] for k in ("backend", "model", "dtype", "max_model_len", "quantization", "platform")} == {
        "backend": "vllm", "model": "Qwen/Qwen2.5-7B-Instruct", "dtype": "bfloat16", "max_model_len": 4096,
        "quantization": None, "platform": "cuda"}
    assert d["engine"] == {"enable_chunked_prefill": True, "max_num_batched_tokens": 8192,
                           "enable_prefix_caching": True, "cache_dtype": "auto", "enforce_eager": True,
                           "tensor_parallel_size": 2}
    assert d["platform_defaults"] == {} and d["vllm_version"] == "0.0-standin" and len(d["chat_template_sha256"]) == 64
    assert b.call_size == 2048
    b.close()


def test_on_cpu_chunked_prefill_is_off_unless_asked_and_the_crashing_combination_is_refused(fake_vllm):
    """vLLM's CPU build crashes ('CPU Generator does not use offset') when a seeded request's prefill is chunked."""
    from rag_curriculum.generation._vllm_backend import VLLMBackend

    fake_vllm.platforms.current_platform = _FakePlatform("cpu")
    b = VLLMBackend("m", max_model_len=300, dtype="bfloat16")
    assert _FakeLLM.instances[-1].kwargs["enable_chunked_prefill"] is False
    assert b.describe()["platform_defaults"] == {"enable_chunked_prefill": False}
    assert b.describe()["engine"]["enable_chunked_prefill"] is False
    b.generate(PROMPTS, SamplingConfig(n=1, max_tokens=8), seeds=[1, 2])
    b.close()
    forced = VLLMBackend("m", max_model_len=300, enable_chunked_prefill=True, dtype="bfloat16")
    assert _FakeLLM.instances[-1].kwargs["enable_chunked_prefill"] is True
    assert forced.describe()["platform_defaults"] == {}  # the user's choice, not the toolkit's
    with pytest.raises(GenerationError, match="--no-question-seeds"):
        forced.generate(PROMPTS, SamplingConfig(n=1, max_tokens=8), seeds=[1, 2])
    assert forced.generate(PROMPTS, SamplingConfig(n=1, max_tokens=8))  # no per-request seeds: fine


def test_on_a_cpu_without_native_bf16_a_float32_model_runs_in_float32(fake_vllm, monkeypatch):
    """vLLM's "auto" runs a float32 checkpoint in bfloat16 on every CPU, emulated where the CPU has no bf16
    arithmetic (hundreds of times slower): the toolkit asks for float32 there, records it, and an explicit dtype
    wins."""
    from rag_curriculum.generation import _vllm_backend as vb

    fake_vllm.platforms.current_platform = _FakePlatform("cpu")
    monkeypatch.setattr(vb, "_cpu_flags", lambda: {"avx2", "fma"})
    b = vb.VLLMBackend("m", max_model_len=300)
    assert _FakeLLM.instances[-1].kwargs["dtype"] == "float32" and b.describe()["dtype"] == "float32"
    assert b.describe()["platform_defaults"] == {"enable_chunked_prefill": False, "dtype": "float32"}
    asked = vb.VLLMBackend("m", max_model_len=300, dtype="bfloat16")
    assert _FakeLLM.instances[-1].kwargs["dtype"] == "bfloat16" and "dtype" not in asked.describe()["platform_defaults"]
    monkeypatch.setattr(vb, "_cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    vb.VLLMBackend("m", max_model_len=300)
    assert _FakeLLM.instances[-1].kwargs["dtype"] == "auto"


def test_in_process_engine_runs_one_engine_in_the_callers_process(fake_vllm, monkeypatch):
    """``in_process_engine=True``: vLLM reads VLLM_ENABLE_V1_MULTIPROCESSING=0 while the engine is made (two
    processes' imports saved at each start), and the process's environment is left as it was; off by default, a
    value the user set wins, several devices keep vLLM's processes, and while one in-process engine lives the next
    runs in vLLM's processes (the two would share vLLM's process-wide parallel state)."""
    from rag_curriculum.generation import _vllm_backend as vb
    from rag_curriculum.generation._base import backend_identity

    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    fake_vllm.platforms.current_platform = _FakePlatform("cpu")
    vb.VLLMBackend("m", max_model_len=300, dtype="bfloat16").close()
    assert _FakeLLM.instances[-1].multiprocessing_env is None  # the default: vLLM's own processes
    b = vb.VLLMBackend("m", max_model_len=300, dtype="bfloat16", in_process_engine=True)
    assert _FakeLLM.instances[-1].multiprocessing_env == "0" and b.in_process_engine
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in os.environ
    second = vb.VLLMBackend("m", max_model_len=300, dtype="bfloat16", in_process_engine=True)
    assert _FakeLLM.instances[-1].multiprocessing_env is None and not second.in_process_engine
    b.close()
    third = vb.VLLMBackend("m", max_model_len=300, dtype="bfloat16", in_process_engine=True)
    assert _FakeLLM.instances[-1].multiprocessing_env == "0"  # the first one closed: in process again
    third.close()
    vb.VLLMBackend("m", max_model_len=300, dtype="bfloat16", tensor_parallel_size=2, in_process_engine=True)
    assert _FakeLLM.instances[-1].multiprocessing_env is None
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    mine = vb.VLLMBackend("m", max_model_len=300, dtype="bfloat16", in_process_engine=True)
    assert _FakeLLM.instances[-1].multiprocessing_env == "1" and not mine.in_process_engine
    # how the engine runs changes no completion: not part of a run's identity
    assert backend_identity("vllm", "m", {"in_process_engine": True}) == backend_identity("vllm", "m", {})


def test_closing_an_engine_leaves_a_living_in_process_engines_parallel_groups(fake_vllm, monkeypatch):
    """vLLM's parallel groups are process-wide: an in-process engine uses them while it lives, so closing another
    engine of the process (made in vLLM's processes) must not destroy them; the last engine's close does."""
    import sys
    import types

    from rag_curriculum.generation import _vllm_backend as vb

    destroyed: list[str] = []
    state = types.ModuleType("vllm.distributed.parallel_state")
    state.destroy_model_parallel = lambda: destroyed.append("model_parallel")
    state.destroy_distributed_environment = lambda: destroyed.append("distributed_environment")
    monkeypatch.setitem(sys.modules, "vllm.distributed", types.ModuleType("vllm.distributed"))
    monkeypatch.setitem(sys.modules, "vllm.distributed.parallel_state", state)
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    fake_vllm.platforms.current_platform = _FakePlatform("cpu")
    living = vb.VLLMBackend("m", max_model_len=300, dtype="bfloat16", in_process_engine=True)
    other = vb.VLLMBackend("m", max_model_len=300, dtype="bfloat16", in_process_engine=True)
    assert living.in_process_engine and not other.in_process_engine
    other.close()
    assert destroyed == []  # the in-process engine still generates with them
    living.close()
    assert destroyed == ["model_parallel", "distributed_environment"]


def test_each_engine_reads_vllms_environment_afresh(fake_vllm, monkeypatch):
    """vLLM caches its environment once an engine core starts in the process; a cached
    VLLM_ENABLE_V1_MULTIPROCESSING=0 (an in-process engine's) made the next engine in process too. The cache, when
    on, is emptied before each engine is made and after an in-process one, and left on."""
    import sys
    import types

    from rag_curriculum.generation import _vllm_backend as vb

    envs = types.ModuleType("vllm.envs")
    envs.cache = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}  # what an earlier in-process engine left cached
    envs.on = True
    envs.calls = []
    envs._is_envs_cache_enabled = lambda: envs.on
    envs.disable_envs_cache = lambda: (envs.calls.append("disable"), envs.cache.clear(), setattr(envs, "on", False))
    envs.enable_envs_cache = lambda: (envs.calls.append("enable"), setattr(envs, "on", True))
    fake_vllm.envs = envs
    monkeypatch.setitem(sys.modules, "vllm.envs", envs)
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    fake_vllm.platforms.current_platform = _FakePlatform("cpu")
    vb.VLLMBackend("m", max_model_len=300, dtype="bfloat16").close()
    assert envs.calls == ["disable", "enable"] and envs.cache == {} and envs.on  # emptied, still on
    envs.calls.clear()
    vb.VLLMBackend("m", max_model_len=300, dtype="bfloat16", in_process_engine=True).close()
    assert envs.calls == ["disable", "enable", "disable", "enable"]  # before it, and after its "0" was set
    envs.on, envs.calls = False, []
    vb.VLLMBackend("m", max_model_len=300, dtype="bfloat16").close()
    assert envs.calls == [] and not envs.on  # a cache that is off stays off


def test_prompts_that_leave_no_room_for_max_tokens_are_refused_and_the_rest_generated(fake_vllm):
    from rag_curriculum.generation._vllm_backend import VLLMBackend

    b = VLLMBackend("m", max_model_len=300)
    long = [{"role": "user", "content": "word " * 400}]
    near = [{"role": "user", "content": "word " * 250}]  # fits the context, not with 100 tokens to generate
    longish = [{"role": "user", "content": "w" * 400}]  # many characters, few tokens: fits
    with pytest.raises(PromptTooLongError) as e:
        b.generate([PROMPTS[0], long, longish, near], SamplingConfig(n=1, max_tokens=100), seeds=[1, 2, 3, 4])
    assert e.value.indices == [1, 3] and e.value.limit == 300
    assert e.value.results[0] == [f"{rendered(PROMPTS[0])}|1|0"] and e.value.results[2] is not None
    prompts, params, _ = _FakeLLM.instances[0].calls[0]
    assert len(prompts) == 2 and [p.seed for p in params] == [1, 3]  # only the prompts that fit, own seeds


class _ByteTokenizer(_FakeTokenizer):
    """A byte-level BPE at its worst: one token per UTF-8 byte (CJK characters take 3 tokens each)."""

    def __call__(self, texts, add_special_tokens=False):
        one = isinstance(texts, str)
        ids = [[str(b) for b in t.encode("utf-8")] for t in ([texts] if one else texts)]
        return {"input_ids": ids[0] if one else ids}


def test_prompts_with_more_tokens_than_characters_are_still_caught(fake_vllm, monkeypatch):
    """Byte-level tokenizers can give a character several tokens: the check counts tokens, never characters."""
    from rag_curriculum.generation._vllm_backend import VLLMBackend

    b = VLLMBackend("m", max_model_len=1000)
    monkeypatch.setattr(_FakeLLM, "get_tokenizer", lambda self: _ByteTokenizer())
    cjk = [{"role": "user", "content": "北" * 400}]  # 400 characters, 1,200 bytes
    with pytest.raises(PromptTooLongError) as e:
        b.generate([PROMPTS[0], cjk], SamplingConfig(n=1, max_tokens=10), seeds=[1, 2])
    assert e.value.indices == [1] and len(_FakeLLM.instances[0].calls[0][0]) == 1


def test_the_runner_drives_it_in_calls_of_call_size(fake_vllm, tmp_path):
    from rag_curriculum.generation._vllm_backend import VLLMBackend
    from rag_curriculum.generation.runner import read_completions, run_chunks

    b = VLLMBackend("m", call_size=6)
    ids = [f"q{i}" for i in range(10)]
    prompts = [[{"role": "user", "content": f"p{i}"}] for i in range(10)]
    rep = run_chunks(tmp_path / "w", ids=ids, prompts=prompts, backend=b, sampling=SamplingConfig(n=2, max_tokens=8),
                     fingerprint=b.describe(), chunk_size=3, allow_identical_samples=True)
    assert rep.complete
    assert [len(c[0]) for c in _FakeLLM.instances[0].calls] == [6, 4]  # two chunks per call
    t = read_completions(tmp_path / "w")
    seeds = t.column("seed").to_pylist()
    p4 = rendered(prompts[4])
    assert t.column("completions").to_pylist()[4] == [f"{p4}|{seeds[4]}|0", f"{p4}|{seeds[4]}|1"]
