"""An estimate of a GRPO run's memory per GPU, before any model loads: the policy's weights, gradients and Adam
state (as DeepSpeed ZeRO shards or offloads them), TRL's reference model (``beta > 0``), vLLM's share of a GPU it
is colocated on, the activations of one pass (gradient checkpointing: each layer's input; the layer being recomputed,
its forward and its backward; the completion's logits in fp32), DeepSpeed's gradient and all-gather buckets (their
sizes from the ZeRO config, DeepSpeed's defaults where it sets none) and the CUDA context. ``curriculum train
--dry-run`` prints it for the launcher configs in ``recipes/accelerate`` (one verdict each), with the per-device
batch that fits each, and the size of a checkpoint and the disk the run's checkpoints need.

The margin: a layout **fits** when its estimate plus :data:`MARGIN` (10%, for the allocator's fragmentation and
what is not counted) is within the GPU; **tight** when only the estimate is; else it does NOT fit. The GPU
pre-flight (``scripts/gpu_paper_run.sh``) measures the peak of the run's longest rows and compares it with this.

>>> shape = model_shape("Qwen/Qwen2.5-7B-Instruct")
>>> round(shape.params / 1e9, 2)
7.62
>>> e = estimate(shape, Layout("7 GPUs, ZeRO-2 + 1 vLLM server", processes=7, zero=2, vllm="server"),
...              per_device=7, tokens=5700, completion=800, gpu_gb=GPU_GIB)
>>> round(e.total_gb), e.verdict
(79, 'tight')
>>> round(checkpoint_gib(shape, Layout("7 GPUs", processes=7, zero=2)))  # GiB: 16 bytes a parameter
113
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import recipes_root
from ..errors import ConfigError

GB = 1024**3  # the estimate's unit: GiB (the "GB" torch and nvidia-smi print)
#: A layout fits when its estimate plus this share of it is within the GPU (allocator fragmentation, buffers not
#: counted); within the GPU without it, it is "tight" and the pre-flight's measured peak decides.
MARGIN = 0.10
#: The pre-flight's headroom: the peak measured on the run's longest rows must leave this share of the GPU free.
PEAK_MARGIN = 0.05
#: The CUDA context with cuBLAS's workspace and NCCL's buffers, per process (outside torch's allocator).
CONTEXT_GB = 1.0
#: An 80 GB H100 as torch reports it (81,559 MiB): the GPU assumed where none is at hand.
GPU_GIB = 81559 / 1024
#: DeepSpeed's own defaults (0.19.8) for the ZeRO buckets a config leaves unset, in elements.
DS_REDUCE_BUCKET = 500_000_000
DS_ALLGATHER_BUCKET = 500_000_000


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
    vLLM colocated on each training GPU or a separate server (``colocate`` | ``server`` | ``none``), and ZeRO's
    buckets (elements; ``overlap_comm`` doubles the gradient bucket)."""

    name: str
    processes: int = 1
    zero: int = 0
    offload: bool = False
    vllm: str = "colocate"
    config: str | None = None  # the launcher config in recipes/accelerate
    reduce_bucket: int = DS_REDUCE_BUCKET
    allgather_bucket: int = DS_ALLGATHER_BUCKET
    overlap_comm: bool = False

    def same(self, other: Layout) -> bool:
        """The same processes, ZeRO stage, offload, vLLM mode and buckets (whatever the names)."""
        keys = ("processes", "zero", "offload", "vllm", "reduce_bucket", "allgather_bucket", "overlap_comm")
        return all(getattr(self, k) == getattr(other, k) for k in keys)


#: The launcher configs in recipes/accelerate, as layouts (tests/train/test_deepspeed_configs.py checks each against
#: its file and against the DeepSpeed engine built from it).
LAUNCHERS = (
    Layout("1 GPU", 1, 0, False, "colocate", "single-gpu.yaml"),
    Layout("1 GPU, ZeRO-2, optimizer on the CPU", 1, 2, True, "colocate", "zero2-offload-1gpu.yaml"),
    Layout("7 GPUs, ZeRO-2 + 1 vLLM server (the authors')", 7, 2, False, "server", "zero2-7gpu.yaml"),
    Layout("8 GPUs, ZeRO-2, vLLM colocated", 8, 2, False, "colocate", "zero2-8gpu.yaml"),
    Layout("2 nodes x 7 GPUs, ZeRO-2 + 1 vLLM server", 14, 2, False, "server", "zero2-multinode.yaml"),
)


