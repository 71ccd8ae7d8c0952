"""The transformers backend on a tiny random Qwen2 model built on the spot (real generation on the CPU): n samples
per prompt, explicit sampling settings that the model's generation_config cannot override, seeds that make a
prompt's samples independent of what ran before, too-long prompts, and exact resumes / shards through the runner."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from rag_curriculum.generation import PromptTooLongError, SamplingConfig, get_backend  # noqa: E402
from rag_curriculum.generation._hf_backend import TransformersBackend  # noqa: E402
from rag_curriculum.generation.runner import read_completions, run_chunks  # noqa: E402

pytestmark = pytest.mark.slow

PROMPTS = [
    [{"role": "system", "content": "Respond in the following format:"},
     {"role": "user", "content": "Who wrote the novel about the whale?"}],
    [{"role": "user", "content": "Which river flows through the capital?"}],
    [{"role": "user", "content": "Answer the question using only the provided passages. When was it built?"}],
]
S = SamplingConfig(n=3, temperature=1.0, top_p=1.0, max_tokens=12, seed=0)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, above all on a busy machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def hf(tiny_model_dir):
    return TransformersBackend(str(tiny_model_dir), device="cpu", batch_size=2)


def test_n_samples_per_prompt_within_max_tokens(hf):
    out = hf.generate(PROMPTS, S, seeds=[1, 2, 3])
    assert len(out) == 3 and all(len(o) == 3 and all(isinstance(x, str) for x in o) for o in out)
    one = hf.generate(PROMPTS, SamplingConfig(n=4, max_tokens=1), seeds=[1, 2, 3])
    tokens = {hf.tokenizer.decode([i], skip_special_tokens=True) for i in range(len(hf.tokenizer))}
    assert all(text in tokens for o in one for text in o)  # max_tokens=1: one token each
    assert len({t for o in out for t in o}) > 3  # a random model sampled at temperature 1 does not repeat itself
    d = hf.describe()  # every option that can change a completion, the model files' and chat template's digests
    assert d["backend"] == "transformers" and d["model"] == hf.model_name
    assert d["options"] == {"batch_size": 2, "device": "cpu", "dtype": "auto", "max_model_len": 8192,
                            "trust_remote_code": False}
    assert d["files"]["model"] and d["chat_template"]


def test_same_seeds_same_samples_whatever_ran_before(hf):
    a = hf.generate(PROMPTS, S, seeds=[1, 2, 3])
    hf.generate(PROMPTS[:1], S, seeds=[99])  # moves torch's global generator
    b = hf.generate(PROMPTS, S, seeds=[1, 2, 3])
    assert a == b
    c = hf.generate(PROMPTS, S, seeds=[4, 5, 6])
    assert c != a


def test_temperature_zero_is_greedy_and_repeated(hf):
    g = SamplingConfig(n=3, temperature=0.0, max_tokens=8)
    out = hf.generate(PROMPTS[:2], g, seeds=[1, 2])
    assert all(len(set(o)) == 1 and len(o) == 3 for o in out)
    assert out == hf.generate(PROMPTS[:2], g, seeds=[7, 8])


def test_the_models_generation_config_never_changes_the_samples(hf, tiny_model_dir, tmp_path):
    odd = tmp_path / "odd-defaults"
    shutil.copytree(tiny_model_dir, odd)
    gc_path = odd / "generation_config.json"
    cfg = json.loads(gc_path.read_text())
    cfg.update(do_sample=False, top_k=1, top_p=0.1, temperature=0.01, repetition_penalty=1.5, min_p=0.5,
               max_new_tokens=2)
    gc_path.write_text(json.dumps(cfg))
    other = get_backend("transformers", model=str(odd), device="cpu", batch_size=2)
    assert other.generate(PROMPTS, S, seeds=[1, 2, 3]) == hf.generate(PROMPTS, S, seeds=[1, 2, 3])


def test_too_long_prompts_are_refused_before_generating(tiny_model_dir):
    b = TransformersBackend(str(tiny_model_dir), device="cpu", max_model_len=12)
    lengths = [len(b.render(p)) for p in PROMPTS]
    with pytest.raises(PromptTooLongError) as e:
        b.generate(PROMPTS, S, seeds=[1, 2, 3])
    assert e.value.indices == [i for i, n in enumerate(lengths) if n > 12] and e.value.indices


def test_bad_settings(tiny_model_dir):
    with pytest.raises(ValueError):
        TransformersBackend(str(tiny_model_dir), batch_size=0)
    with pytest.raises(ValueError):
        TransformersBackend(str(tiny_model_dir), dtype="float8")


def test_runner_resumes_and_shards_exactly(hf, tmp_path):
    ids = [f"q{i}" for i in range(5)]
    prompts = [PROMPTS[i % 3] for i in range(5)]
    s = SamplingConfig(n=2, temperature=1.0, max_tokens=8, seed=3)

    def go(work, **kw):
        return run_chunks(work, ids=ids, prompts=prompts, backend=hf, sampling=s, fingerprint=hf.describe(),
                          chunk_size=2, **kw)

    go(tmp_path / "one")
    go(tmp_path / "resumed", max_chunks=1)
    go(tmp_path / "resumed")
    go(tmp_path / "sharded", num_shards=2, shard_index=1)
    go(tmp_path / "sharded", num_shards=2, shard_index=0)
    ref = read_completions(tmp_path / "one").column("completions").to_pylist()
    assert read_completions(tmp_path / "resumed").column("completions").to_pylist() == ref
    assert read_completions(tmp_path / "sharded").column("completions").to_pylist() == ref
    assert ref[0] != ref[3]  # the same prompt, another question: another seed, other samples
