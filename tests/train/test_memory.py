"""The memory estimate per GPU that `curriculum train --dry-run` prints, and the checkpoints' disk: a model's shape
read from its config as the real model counts its parameters; the estimate and a checkpoint's size against
arithmetic written out here term by term (not the module's formulas); one verdict per layout in the dry run's
lines; the launcher configs' claims (recipes/accelerate headers, docs/training.md, README) as the estimate has them;
the per-device batch it offers fits and splits the step; each training GPU's peak recorded per process and judged
against the estimate."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from rag_curriculum.train import derive_accumulation
from rag_curriculum.train._memory import (
    GPU_GIB,
    KNOWN,
    LAUNCHERS,
    MARGIN,
    PEAK_MARGIN,
    Layout,
    PeakRecorder,
    current_layout,
    disk_need,
    estimate,
    fitting_per_device,
    judge_peak,
    memory_lines,
    model_shape,
    read_peaks,
)

ROOT = Path(__file__).resolve().parents[2]
GIB = 2**30
#: The paper's run: MuSiQue's top-level prompts (about 5k tokens in Qwen2.5's vocabulary) + 800 generated.
RUN = dict(tokens=5800, completion=800, gpu_gb=GPU_GIB)


def test_shape_from_a_config_counts_the_real_models_parameters(tiny_model_dir):
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    real = sum(p.numel() for p in model.parameters())
    shape = model_shape(str(tiny_model_dir))
    assert shape is not None and abs(shape.params - real) / real < 0.02, (shape.params, real)


def test_known_models_by_hub_id_offline():
    assert model_shape("Qwen/Qwen2.5-7B-Instruct").params == KNOWN["Qwen2.5-7B"][0]
    assert model_shape("Qwen/Qwen2.5-72B-Instruct").layers == 80
    assert model_shape("someone/unknown-model") is None


def _layout(config: str):
    (layout,) = [x for x in LAUNCHERS if x.config == config]
    return layout


def test_the_authors_layout_term_by_term():
    """Qwen2.5-7B (7.616e9 parameters, hidden 3584, 28 layers, MLP 18944, vocabulary 152064) on 7 ZeRO-2 GPUs +
    a vLLM server, 7 completions a pass of 4900 + 800 tokens, activation checkpointing, each term counted here."""
    p, h, L, i, v = 7.616e9, 3584, 28, 18944, 152064
    b, t, c, n = 7, 5700, 800, 7
    expected = {
        "weights": 2 * p,                                  # bf16 weights on every GPU
        "gradients": 2 * p / n,                            # bf16 gradients, partitioned (ZeRO-2)
        "optimizer": (4 + 4 + 4 + 4) * p / n,              # fp32 master, Adam m and v, fp32 gradient partition
        "reference model": 2 * p,                          # beta 0.01: TRL's reference model, bf16
        "activations": L * b * t * h * 2,                  # each layer's input, bf16
        "recomputed layer": 2 * (b * t * (8 * h + 4 * i) * 2),  # the layer recomputed: its forward and backward
        "logits": b * c * v * 4 * 2,                       # fp32 logits of the completion and their log-softmax
        "DeepSpeed buckets": (500_000_000 + 500_000_000) * 2,  # reduce and all-gather buckets (DeepSpeed defaults)
        "CUDA context": 1.0 * GIB,
    }
    e = estimate(model_shape("Qwen/Qwen2.5-7B-Instruct"), _layout("zero2-7gpu.yaml"), per_device=b, tokens=t,
                 completion=c, gpu_gb=GPU_GIB)
    assert set(e.parts) == set(expected)
    for key, value in expected.items():
        assert e.parts[key] == pytest.approx(value / GIB, rel=1e-9), key
    total = sum(expected.values()) / GIB
    assert e.total_gb == pytest.approx(total) and 78 < total < 80  # the independent count: 75 to 79 GiB
    # tight: within an 80 GB H100's 79.6 GiB, not with the 10% margin; one verdict, stated with its margin
    assert (e.verdict, e.fits, MARGIN) == ("tight", False, 0.10)
    assert "tight" in e.describe() and "10% margin" in e.describe()
    # overlap_comm doubles the gradient bucket; another bucket size is counted as given
    big = Layout("x", 7, 2, False, "server", reduce_bucket=200_000_000, allgather_bucket=100_000_000,
                 overlap_comm=True)
    assert estimate(model_shape("Qwen/Qwen2.5-7B-Instruct"), big, per_device=b, tokens=t, completion=c,
                    gpu_gb=GPU_GIB).parts["DeepSpeed buckets"] == pytest.approx((2 * 2e8 + 1e8) * 2 / GIB)


def test_the_launchers_claims_match_the_estimate():
    seven, small = model_shape("Qwen/Qwen2.5-7B-Instruct"), model_shape("Qwen/Qwen2.5-1.5B-Instruct")
    # single-gpu.yaml: a 7B policy with fp32 master weights and Adam does not fit one 80 GB GPU; 1.5B does
    assert estimate(seven, _layout("single-gpu.yaml"), per_device=7, **RUN).verdict == "does NOT fit"
    assert estimate(small, _layout("single-gpu.yaml"), per_device=7, **RUN).fits
    # zero2-offload-1gpu.yaml: 7B does not fit at the recipes' 7; at 2 a pass it is tight (the pre-flight decides)
    offload = _layout("zero2-offload-1gpu.yaml")
    assert estimate(seven, offload, per_device=7, **RUN).verdict == "does NOT fit"
    assert estimate(seven, offload, per_device=2, **RUN).verdict == "tight"
    # zero2-7gpu.yaml (the authors' 7 + 1): 7 per device is tight, 3 fits with the margin
    authors = _layout("zero2-7gpu.yaml")
    assert estimate(seven, authors, per_device=7, **RUN).verdict == "tight"
    assert fitting_per_device(seven, authors, [1, 2, 3, 6, 7], **RUN) == 3
    # zero2-multinode.yaml (14 processes): the recipes' 7 fits
    assert estimate(seven, _layout("zero2-multinode.yaml"), per_device=7, **RUN).fits
    for header, words in (("single-gpu.yaml", "does not fit one 80 GB GPU"),
                          ("zero2-offload-1gpu.yaml", "batch.per_device_completions=2 is tight"),
                          ("zero2-7gpu.yaml", "tight at the recipes' 7"),
                          ("zero2-multinode.yaml", "fits an 80 GB GPU")):
        assert words in (ROOT / "recipes" / "accelerate" / header).read_text(), header
    assert "batch.per_device_completions=2" in (ROOT / "docs" / "training.md").read_text()
    assert "one GPU or 7 + 1" not in (ROOT / "README.md").read_text()
    # a plain `curriculum train` of a 7B paper recipe is one process on one GPU: no header claims it fits
    for recipe in (ROOT / "recipes" / "train").glob("rag-rl-*.yaml"):
        assert "1 GPU, vLLM colocated" not in recipe.read_text(), recipe.name


def test_an_offered_per_device_batch_splits_the_step():
    best = fitting_per_device(model_shape("Qwen/Qwen2.5-7B-Instruct"), _layout("zero2-7gpu.yaml"),
                              [1, 2, 3, 6, 7], **RUN)
    assert derive_accumulation(prompts_per_step=42, num_generations=7, per_device=best, num_processes=7) == 294 // (7 * best)


def _run(processes: int, mode: str = "server", per_device: int = 7):
    cfg = SimpleNamespace(model=SimpleNamespace(name_or_path="Qwen/Qwen2.5-7B-Instruct", dtype="float32"),
                          batch=SimpleNamespace(prompts_per_step=42))
    args = SimpleNamespace(per_device_train_batch_size=per_device, num_generations=7, max_completion_length=800,
                           beta=0.01, vllm_gpu_memory_utilization=0.3, activation_checkpointing=True,
                           use_vllm=True, vllm_mode=mode)
    return cfg, args


def test_the_dry_run_gives_one_verdict_per_layout(monkeypatch):
    """A dry run of 7 processes (vLLM server) outside a launcher: no line calls a layout without DeepSpeed "this
    run" beside the launcher config that is; the 7-process config is marked as the run's, once."""
    for key in ("ACCELERATE_USE_DEEPSPEED", "LOCAL_RANK", "ACCELERATE_DEEPSPEED_CONFIG_FILE"):
        monkeypatch.delenv(key, raising=False)
    cfg, args = _run(7)
    lines = memory_lines(cfg, args, 7, 4900)
    assert "10%" in lines[0]
    body = lines[1:]
    assert len(body) == len(LAUNCHERS)  # one line a launcher config, no other layout
    assert not any(line.strip().startswith("this run") for line in body)
    (ours,) = [line for line in body if "<- this run" in line]
    assert "[zero2-7gpu.yaml]" in ours and "tight" in ours and "batch.per_device_completions=3 fits" in ours
    assert "294 completions a step kept" in ours
    # 5 processes match no config: its layout (ZeRO-2, as every multi-GPU config) gets a line of its own, once
    lines = memory_lines(cfg, args, 5, 4900)[1:]
    assert len(lines) == len(LAUNCHERS) + 1 and lines[0].startswith("  5 processes, ZeRO-2, vLLM server")
    # launched by accelerate with the authors' config: that line is this run's, and no second line repeats it
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    lines = memory_lines(cfg, args, 7, 4900)[1:]
    assert len(lines) == len(LAUNCHERS)
    assert [line for line in lines if "<- this run" in line][0].startswith("  7 GPUs, ZeRO-2 + 1 vLLM server")