@dataclass
class Estimate:
    """GiB per training GPU, by part; the verdict against ``gpu_gb`` with :data:`MARGIN`; ``host_gb``: the CPU
    memory an offload needs."""

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
        """Within the GPU with the margin."""
        return self.total_gb * (1 + MARGIN) <= self.gpu_gb

    @property
    def verdict(self) -> str:
        """``fits`` (with the margin), ``tight`` (within the GPU, not with the margin) or ``does NOT fit``."""
        return "fits" if self.fits else "tight" if self.total_gb <= self.gpu_gb else "does NOT fit"

    def describe(self) -> str:
        parts = ", ".join(f"{k} {v:.1f}" for k, v in self.parts.items())
        host = f"; CPU memory {self.host_gb:.0f} GiB" if self.host_gb else ""
        verdict = {"fits": "fits", "does NOT fit": "does NOT fit",
                   "tight": f"tight (fits, but not with the {MARGIN:.0%} margin: the pre-flight's measured peak "
                            "decides)"}[self.verdict]
        return (f"{self.total_gb:.0f} GiB per GPU of {self.gpu_gb:.0f}, {self.total_gb * (1 + MARGIN):.0f} with "
                f"the margin ({parts}){host}: {verdict}")

    def to_dict(self) -> dict[str, Any]:
        """What ``train_plan.json`` records (``memory_estimate``) and the pre-flight compares its peak with."""
        return {"layout": self.layout.name, "config": self.layout.config, "per_device": self.per_device,
                "total_gib": round(self.total_gb, 2), "gpu_gib": round(self.gpu_gb, 2), "margin": MARGIN,
                "verdict": self.verdict, "parts_gib": {k: round(v, 3) for k, v in self.parts.items()},
                "host_gib": round(self.host_gb, 2)}


def estimate(shape: ModelShape, layout: Layout, *, per_device: int, tokens: int, completion: int, gpu_gb: float,
             weight_bytes: int = 4, beta: float = 0.01, vllm_share: float = 0.3, checkpointing: bool = True
             ) -> Estimate:
    """Memory per training GPU (GiB) for ``shape`` in ``layout`` with ``per_device`` completions a pass of
    ``tokens`` (prompt plus completion) each, ``completion`` of them scored. ``weight_bytes``: the weights' dtype
    as loaded (4: fp32 master weights, the recipes' ``model.dtype``; 2: bf16)."""
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
    if checkpointing:  # each layer's input kept; one layer recomputed in the backward, then its backward
        parts["activations"] = shape.layers * b * tokens * shape.hidden * 2 / GB
        parts["recomputed layer"] = 2 * layer / GB
    else:  # every layer's activations kept, and the last one's backward
        parts["activations"] = (shape.layers + 1) * layer / GB
    parts["logits"] = b * completion * shape.vocab * 4 * 2 / GB  # fp32 logits and their log-softmax
    if layout.zero:  # the gradient bucket (two with overlap_comm) and the all-gather bucket, bf16
        parts["DeepSpeed buckets"] = ((2 if layout.overlap_comm else 1) * layout.reduce_bucket
                                      + layout.allgather_bucket) * 2 / GB
    parts["CUDA context"] = CONTEXT_GB
    return Estimate(layout, per_device, gpu_gb, parts, host)


def fitting_per_device(shape: ModelShape, layout: Layout, choices: list[int], **kw: Any) -> int | None:
    """The largest of ``choices`` (per-device batches) whose estimate fits with the margin, or None."""
    fit = [d for d in choices if estimate(shape, layout, per_device=d, **kw).fits]
    return max(fit) if fit else None


def checkpoint_parts(shape: ModelShape, layout: Layout, weight_bytes: int = 4) -> dict[str, float]:
    """What one ``checkpoint-N/`` holds, in GiB. Under DeepSpeed (bf16): the model's bf16 weights
    (``model.safetensors``), DeepSpeed's module states (the bf16 weights again) and ZeRO's fp32 master weights with
    Adam's two moments (every rank's partition); without it, the weights and Adam's two moments in the weights'
    dtype. The tokenizer, scheduler and RNG states are small."""
    p = shape.params
    if layout.zero:
        return {"model weights (bf16)": 2 * p / GB, "DeepSpeed's module states (bf16)": 2 * p / GB,
                "fp32 master weights and Adam's moments": 12 * p / GB}
    return {"model weights": weight_bytes * p / GB, "Adam's moments": 2 * weight_bytes * p / GB}


