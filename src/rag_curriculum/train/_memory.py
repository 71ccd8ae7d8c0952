"""An estimate of a GRPO run's memory per GPU, before any model loads: the policy's weights, gradients and Adam
state (as DeepSpeed ZeRO shards or offloads them), TRL's reference model (``beta > 0``), vLLM's share of a GPU it
is colocated on, and the activations of one pass (gradient checkpointing: each layer's input, one layer recomputed,
the completion's logits in fp32). ``curriculum train --dry-run`` prints it for the run's layout and for the
launcher configs in ``recipes/accelerate``, with the per-device batch that fits each.

An estimate (about +-20%: allocator fragmentation, CUDA context, NCCL buffers and DeepSpeed's buckets are one
flat allowance), meant to tell a layout that cannot fit from one that can before the hours are spent; it has not
been compared with a GPU's measurement here.

>>> shape = model_shape("Qwen/Qwen2.5-7B-Instruct")
>>> round(shape.params / 1e9, 2)
7.62
>>> e = estimate(shape, Layout("7 GPUs, ZeRO-2 + 1 vLLM server", processes=7, zero=2, vllm="server"),
...              per_device=7, tokens=5700, completion=800, gpu_gb=80)
>>> e.fits, round(e.total_gb)
(True, 71)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GB = 1024**3
#: The CUDA context, NCCL and allocator slack: a flat allowance per GPU.
OVERHEAD_GB = 3.0


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs of a model: parameters, hidden size, layers, intermediate size, vocabulary."""

    name: str
    params: float
    hidden: int
    layers: int
    intermediate: int
    vocab: int


#: Qwen2.5 Instruct models (their config.json), for a Hub id whose config is not at hand offline.
KNOWN = {
    "Qwen2.5-0.5B": (0.494e9, 896, 24, 4864, 151936),
    "Qwen2.5-1.5B": (1.544e9, 1536, 28, 8960, 151936),
    "Qwen2.5-3B": (3.086e9, 2048, 36, 11008, 151936),
    "Qwen2.5-7B": (7.616e9, 3584, 28, 18944, 152064),
    "Qwen2.5-14B": (14.77e9, 5120, 48, 13824, 152064),
    "Qwen2.5-32B": (32.76e9, 5120, 64, 27648, 152064),
    "Qwen2.5-72B": (72.71e9, 8192, 80, 29568, 152064),
}