def test_the_offload_layout_is_read_from_its_deepspeed_file(monkeypatch, tmp_path):
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", str(ROOT / "recipes/accelerate/zero2-offload-1gpu.json"))
    layout = current_layout(1, "colocate")
    assert layout.same(_layout("zero2-offload-1gpu.yaml"))
    other = tmp_path / "ds.json"
    other.write_text(json.dumps({"zero_optimization": {"stage": 2, "reduce_bucket_size": 2e8,
                                                       "allgather_bucket_size": "auto", "overlap_comm": True}}))
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", str(other))
    layout = current_layout(7, "server")
    assert (layout.zero, layout.offload, layout.reduce_bucket, layout.allgather_bucket, layout.overlap_comm) == (
        2, False, 200_000_000, 500_000_000, True)


def test_a_checkpoint_and_the_disk_the_recipe_needs():
    """A ZeRO-2 checkpoint of 7B: the bf16 weights twice (model.safetensors and DeepSpeed's module states) and the
    fp32 master weights with Adam's two moments, 16 bytes a parameter; the recipes save every 20 of 119 steps and
    keep 3, so 4 are on the disk at once (the next one is written before the oldest goes), and the final model."""
    p = 7.616e9
    shape = model_shape("Qwen/Qwen2.5-7B-Instruct")
    args = SimpleNamespace(save_strategy="steps", save_steps=20, save_total_limit=3, num_train_epochs=1)
    need = disk_need(shape, _layout("zero2-7gpu.yaml"), args, save_final=True, total_steps=119)
    assert need.each_gib == pytest.approx((2 * p + 2 * p + 12 * p) / GIB)
    assert 120e9 < need.each_gib * GIB < 123e9  # "about 120 GB" (decimal)
    assert need.kept == 4 and need.final_gib == pytest.approx(2 * p / GIB)
    assert need.total_gib == pytest.approx((4 * 16 * p + 2 * p) / GIB)  # about 0.5 TB
    # without DeepSpeed (fp32 weights): the weights and Adam's two moments in fp32, 12 bytes a parameter
    plain = disk_need(shape, _layout("single-gpu.yaml"), args, save_final=False, total_steps=119)
    assert plain.each_gib == pytest.approx(12 * p / GIB) and plain.final_gib == 0
    # the pre-flight: 2 steps, a save at step 2 (and at its last, 3, after resuming), 1 kept: 2 at once
    pre = SimpleNamespace(save_strategy="steps", save_steps=2, save_total_limit=1)
    assert disk_need(shape, _layout("zero2-7gpu.yaml"), pre, save_final=False, total_steps=3).kept == 2