def checkpoint_gib(shape: ModelShape, layout: Layout, weight_bytes: int = 4) -> float:
    """One checkpoint's size in GiB (:func:`checkpoint_parts`)."""
    return sum(checkpoint_parts(shape, layout, weight_bytes).values())


@dataclass(frozen=True)
class DiskNeed:
    """The disk a run's checkpoints take at their most: ``kept`` checkpoints of ``each_gib`` at once (the limit,
    plus the one being written before the oldest is removed) and the final model."""

    each_gib: float
    kept: int
    final_gib: float
    layout: str
    parts: dict[str, float] = field(default_factory=dict)
    """One checkpoint's parts, GiB (:func:`checkpoint_parts`)."""

    @property
    def total_gib(self) -> float:
        return self.kept * self.each_gib + self.final_gib


def disk_need(shape: ModelShape, layout: Layout, args: Any, *, save_final: bool, weight_bytes: int = 4,
              total_steps: int | None = None) -> DiskNeed:
    """The most disk the run's checkpoints (``save_steps`` / ``save_total_limit`` of a bound ``GRPOConfig``) and
    final model take at once."""
    strategy = str(getattr(getattr(args, "save_strategy", "steps"), "value", getattr(args, "save_strategy", "steps")))
    each = checkpoint_gib(shape, layout, weight_bytes)
    writes = 0
    if strategy == "steps":
        every = getattr(args, "save_steps", 500) or 500
        steps = total_steps if total_steps is not None else 0
        every = int(every * steps) if isinstance(every, float) and every < 1 else int(every)
        every = max(every, 1)  # transformers saves every save_steps, and at the last step
        writes = steps // every + (1 if steps % every else 0) if steps else 1
    elif strategy in ("epoch", "best"):
        writes = max(int(getattr(args, "num_train_epochs", 1) or 1), 1)
    limit = getattr(args, "save_total_limit", None)
    kept = min(writes, limit + 1) if limit else writes
    final = (2 if layout.zero else weight_bytes) * shape.params / GB if save_final else 0.0
    return DiskNeed(each, kept, final, layout.name, checkpoint_parts(shape, layout, weight_bytes))


def free_gib(path: str | Path) -> float:
    """Free space (GiB) on the filesystem that holds ``path`` (its nearest existing parent)."""
    here = Path(path).expanduser().resolve()
    while not here.exists() and here != here.parent:
        here = here.parent
    return shutil.disk_usage(here).free / GB


def _zero_file(path: str) -> dict[str, Any]:
    """A DeepSpeed JSON's ZeRO settings (``deepspeed_config_file`` of an accelerate config)."""
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    zero = config.get("zero_optimization") or {}

    def number(key: str, default: int) -> int:
        value = zero.get(key, default)
        return int(value) if isinstance(value, int | float) else default  # "auto": DeepSpeed's default

    stage = zero.get("stage", 0)
    return {"zero": int(stage) if isinstance(stage, int | float) else 0,
            "offload": str((zero.get("offload_optimizer") or {}).get("device", "none")).lower() == "cpu",
            "reduce_bucket": number("reduce_bucket_size", DS_REDUCE_BUCKET),
            "allgather_bucket": number("allgather_bucket_size", DS_ALLGATHER_BUCKET),
            "overlap_comm": bool(zero.get("overlap_comm", False))}


def resolve_deepspeed_file() -> str | None:
    """accelerate's ``deepspeed_config_file`` (``ACCELERATE_DEEPSPEED_CONFIG_FILE``) as a file that is there. The
    launcher configs name theirs from a checkout's root (``recipes/accelerate/NAME.json``); launched from elsewhere
    (an installed wheel), the shipped file is taken and the environment set to it, so accelerate reads the same
    one. A :class:`~rag_curriculum.errors.ConfigError` when it is nowhere."""
    value = os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")
    if not value or Path(value).is_file():
        return value
    parts = Path(value).parts
    if parts[:1] == ("recipes",):
        found = recipes_root().joinpath(*parts[1:])
        if found.is_file():
            os.environ["ACCELERATE_DEEPSPEED_CONFIG_FILE"] = str(found)
            return str(found)
    raise ConfigError(f"accelerate's deepspeed_config_file={value} is not there (from {os.getcwd()})",
                      hint="launch from the checkout's root, or give accelerate launch --deepspeed_config_file PATH")


