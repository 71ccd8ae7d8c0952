"""The scripted backend (used by unit tests, demos and benchmarks) and the lazy backend registry."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest

from rag_curriculum.generation import (
    BACKENDS,
    GenerationBackend,
    SamplingConfig,
    get_backend,
    seeded_call_supported,
)
from rag_curriculum.generation._scripted import ScriptedBackend


def m(text):
    return [{"role": "user", "content": text}]


def by_seed(messages, n, seed):
    return [f"{messages[-1]['content']}:{seed}:{j}" for j in range(n)]


SCRIPT = {"a": ["1", "2", "3"], "b": "same"}


def test_mapping_string_and_default():
    b = ScriptedBackend(script=SCRIPT, default=["d1", "d2", "d3"])
    assert b.generate([m("a"), m("b"), m("zzz")], SamplingConfig(n=2)) == [["1", "2"], ["same", "same"],
                                                                         ["d1", "d2"]]
    assert b.calls == [3]
    with pytest.raises(KeyError, match="zzz"):
        ScriptedBackend(script=SCRIPT).generate([m("zzz")], SamplingConfig(n=1))
    with pytest.raises(ValueError, match="n=4"):
        b.generate([m("a")], SamplingConfig(n=4))


def test_callable_gets_per_prompt_seeds():
    b = ScriptedBackend(script=by_seed)
    assert b.generate([m("x"), m("y")], SamplingConfig(n=2, seed=9), seeds=[5, 6]) == [["x:5:0", "x:5:1"],
                                                                                       ["y:6:0", "y:6:1"]]
    assert b.generate([m("x")], SamplingConfig(n=1, seed=9)) == [["x:9:0"]]
    assert seeded_call_supported(b)
    with pytest.raises(ValueError, match="seeds"):
        b.generate([m("x")], SamplingConfig(n=1), seeds=[1, 2])


def test_it_implements_the_interface_and_pickles():
    b = ScriptedBackend(script=SCRIPT, default="d", delay=0.0)
    assert isinstance(b, GenerationBackend)
    b2 = pickle.loads(pickle.dumps(b))
    assert b2.generate([m("a")], SamplingConfig(n=3)) == [["1", "2", "3"]]


def test_from_a_json_file_or_a_dotted_path(tmp_path):
    f = tmp_path / "script.json"
    f.write_text(json.dumps(SCRIPT))
    b = get_backend("scripted", model=str(f))
    assert b.generate([m("b")], SamplingConfig(n=2)) == [["same", "same"]]
    assert b.describe() == {"backend": "scripted", "model": str(f)}
    b = get_backend("scripted", model="generation.test_scripted:by_seed")
    assert b.generate([m("q")], SamplingConfig(n=1), seeds=[3]) == [["q:3:0"]]
    with pytest.raises(ValueError, match="JSON file"):
        get_backend("scripted", model="nonsense")
    with pytest.raises(TypeError):
        ScriptedBackend(script=42)
    with pytest.raises(ValueError):
        ScriptedBackend(script=SCRIPT, delay=-1)


def test_registry_names_and_typos():
    assert BACKENDS.names() == ["openai", "scripted", "transformers", "vllm"]
    with pytest.raises(KeyError, match="did you mean 'vllm'"):
        BACKENDS.get("vlm")


@pytest.mark.slow
def test_importing_the_toolkit_and_the_backends_never_imports_heavy_libraries():
    code = ("import sys, rag_curriculum, rag_curriculum.generation, rag_curriculum.generation.runner, "
            "rag_curriculum.partition, rag_curriculum.difficulty.accuracy, rag_curriculum._cli.partition, "
            "rag_curriculum.generation._vllm_backend, rag_curriculum.generation._hf_backend, "
            "rag_curriculum.generation._openai_backend, rag_curriculum.generation._scripted\n"
            "heavy = [m for m in ('torch', 'transformers', 'vllm', 'openai') if m in sys.modules]\n"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