def test_the_peak_is_judged_against_the_estimate_and_the_gpu():
    ok, line = judge_peak(70.0, 78.8, GPU_GIB)
    assert all(ok.values()), line
    over, line = judge_peak(80.0, 78.8, 90.0)  # over the estimate: the estimate undercounts
    assert over == {"peak memory within the estimate": False, "peak memory leaves 5% of the GPU free": True}
    assert "undercounts" in line
    near, line = judge_peak(77.0, 78.8, GPU_GIB)  # within the estimate, but within 5% of the GPU
    assert not near["peak memory leaves 5% of the GPU free"] and 77.0 > GPU_GIB * (1 - PEAK_MARGIN)


def test_each_training_process_records_its_peak(tmp_path):
    """The callback (PeakRecorder) writes each process's highest peak (torch's reserved peak plus what the GPU
    holds outside the allocator) to gpu_memory/rank-N.json, from a probe standing in for CUDA; nothing without CUDA."""
    readings = iter([{"device": 0.0, "max_allocated_gib": 50.0, "max_reserved_gib": 60.0, "total_gib": 79.6,
                      "outside_allocator_gib": 1.5},
                     {"device": 0.0, "max_allocated_gib": 40.0, "max_reserved_gib": 55.0, "total_gib": 79.6,
                      "outside_allocator_gib": 1.5}])
    callback = PeakRecorder(tmp_path, probe=lambda: next(readings))
    for step in (1, 2):
        callback.on_step_end(SimpleNamespace(process_index=3, local_process_index=3),
                             SimpleNamespace(global_step=step), None)
    (peak,) = read_peaks(tmp_path)
    assert (peak["rank"], peak["step"], peak["peak_gib"], peak["max_reserved_gib"]) == (3, 1, 61.5, 60.0)
    # resumed in the same folder: the earlier peak stands until this run's is higher
    later = PeakRecorder(tmp_path, probe=lambda: {"device": 0.0, "max_allocated_gib": 1.0, "max_reserved_gib": 2.0,
                                                  "total_gib": 79.6, "outside_allocator_gib": 1.0})
    later.on_step_end(SimpleNamespace(process_index=3), SimpleNamespace(global_step=3), None)
    assert read_peaks(tmp_path)[0]["peak_gib"] == 61.5
    none = PeakRecorder(tmp_path / "cpu", probe=lambda: None)
    none.on_step_end(SimpleNamespace(process_index=0), SimpleNamespace(global_step=1), None)
    assert read_peaks(tmp_path / "cpu") == []
