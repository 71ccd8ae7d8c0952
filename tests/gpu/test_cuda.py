"""The GPU paths for real, on CUDA: the transformers generation backend and a whole pass@k partition through the
`curriculum partition` command (--device cuda, bf16), and TRL GRPO steps through `curriculum train`'s function
(bf16 autocast, the reference model too), all on the tiny random Qwen2 of the test fixture and shards built from
../shared/data. Skipped where torch sees no CUDA device (conftest.py), so CPU CI collects and skips them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

PROMPTS = [
    [{"role": "system", "content": "Respond in the following format:"},
     {"role": "user", "content": "Who wrote the novel about the whale?"}],
    [{"role": "user", "content": "Which river flows through the capital?"}],
    [{"role": "user", "content": "Answer the question using only the provided passages. When was it built?"}],
]


@pytest.fixture(scope="module")
def cuda_backend(tiny_model_dir):
    from rag_curriculum.generation._hf_backend import TransformersBackend

    backend = TransformersBackend(str(tiny_model_dir), device="cuda", batch_size=2)  # dtype auto: bf16 on a GPU
    yield backend
    backend.close()


def test_backend_loads_on_cuda_in_bf16_and_samples_vary(cuda_backend):
    import torch

    from rag_curriculum.generation import SamplingConfig

    p = next(cuda_backend.model.parameters())
    assert p.device.type == "cuda" and p.dtype == (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16)
    assert cuda_backend.describe()["options"]["device"] == "cuda"
    s = SamplingConfig(n=4, temperature=1.0, top_p=1.0, max_tokens=16, seed=0)
    out = cuda_backend.generate(PROMPTS, s, seeds=[1, 2, 3])
    assert [len(o) for o in out] == [4, 4, 4] and all(isinstance(t, str) for o in out for t in o)
    for samples in out:  # k samples of one prompt at temperature 1: not one sample repeated k times
        assert len(set(samples)) > 1, samples
    assert cuda_backend.generated_tokens > 0
    greedy = cuda_backend.generate(PROMPTS[:2], SamplingConfig(n=3, temperature=0.0, max_tokens=8), seeds=[1, 2])
    assert all(len(set(o)) == 1 and len(o) == 3 for o in greedy)


def test_same_seeds_same_samples_on_cuda(cuda_backend):
    """What resumed and sharded partitions rely on: a batch's samples depend on its prompts' seeds only, on the
    GPU too (torch.manual_seed seeds the CUDA generator)."""
    from rag_curriculum.generation import SamplingConfig

    s = SamplingConfig(n=3, temperature=1.0, top_p=1.0, max_tokens=12, seed=0)
    a = cuda_backend.generate(PROMPTS, s, seeds=[1, 2, 3])
    cuda_backend.generate(PROMPTS[:1], s, seeds=[99])  # moves the generators
    assert cuda_backend.generate(PROMPTS, s, seeds=[1, 2, 3]) == a
    assert cuda_backend.generate(PROMPTS, s, seeds=[4, 5, 6]) != a


def test_cli_partition_on_cuda(tiny_model_dir, shared_data, tmp_path):
    """`curriculum partition --backend transformers --device cuda --dtype bfloat16`: pass@4 of 6 MuSiQue questions
    at level 2; every question gets 4 varied samples, every statistic is there, the buckets cover every question,
    and the run records that it generated on cuda in bf16."""
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from rag_curriculum.cli import app
    from rag_curriculum.shards import read_table, validate_shards

    out = tmp_path / "p"
    r = CliRunner().invoke(app, [
        "partition", "--dataset", "musique", "--input", str(MUSIQUE_TRAIN), "--n", "6", "--K", "2",
        "--backend", "transformers", "--model", str(tiny_model_dir), "--device", "cuda", "--dtype", "bfloat16",
        "--batch-size", "4", "--pass-at", "4", "--max-tokens", "24", "--chunk-size", "3", "--seed", "5",
        "--keep-completions", "--no-progress", "--out", str(out)])
    assert r.exit_code == 0, r.output
    st = pq.read_table(out / "stats.parquet").to_pylist()
    assert len(st) == 6 and [s["position"] for s in st] == list(range(6))
    for s in st:
        comps = s["base_completions"]
        assert s["n"] == 4 and len(comps) == 4 and len(s["sample_f1"]) == 4 and len(s["pass_at_k"]) == 4
        assert len(set(comps)) > 1, comps  # k samples, not one repeated
        assert s["bucket"] in ("answerable", "unanswerable") and s["skipped"] is None
    ids = [s["id"] for s in st]
    answerable = read_table(out / "answerable", columns=["id"]).column("id").to_pylist()
    unanswerable = read_table(out / "unanswerable", columns=["id"]).column("id").to_pylist()
    assert sorted(answerable + unanswerable) == sorted(ids)
    for bucket in ("answerable", "unanswerable", "learnable"):
        validate_shards(out / bucket)
    summary = json.loads((out / "partition.json").read_text())
    text = json.dumps(summary)
    assert '"device": "cuda"' in text and '"dtype": "bfloat16"' in text, text[:2000]


def device_probe():
    """A trainer callback recording, at every optimiser step, where the trainer and the policy run and the CUDA
    memory used so far."""
    from transformers import TrainerCallback

    class DeviceProbe(TrainerCallback):
        def __init__(self):
            self.seen: list[dict] = []

        def on_step_end(self, args, state, control, model=None, **kwargs):
            import torch

            p = next(model.parameters())
            self.seen.append({"step": state.global_step, "args_device": str(args.device),
                              "param_device": str(p.device), "param_dtype": str(p.dtype),
                              "cuda_mem": torch.cuda.max_memory_allocated(), "bf16": bool(args.bf16)})

    return DeviceProbe()


def test_grpo_trains_on_cuda(tiny_model_dir, tmp_path_factory):
    """Two GRPO steps of 2 prompts x 2 generations through `curriculum train`'s function and the rag-rl-min-max
    recipe's GPU settings (bf16, beta 0.01: a reference model), transformers generation: the policy sits on cuda,
    loss and the toolkit's reward are logged, the curriculum order holds and a checkpoint is saved."""
    import torch

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.train import STEPS_FILE, compose_train_config, read_steps, train

    shards = tmp_path_factory.mktemp("gpu-train-shards") / "musique-min-max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=4)], schedule="min-max",
                                 K=3, out=str(shards), seed=0, tokenizer=str(tiny_model_dir)))
    out = tmp_path_factory.mktemp("gpu-train-run") / "run"
    cfg = compose_train_config("rag-rl-min-max", [
        f"model.name_or_path={tiny_model_dir}", f"data.shards={shards}", f"run.output_dir={out}",
        "batch.prompts_per_step=2", "batch.per_device_completions=2", "grpo.num_generations=2",
        "grpo.max_completion_length=16", "grpo.use_vllm=false", "grpo.bf16=true",
        "grpo.activation_checkpointing=false", "grpo.save_steps=2", "grpo.report_to=none"])
    probe = device_probe()
    torch.cuda.reset_peak_memory_stats()
    result = train(cfg, callbacks=[probe])

    assert result.global_step == 2 and math.isfinite(result.training_loss)
    assert [s["step"] for s in probe.seen] == [1, 2]
    for s in probe.seen:
        assert s["args_device"].startswith("cuda") and s["param_device"].startswith("cuda"), s
        assert s["bf16"] and s["param_dtype"] == "torch.float32" and s["cuda_mem"] > 0, s  # fp32 master weights
    logged = [h for h in result.log_history if "loss" in h]
    assert len(logged) == 2
    for h in logged:
        assert math.isfinite(h["loss"]) and math.isfinite(h["reward"])
        assert "rewards/rag_rl/mean" in h and {"rag_rl/answer", "rag_rl/citation", "rag_rl/format"} <= set(h)
        assert "kl" in h  # beta 0.01: the reference model ran too
    assert [h["curriculum/level_mean"] for h in logged] == [1.0, 3.0]
    steps = read_steps(Path(result.output_dir) / STEPS_FILE)
    assert [(s["step"], s["curriculum_index"], s["in_order"]) for s in steps] == [(1, [0, 1], True),
                                                                                    (2, [2, 3], True)]
    assert [p.name for p in result.checkpoints] == ["checkpoint-2"]
    assert (result.checkpoints[0] / "model.safetensors").exists()
    state = json.loads((result.checkpoints[0] / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and any("loss" in h for h in state["log_history"])


def test_a_dense_index_encoded_on_cuda_holds_the_cpu_vectors_and_rankings(shared_data, tmp_path):
    """`index --kind dense --device cuda`: the passages encoded on the GPU are the CPU's vectors (float32 on both,
    kept as float16), and the index opened with its query encoder on cuda ranks the indexed questions as the
    CPU-built one does."""
    import numpy as np

    pytest.importorskip("faiss", reason="the dense extra is needed: pip install 'rag-curriculum[dense]'")
    from rag_retriever import IndexConfig, build_index, load_index
    from support.tiny_model import build_tiny_encoder

    enc = build_tiny_encoder(tmp_path / "enc", shared_data)
    small = tmp_path / "musique_train.jsonl"
    small.write_text("".join(MUSIQUE_TRAIN.read_text().splitlines(keepends=True)[:40]))
    built = {}
    for device in ("cpu", "cuda"):
        out = tmp_path / device
        m = build_index(IndexConfig(dataset="musique", input=str(small), out=str(out), kind="dense",
                                    encoder=str(enc), device=device, depth=20))
        built[device] = (out, m)
        assert m["config"]["device"] == device, m["config"]  # (the setting: an encoder refuses a device it lacks)
    (cpu, m), (gpu, _) = built["cpu"], built["cuda"]
    rows, dim = m["passages"], m["dense"]["dim"]
    a = np.fromfile(cpu / "dense" / "vectors.f16", dtype=np.float16).reshape(rows, dim).astype(np.float32)
    b = np.fromfile(gpu / "dense" / "vectors.f16", dtype=np.float16).reshape(rows, dim).astype(np.float32)
    assert np.abs(a - b).max() <= 2e-3
    on_cuda, on_cpu = load_index(gpu, device="cuda"), load_index(cpu, device="cpu")
    encoder = on_cuda.searcher.encoder  # the queries' encoder: on the GPU (the ONNX export is for the CPU)
    assert encoder.runtime == "sentence-transformers" and next(encoder.model.parameters()).device.type == "cuda"
    questions = on_cpu._q()[0][:20]
    ids_gpu, _ = on_cuda.retrieve_many(questions, 5)
    ids_cpu, _ = on_cpu.retrieve_many(questions, 5)
    assert (ids_gpu[:, 0] == ids_cpu[:, 0]).sum() >= 19, (ids_gpu, ids_cpu)
