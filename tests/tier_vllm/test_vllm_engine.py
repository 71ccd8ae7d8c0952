"""The vLLM backend against the real engine (one engine shared by the module): per-platform defaults, rendering
with the engine's own tokenizer and chat template, explicit seeded sampling, never-truncated prompts, and
samples that do not depend on chunking, sharding or batch-mates."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="the vLLM tier runs in .venv-vllm (bash scripts/test.sh makes it)")

from conftest import MUSIQUE_TRAIN  # noqa: E402

from rag_curriculum.generation import PromptTooLongError, SamplingConfig  # noqa: E402

PROMPTS = [
    [{"role": "system", "content": "Respond in the following format: <answer>...</answer>"},
     {"role": "user", "content": f"Question {i}: who wrote the novel about the whale? " + "Passage text. " * (7 * i)}]
    for i in range(10)
]


def texts(outputs) -> list[list[str]]:
    return [[c.text for c in sorted(o.outputs, key=lambda c: c.index)] for o in outputs]


def test_platform_defaults_are_chosen_and_recorded(engine):
    from vllm.platforms import current_platform

    d = engine.describe()
    assert d["backend"] == "vllm" and d["vllm_version"] and d["max_model_len"] == 2048
    assert d["engine"]["enable_prefix_caching"] is True  # on, explicitly: shared system prompt and n samples
    if current_platform.is_cpu():
        # vLLM's CPU sampler cannot advance a seeded generator over prefill chunks: chunked prefill off
        from rag_curriculum.generation._vllm_backend import platform_defaults

        assert d["platform"] == "cpu" and d["platform_defaults"] == platform_defaults(current_platform)
        assert d["platform_defaults"]["enable_chunked_prefill"] is False
        assert d["engine"]["enable_chunked_prefill"] is False
    else:
        assert d["platform_defaults"] == {}
    assert len(d["chat_template_sha256"]) == 64


def test_prompts_are_rendered_exactly_as_llm_chat_renders_them(engine):
    """The length check counts the tokens the engine generates from: LLM.chat's own rendering of the prompts
    (the engine's tokenizer and chat template) gives the same token ids and, with the same seeds, the same
    samples as the backend."""
    s = SamplingConfig(n=3, temperature=1.0, max_tokens=12)
    seeds = [101 + i for i in range(len(PROMPTS))]
    ours = engine.generate(PROMPTS, s, seeds=seeds)
    ref = engine.llm.chat(PROMPTS, [engine.sampling_params(s, sd) for sd in seeds], use_tqdm=False)
    assert [list(o.prompt_token_ids) for o in ref] == engine.render(PROMPTS)
    assert texts(ref) == ours


def test_explicit_seeded_sampling(engine):
    s = SamplingConfig(n=4, temperature=1.0, top_p=1.0, max_tokens=12)
    a = engine.generate(PROMPTS[:4], s, seeds=[1, 2, 3, 4])
    assert len(a) == 4 and all(len(x) == 4 for x in a)
    assert all(len(set(x)) > 1 for x in a)  # real sampling: a question's samples differ
    assert engine.generate(PROMPTS[:4], s, seeds=[1, 2, 3, 4]) == a  # seeded: the same samples again
    assert engine.generate(PROMPTS[:4], s, seeds=[5, 6, 7, 8]) != a
    # a question's samples do not depend on its batch-mates
    assert engine.generate([PROMPTS[2]], s, seeds=[3]) == [a[2]]
    p = engine.sampling_params(SamplingConfig(n=8, temperature=0.7, top_p=0.9, max_tokens=800), 42)
    assert (p.n, p.temperature, p.top_p, p.max_tokens, p.seed) == (8, 0.7, 0.9, 800, 42)
    assert p.top_k in (0, -1) and p.repetition_penalty == 1.0 and p.min_p == 0.0  # not generation_config's


def test_prompts_that_leave_no_room_for_the_completion_are_refused_not_truncated(engine):
    """vLLM rejects only a prompt longer than the context; a prompt that fits but leaves less than max_tokens is
    generated and silently capped (finish_reason 'length' before max_tokens). The backend refuses both, and
    still generates the other prompts of the call."""
    from vllm import SamplingParams

    filler = "Passage text that fills the context. "
    ids = engine.render([[{"role": "user", "content": filler * 200}]])[0]
    per = len(ids) / 200
    near = [{"role": "user", "content": filler * int((2048 - 60) / per)}]  # fits, with fewer than 100 tokens left
    over = [{"role": "user", "content": filler * int(2100 / per)}]  # longer than the context
    n_near = len(engine.render([near])[0])
    assert n_near < 2048 < len(engine.render([over])[0]) and n_near + 100 > 2048
    capped = engine.llm.generate([{"prompt_token_ids": engine.render([near])[0]}],
                                 SamplingParams(max_tokens=100, temperature=1.0, seed=0, ignore_eos=True),
                                 use_tqdm=False)[0].outputs[0]
    assert len(capped.token_ids) < 100 and capped.finish_reason == "length"  # what the check prevents
    s = SamplingConfig(n=2, max_tokens=100)
    with pytest.raises(PromptTooLongError) as e:
        engine.generate([PROMPTS[0], near, over, PROMPTS[1]], s, seeds=[1, 2, 3, 4])
    assert e.value.indices == [1, 2] and e.value.limit == 2048
    assert e.value.results[1] is None and e.value.results[2] is None
    assert e.value.results[0] == engine.generate([PROMPTS[0]], s, seeds=[1])[0]  # the rest was generated
    assert "prompt + max_tokens (100) > max_model_len" in str(e.value)


def test_samples_do_not_depend_on_chunking_sharding_or_calls(engine, tmp_path):
    from rag_curriculum.generation.runner import read_completions, run_chunks

    ids = [f"q{i}" for i in range(len(PROMPTS))]
    s = SamplingConfig(n=3, max_tokens=10, seed=7)

    def run(name, chunk_size, num_shards=1, chunks_per_call=None):
        for shard in range(num_shards):
            run_chunks(tmp_path / name, ids=ids, prompts=PROMPTS, backend=engine, sampling=s,
                       fingerprint=engine.describe(), chunk_size=chunk_size, num_shards=num_shards,
                       shard_index=shard, chunks_per_call=chunks_per_call)
        return read_completions(tmp_path / name, ids=ids).select(["id", "seed", "completions"]).to_pylist()

    whole = run("whole", 256)
    assert run("chunks-of-3", 3) == whole
    assert run("one-chunk-per-call", 2, chunks_per_call=1) == whole
    assert run("two-shards", 2, num_shards=2) == whole
    comps = [r["completions"] for r in whole]
    assert all(len(c) == 3 for c in comps) and len({c[0] for c in comps}) == len(comps)


def test_partition_on_real_rows(engine, tmp_path, shared_data):
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.partition import PartitionConfig, partition

    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 6, K=2)], schedule="max",
                                 out=str(tmp_path / "max"), seed=0), command="test")
    res = partition(PartitionConfig(shards=str(tmp_path / "max"), out=str(tmp_path / "p"), backend="vllm",
                                    model="tiny", samples=4, max_tokens=16, chunk_size=4), backend=engine, command="test")
    assert res.complete and res.counts["questions"] == 6 and res.counts["scored"] == 6