def _from_config(name: str, c: dict[str, Any]) -> ModelShape | None:
    c = c.get("text_config") or c
    try:
        h, n, inter, v = int(c["hidden_size"]), int(c["num_hidden_layers"]), int(c["intermediate_size"]), int(
            c["vocab_size"])
    except (KeyError, TypeError, ValueError):
        return None
    heads = int(c.get("num_attention_heads") or 1)
    head_dim = int(c.get("head_dim") or h // heads)
    kv = int(c.get("num_key_value_heads") or heads) * head_dim
    per_layer = h * heads * head_dim * 2 + 2 * h * kv + 3 * h * inter + 2 * h
    embed = v * h * (1 if c.get("tie_word_embeddings") else 2)
    return ModelShape(name, float(n * per_layer + embed + h), h, n, inter, v)


def model_shape(model: str) -> ModelShape | None:
    """The shape of ``model``: from its ``config.json`` (a local directory, or the Hugging Face cache), else from
    :data:`KNOWN` by name; None when neither has it."""
    path = Path(model).expanduser()
    config = path / "config.json" if path.is_dir() else None
    if config is None:
        try:
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(model, "config.json")
            config = Path(found) if isinstance(found, str) else None
        except Exception:  # noqa: BLE001 - not a Hub id, or no huggingface_hub: the table below
            config = None
    if config is not None and config.is_file():
        shape = _from_config(model, json.loads(config.read_text(encoding="utf-8")))
        if shape is not None:
            return shape
    base = Path(model).name.removesuffix("-Instruct")
    if base in KNOWN:
        return ModelShape(model, *KNOWN[base])
    return None


@dataclass(frozen=True)
class Layout:
    """Where a run's processes are: training processes, DeepSpeed's ZeRO stage (0: none), the optimizer on the CPU,
    and vLLM colocated on each training GPU or a separate server (``colocate`` | ``server`` | ``none``)."""

    name: str
    processes: int = 1
    zero: int = 0
    offload: bool = False
    vllm: str = "colocate"
    config: str | None = None  # the launcher config in recipes/accelerate


#: The launcher configs in recipes/accelerate, as layouts.
LAUNCHERS = (
    Layout("1 GPU", 1, 0, False, "colocate", "single-gpu.yaml"),
    Layout("1 GPU, ZeRO-2, optimizer on the CPU", 1, 2, True, "colocate", "zero2-offload-1gpu.yaml"),
    Layout("7 GPUs, ZeRO-2 + 1 vLLM server (the authors')", 7, 2, False, "server", "zero2-7gpu.yaml"),
    Layout("8 GPUs, ZeRO-2, vLLM colocated", 8, 2, False, "colocate", "zero2-8gpu.yaml"),
)


@dataclass
class Estimate:
    """GB per training GPU, by part; ``fits`` against ``gpu_gb``; ``host_gb``: CPU memory an offload needs."""

    layout: Layout
    per_device: int
    gpu_gb: float
    parts: dict[str, float] = field(default_factory=dict)
    host_gb: float = 0.0

    @property
    def total_gb(self) -> float:
        return sum(self.parts.values())

    @property
    def fits(self) -> bool:
        return self.total_gb <= self.gpu_gb

    def describe(self) -> str:
        parts = ", ".join(f"{k} {v:.0f}" for k, v in self.parts.items())
        host = f"; CPU memory {self.host_gb:.0f} GB" if self.host_gb else ""
        return (f"{self.total_gb:.0f} GB per GPU of {self.gpu_gb:.0f} ({parts}){host}: "
                f"{'fits' if self.fits else 'does NOT fit'}")


def estimate(shape: ModelShape, layout: Layout, *, per_device: int, tokens: int, completion: int, gpu_gb: float,
             weight_bytes: int = 4, beta: float = 0.01, vllm_share: float = 0.3, checkpointing: bool = True
             ) -> Estimate:
    """Memory per training GPU for ``shape`` in ``layout`` with ``per_device`` completions a pass of ``tokens``
    (prompt plus completion) each, ``completion`` of them scored. ``weight_bytes``: the weights' dtype as loaded
    (4: fp32 master weights, the recipes' ``model.dtype``; 2: bf16)."""
    p, n = shape.params, max(layout.processes, 1)
    parts: dict[str, float] = {}
    host = 0.0
    if layout.zero:  # DeepSpeed bf16: bf16 weights on every GPU; fp32 master, Adam moments and grads sharded
        state = 4 * p + 8 * p + 4 * p  # fp32 master weights, Adam's two moments, fp32 gradient partition
        parts["weights"] = (2 * p / n if layout.zero == 3 else 2 * p) / GB
        parts["gradients"] = 2 * p / (n if layout.zero >= 2 else 1) / GB
        if layout.offload:
            host = state / n / GB
        else:
            parts["optimizer"] = state / n / GB
        ref = (2 * p / n if layout.zero == 3 else 2 * p) if beta else 0.0
    else:  # plain PyTorch: the weights in their dtype, gradients alike, Adam's moments alike
        parts["weights"] = weight_bytes * p / GB
        parts["gradients"] = weight_bytes * p / GB
        parts["optimizer"] = 2 * weight_bytes * p / GB
        ref = weight_bytes * p if beta else 0.0
    if ref:
        parts["reference model"] = ref / GB
    if layout.vllm == "colocate":
        parts["vLLM share"] = vllm_share * gpu_gb
    b = per_device
    layer = b * tokens * (8 * shape.hidden + 4 * shape.intermediate) * 2  # one layer's activations, bf16
    saved = shape.layers * b * tokens * shape.hidden * 2 if checkpointing else shape.layers * layer
    one_layer = layer if checkpointing else 0  # the layer being recomputed
    logits = b * completion * shape.vocab * 4 * 2  # fp32 logits and their log-softmax
    parts["activations"] = (saved + one_layer + logits) / GB
    parts["overhead"] = OVERHEAD_GB
    return Estimate(layout, per_device, gpu_gb, parts, host)


def fitting_per_device(shape: ModelShape, layout: Layout, choices: list[int], **kw: Any) -> int | None:
    """The largest of ``choices`` (per-device batches) whose estimate fits, or None."""
    fit = [d for d in choices if estimate(shape, layout, per_device=d, **kw).fits]
    return max(fit) if fit else None


def current_layout(processes: int, vllm_mode: str, use_vllm: bool = True) -> Layout:
    """This process's layout, from what ``accelerate launch`` sets in the environment (DeepSpeed's stage and
    offload) and the run's processes and vLLM mode."""
    deepspeed = os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() in ("1", "true")
    zero = int(os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") or 0) if deepspeed else 0
    offload = os.environ.get("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "none").lower() == "cpu"
    vllm = vllm_mode if use_vllm else "none"
    name = f"{processes} process{'es' if processes > 1 else ''}" + (f", ZeRO-{zero}" if zero else "") + (
        ", optimizer on the CPU" if offload else "") + f", vLLM {vllm}"
    return Layout(f"this run ({name})", processes, zero, offload, vllm)


def gpu_memory_gb(default: float = 80.0) -> tuple[float, str]:
    """The first GPU's memory in GB and where it came from (the GPU, else ``default``: an 80 GB A100 / H100)."""
    try:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            return props.total_memory / GB, props.name
    except Exception:  # noqa: BLE001 - no torch or no driver: the default
        pass
    return default, "no GPU here: an 80 GB GPU assumed"


#: The prompt length assumed where the shards' are unknown (MuSiQue's top level reaches about 5k in Qwen2.5's tokens).
ASSUMED_PROMPT = 5000


def _settings(cfg: Any, args: Any, gpu_gb: float, longest_prompt: int | None) -> dict[str, Any]:
    """:func:`estimate`'s keyword arguments from a run's config and its bound ``GRPOConfig``."""
    completion = int(getattr(args, "max_completion_length", 0) or 0)
    return {"tokens": (longest_prompt or ASSUMED_PROMPT) + completion, "completion": completion, "gpu_gb": gpu_gb,
            "weight_bytes": 2 if str(cfg.model.dtype) in ("bfloat16", "float16") else 4,
            "beta": float(getattr(args, "beta", 0.0) or 0.0),
            "vllm_share": float(getattr(args, "vllm_gpu_memory_utilization", 0.3) or 0.0),
            "checkpointing": bool(getattr(args, "activation_checkpointing", False)
                                  or getattr(args, "gradient_checkpointing", False))}


def _choices(prompts: int | None, generations: int, processes: int, per_device: int) -> list[int]:
    """Per-device batches that split the step over ``processes`` (the recipe's when prompts per step is unset)."""
    if not prompts:
        return [per_device]
    completions = prompts * generations
    return [d for d in range(1, completions + 1) if completions % (d * processes) == 0]


def memory_lines(cfg: Any, args: Any, num_processes: int, longest_prompt: int | None) -> list[str]:
    """What ``--dry-run`` prints: the estimate for this run's layout and for each launcher config, with the largest
    per-device batch that fits where the recipe's does not."""
    model = str(cfg.model.name_or_path)
    shape = model_shape(model)
    if shape is None:
        return [f"memory per GPU: no estimate ({model}'s config.json is not at hand: a local directory or the Hub "
                "cache has it)"]
    gpu_gb, where = gpu_memory_gb()
    kw = _settings(cfg, args, gpu_gb, longest_prompt)
    completion, prompt = kw["completion"], longest_prompt or ASSUMED_PROMPT
    per_device = int(args.per_device_train_batch_size)
    prompts, g = cfg.batch.prompts_per_step, int(args.num_generations)
    lines = [f"memory per GPU, estimated ({where}; {shape.params / 1e9:.1f}B parameters, "
             f"{per_device} completions a pass of up to {prompt} + {completion} tokens"
             f"{'' if longest_prompt else f' (prompt length unknown: {ASSUMED_PROMPT} assumed)'}):"]
    here = current_layout(num_processes, str(getattr(args, "vllm_mode", "colocate")), bool(args.use_vllm))
    for layout in (here, *LAUNCHERS):
        e = estimate(shape, layout, per_device=per_device, **kw)
        name = layout.name + (f" [{layout.config}]" if layout.config else "")
        line = f"  {name}: {e.describe()}"
        splits = _choices(prompts, g, layout.processes, per_device)
        if not splits:
            line += f"; {prompts} prompts x {g} do not split over {layout.processes} processes (the batch check)"
        elif not e.fits:
            best = fitting_per_device(shape, layout, [d for d in splits if d < per_device], **kw)
            line += (f"; batch.per_device_completions={best} fits "
                     f"({estimate(shape, layout, per_device=best, **kw).total_gb:.0f} GB)" if best else
                     "; no per-device batch fits")
        lines.append(line)
    return lines


def check_memory(cfg: Any, args: Any, num_processes: int, longest_prompt: int | None) -> Estimate | None:
    """This run's estimate on the GPU it runs on (None without a GPU or a known model); a warning when it does not
    fit, naming the launcher configs and per-device batches that do (an estimate: the run goes on)."""
    import logging

    gpu_gb, where = gpu_memory_gb(default=0.0)
    shape = model_shape(str(cfg.model.name_or_path))
    if not gpu_gb or shape is None:
        return None
    e = estimate(shape, current_layout(num_processes, str(getattr(args, "vllm_mode", "colocate")),
                                       bool(args.use_vllm)),
                 per_device=int(args.per_device_train_batch_size), **_settings(cfg, args, gpu_gb, longest_prompt))
    log = logging.getLogger("rag_curriculum.train")
    if e.fits:
        log.info("memory per GPU (estimate, %s): %s", where, e.describe())
    else:
        log.warning("memory per GPU (estimate, %s): %s; `curriculum train --dry-run` lists the layouts that fit",
                    where, e.describe())
    return e