def current_layout(processes: int, vllm_mode: str, use_vllm: bool = True) -> Layout:
    """This process's layout, from what ``accelerate launch`` sets in the environment (DeepSpeed's stage and
    offload, or the ``deepspeed_config_file`` they are in) and the run's processes and vLLM mode."""
    deepspeed = os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() in ("1", "true")
    zero: dict[str, Any] = {}
    if deepspeed and os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE"):
        zero = _zero_file(os.environ["ACCELERATE_DEEPSPEED_CONFIG_FILE"])
    elif deepspeed:
        zero = {"zero": int(os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") or 0),
                "offload": os.environ.get("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "none").lower() == "cpu"}
    vllm = vllm_mode if use_vllm else "none"
    stage, offload = zero.get("zero", 0), zero.get("offload", False)
    name = f"{processes} process{'es' if processes > 1 else ''}" + (f", ZeRO-{stage}" if stage else "") + (
        ", optimizer on the CPU" if offload else "") + f", vLLM {vllm}"
    return Layout(f"this run ({name})", processes, vllm=vllm, **zero)


def gpu_memory_gb(default: float = GPU_GIB) -> tuple[float, str]:
    """The first GPU's memory in GiB and where it came from (the GPU, else ``default``: an 80 GB H100)."""
    try:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            return props.total_memory / GB, props.name
    except Exception:  # noqa: BLE001 - no torch or no driver: the default
        pass
    return default, f"no GPU here: an 80 GB H100 assumed ({default:.1f} GiB)"


#: The prompt length assumed where the shards' are unknown (MuSiQue's top level reaches about 5k in Qwen2.5's tokens).
ASSUMED_PROMPT = 5000


def _settings(cfg: Any, args: Any, gpu_gb: float, longest_prompt: int | None) -> dict[str, Any]:
    """:func:`estimate`'s keyword arguments from a run's config and its bound ``GRPOConfig``."""
    completion = int(getattr(args, "max_completion_length", 0) or 0)
    return {"tokens": (longest_prompt or ASSUMED_PROMPT) + completion, "completion": completion, "gpu_gb": gpu_gb,
            "weight_bytes": _weight_bytes(cfg),
            "beta": float(getattr(args, "beta", 0.0) or 0.0),
            "vllm_share": float(getattr(args, "vllm_gpu_memory_utilization", 0.3) or 0.0),
            "checkpointing": bool(getattr(args, "activation_checkpointing", False)
                                  or getattr(args, "gradient_checkpointing", False))}


def _weight_bytes(cfg: Any) -> int:
    return 2 if str(cfg.model.dtype) in ("bfloat16", "float16") else 4


def _choices(prompts: int | None, generations: int, processes: int, per_device: int) -> list[int]:
    """Per-device batches that split the step over ``processes`` (the recipe's when prompts per step is unset)."""
    if not prompts:
        return [per_device]
    completions = prompts * generations
    return [d for d in range(1, completions + 1) if completions % (d * processes) == 0]


def _launched() -> bool:
    """Whether this process was started by a launcher (accelerate, torchrun), which set its layout."""
    return bool(os.environ.get("ACCELERATE_USE_DEEPSPEED") or os.environ.get("LOCAL_RANK"))


def run_layouts(num_processes: int, vllm_mode: str, use_vllm: bool, *, dry_run: bool) -> list[Layout]:
    """The layouts this run may have: its own where it was launched (or is a real run: the environment is the
    layout); in a dry run, which cannot know the launcher, one process as a plain ``curriculum train`` and as
    ``zero2-offload-1gpu.yaml``, or N processes under ZeRO-2 as every multi-GPU launcher config."""
    here = current_layout(num_processes, vllm_mode, use_vllm)
    if not dry_run or _launched():
        return [here]
    if num_processes == 1:
        return [here, Layout("1 process, ZeRO-2, optimizer on the CPU", 1, 2, True, here.vllm)]
    return [Layout(f"{num_processes} processes, ZeRO-2, vLLM {here.vllm}", num_processes, 2, False, here.vllm)]


def memory_lines(cfg: Any, args: Any, num_processes: int, longest_prompt: int | None) -> list[str]:
    """What ``--dry-run`` prints: the estimate for each launcher config (and for this run's layout where it is none
    of them), one verdict each, with the largest per-device batch that fits where the recipe's does not."""
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
             f"{'' if longest_prompt else f' (prompt length unknown: {ASSUMED_PROMPT} assumed)'}; a layout fits "
             f"when the estimate plus {MARGIN:.0%} is within the GPU):"]
    vllm = str(getattr(args, "vllm_mode", "colocate")) if args.use_vllm else "none"
    launched = _launched()
    here = current_layout(num_processes, vllm, bool(args.use_vllm))
    layouts = list(LAUNCHERS)
    if launched and not any(here.same(x) for x in LAUNCHERS):
        layouts.insert(0, here)
    elif not launched and not any(x.processes == num_processes and x.vllm == vllm for x in LAUNCHERS):
        layouts.insert(0, run_layouts(num_processes, vllm, bool(args.use_vllm), dry_run=True)[-1])
    for layout in layouts:
        e = estimate(shape, layout, per_device=per_device, **kw)
        name = layout.name + (f" [{layout.config}]" if layout.config else "")
        if launched and here.same(layout):
            name += " <- this run"
        elif not launched and layout.processes == num_processes and layout.vllm == vllm:
            name += f" <- this run's {num_processes} process{'es' if num_processes > 1 else ''}, if launched so"
        line = f"  {name}: {e.describe()}"
        splits = _choices(prompts, g, layout.processes, per_device)
        if not splits:
            line += f"; {prompts} prompts x {g} do not split over {layout.processes} processes (the batch check)"
        elif not e.fits:
            line += _offer(shape, layout, [d for d in splits if d < per_device], e.verdict, kw,
                           f"{prompts * g} completions a step kept" if prompts else "the step's completions kept")
        lines.append(line)
    return lines


def _offer(shape: ModelShape, layout: Layout, smaller: list[int], verdict: str, kw: dict[str, Any], kept: str
           ) -> str:
    """The largest smaller per-device batch that fits with the margin; where none does and the recipe's does not
    fit at all, the largest that is tight."""
    best = fitting_per_device(shape, layout, smaller, **kw)
    if best:
        return (f"; batch.per_device_completions={best} fits "
                f"({estimate(shape, layout, per_device=best, **kw).total_gb:.0f} GiB; {kept})")
    if verdict == "tight":
        return ""
    tight = [d for d in smaller if estimate(shape, layout, per_device=d, **kw).verdict == "tight"]
    if tight:
        return (f"; batch.per_device_completions={max(tight)} is tight "
                f"({estimate(shape, layout, per_device=max(tight), **kw).total_gb:.0f} GiB; {kept})")
    return "; no per-device batch fits"


def run_estimate(cfg: Any, args: Any, num_processes: int, longest_prompt: int | None) -> Estimate | None:
    """This run's estimate (its layout from the launcher's environment) on the GPU it runs on, or on the assumed
    80 GB one without a GPU; None for a model whose shape is unknown."""
    shape = model_shape(str(cfg.model.name_or_path))
    if shape is None:
        return None
    gpu_gb, _ = gpu_memory_gb()
    layout = current_layout(num_processes, str(getattr(args, "vllm_mode", "colocate")), bool(args.use_vllm))
    return estimate(shape, layout, per_device=int(args.per_device_train_batch_size),
                    **_settings(cfg, args, gpu_gb, longest_prompt))


def check_memory(cfg: Any, args: Any, num_processes: int, longest_prompt: int | None) -> Estimate | None:
    """This run's estimate (:func:`run_estimate`); on a GPU, logged, and a warning when it does not fit with the
    margin, naming where the layouts that do are listed (an estimate: the run goes on)."""
    import logging

    e = run_estimate(cfg, args, num_processes, longest_prompt)
    gpu_gb, where = gpu_memory_gb(default=0.0)
    if e is None or not gpu_gb:
        return e
    log = logging.getLogger("rag_curriculum.train")
    if e.fits:
        log.info("memory per GPU (estimate, %s): %s", where, e.describe())
    else:
        log.warning("memory per GPU (estimate, %s): %s; `curriculum train --dry-run` lists the layouts that fit",
                    where, e.describe())
    return e


def gpu_here() -> bool:
    """Whether this machine has a CUDA GPU (where a dry run's disk is the run's)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch: no GPU
        return False


def check_disk(cfg: Any, args: Any, num_processes: int, *, dry_run: bool, total_steps: int | None,
               free: float | None = None) -> tuple[DiskNeed | None, float | None]:
    """The disk the run's checkpoints need (the largest over the layouts it may have: :func:`run_layouts`) against
    the free space at ``run.output_dir``; a :class:`~rag_curriculum.errors.ConfigError` when it is short (unless
    ``run.check_free_disk`` is off), in a real run and in a dry run on a machine with a GPU (a dry run elsewhere
    prints the shortfall). ``(None, None)`` for a model whose shape is unknown or a run that saves nothing."""
    shape = model_shape(str(cfg.model.name_or_path))
    strategy = str(getattr(getattr(args, "save_strategy", "no"), "value", getattr(args, "save_strategy", "no")))
    if shape is None or (strategy == "no" and not cfg.run.save_final):
        return None, None
    needs = [disk_need(shape, layout, args, save_final=cfg.run.save_final, weight_bytes=_weight_bytes(cfg),
                       total_steps=total_steps) if strategy != "no" else
             DiskNeed(0.0, 0, (2 if layout.zero else _weight_bytes(cfg)) * shape.params / GB, layout.name)
             for layout in run_layouts(num_processes, str(getattr(args, "vllm_mode", "colocate")),
                                       bool(args.use_vllm), dry_run=dry_run)]
    need = max(needs, key=lambda x: x.total_gib)
    existing = sum(1 for _ in Path(args.output_dir).glob("checkpoint-*")) if Path(args.output_dir).is_dir() else 0
    if existing and need.kept:  # a resumed run: the checkpoints kept are on the disk already
        need = DiskNeed(need.each_gib, max(need.kept - existing, 1), need.final_gib, need.layout, need.parts)
    have = free_gib(args.output_dir) if free is None else free
    # a dry run without a GPU (a recipe checked on a laptop) says the shortfall: its disk is not where the run writes
    if have < need.total_gib and cfg.run.check_free_disk and (not dry_run or gpu_here()):
        limit = getattr(args, "save_total_limit", None)
        raise ConfigError(
            f"run.output_dir={args.output_dir}: {have:.0f} GiB free on its disk, and the run's checkpoints need about "
            f"{need.total_gib:.0f} GiB ({describe_disk(need)})",
            hint=f"free space, save fewer checkpoints (grpo.save_total_limit, now {limit}; grpo.save_steps), or put "
                 "run.output_dir on a larger disk (run.check_free_disk=false goes on regardless)")
    return need, have


def disk_lines(need: DiskNeed | None, free: float | None, args: Any) -> list[str]:
    """What ``--dry-run`` prints of the checkpoints: one's size by part, how many are on the disk at once, the
    total against the free space at ``run.output_dir``."""
    if need is None:
        return ["checkpoints: not sized (the model's config.json is not at hand, or the run saves nothing)"]
    lines = []
    if need.kept:
        parts = ", ".join(f"{k} {v:.1f}" for k, v in need.parts.items())
        lines.append(f"checkpoint: about {need.each_gib:.1f} GiB each ({need.layout}: {parts}); "
                     f"grpo.save_steps={getattr(args, 'save_steps', None)}, "
                     f"grpo.save_total_limit={getattr(args, 'save_total_limit', None)}: up to {need.kept} on the "
                     "disk at once (the limit, and the next one while it is written)")
    enough = "enough" if (free or 0.0) >= need.total_gib else (
        "NOT enough here (a machine without a GPU: the disk the run writes to is checked when it starts, and by a "
        "dry run on the GPU machine)")
    lines.append(f"disk: about {need.total_gib:.0f} GiB needed ({describe_disk(need)}); {free:.0f} GiB free at "
                 f"{args.output_dir}: {enough}")
    return lines


def describe_disk(need: DiskNeed) -> str:
    """``4 checkpoints of about 113 GiB at once (...) and the final model (14 GiB)``, in words."""
    words = []
    if need.kept:
        words.append(f"{need.kept} checkpoint{'s' if need.kept > 1 else ''} of about {need.each_gib:.0f} GiB at once "
                     f"({need.layout})")
    if need.final_gib:
        words.append(f"the final model ({need.final_gib:.0f} GiB)")
    return " and ".join(words)


#: Where each training process records its peak GPU memory (``rank-N.json``), in ``run.output_dir``.
PEAK_DIR = "gpu_memory"


def cuda_probe() -> dict[str, float] | None:
    """This process's GPU memory now, GiB: torch's peaks (``max_memory_allocated`` / ``max_memory_reserved``) and
    what the GPU has in use outside torch's allocator (its used memory less torch's reserved: the CUDA context,
    NCCL's buffers); None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    device = torch.cuda.current_device()
    free, total = torch.cuda.mem_get_info(device)
    reserved = torch.cuda.memory_reserved(device)
    return {"device": float(device), "max_allocated_gib": torch.cuda.max_memory_allocated(device) / GB,
            "max_reserved_gib": torch.cuda.max_memory_reserved(device) / GB, "total_gib": total / GB,
            "outside_allocator_gib": max(total - free - reserved, 0) / GB}


class PeakRecorder:
    """Records this training process's peak GPU memory after every step into ``out_dir/gpu_memory/rank-N.json``
    (written whole each time): torch's ``max_memory_allocated`` and ``max_memory_reserved``, the memory outside its
    allocator, and ``peak_gib`` = the reserved peak plus that (the GPU's peak for this process). Per training
    process, so a vLLM server's GPU is never counted; a resumed run keeps the higher of its peak and the one its
    folder holds (a fresh run's folder is emptied first: ``train``). Records nothing without CUDA (``probe``
    returns None)."""

    def __init__(self, out_dir: str | Path, probe: Any = cuda_probe) -> None:
        self.folder = Path(out_dir) / PEAK_DIR
        self.probe = probe
        self.peak: dict[str, Any] | None = None
        self.earlier: dict[int, dict[str, Any]] = {p["rank"]: p for p in read_peaks(out_dir)}

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        now = self.probe()
        if now is None:
            return
        peak = now["max_reserved_gib"] + now["outside_allocator_gib"]
        rank = int(getattr(args, "process_index", 0) or 0)
        if self.peak is None:
            self.peak = self.earlier.get(rank)
        if self.peak is not None and peak < self.peak["peak_gib"]:
            return
        self.peak = {"rank": rank, "local_rank": int(getattr(args, "local_process_index", 0) or 0),
                     "step": state.global_step, **{k: round(v, 3) for k, v in now.items()},
                     "peak_gib": round(peak, 3)}
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".rank-{rank}.json.tmp"
        tmp.write_text(json.dumps(self.peak, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, self.folder / f"rank-{rank}.json")


def peak_memory_callback(out_dir: str | Path, probe: Any = cuda_probe) -> Any:
    """A transformers callback (an instance) that is a :class:`PeakRecorder`."""
    from transformers import TrainerCallback

    class PeakMemory(PeakRecorder, TrainerCallback):
        pass

    return PeakMemory(out_dir, probe)


def read_peaks(out_dir: str | Path) -> list[dict[str, Any]]:
    """The peaks the training processes recorded (:func:`peak_memory_callback`), by rank."""
    folder = Path(out_dir) / PEAK_DIR
    files = sorted(folder.glob("rank-*.json"), key=lambda f: int(f.stem.split("-")[1])) if folder.is_dir() else []
    return [json.loads(f.read_text(encoding="utf-8")) for f in files]


def judge_peak(peak_gib: float, estimate_gib: float, gpu_gib: float) -> tuple[dict[str, bool], str]:
    """The pre-flight's verdict on the highest peak of the training processes: within the estimate (else the
    estimate, and every verdict made from it, undercounts) and leaving :data:`PEAK_MARGIN` of the GPU free; the
    checks and one line saying why."""
    room = gpu_gib * (1 - PEAK_MARGIN)
    checks = {"peak memory within the estimate": peak_gib <= estimate_gib,
              f"peak memory leaves {PEAK_MARGIN:.0%} of the GPU free": peak_gib <= room}
    line = (f"peak {peak_gib:.1f} GiB per training GPU against the estimate's {estimate_gib:.1f} and "
            f"{room:.1f} usable ({gpu_gib:.1f} less {PEAK_MARGIN:.0%})")
    if peak_gib > estimate_gib:
        line += ": over the estimate, which undercounts this run (its verdicts cannot be trusted)"
    if peak_gib > room:
        line += ": too close to the GPU's memory for a run of hours (fragmentation grows); lower " \
                "batch.per_device_completions"
    return checks, line
