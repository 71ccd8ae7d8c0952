"""Build the DeepSpeed engine of each accelerate config in recipes/accelerate on the CPU, in one process, through the
route a GPU run takes: the environment `accelerate launch --config_file CONFIG` gives its processes (accelerate's
own launcher code, at one process and one machine), the toolkit's `train` (TRL's GRPOTrainer: transformers'
Trainer calls accelerate, which calls deepspeed.initialize) for one step on a tiny model, with DeepSpeed's CPU
accelerator (DS_ACCELERATOR=cpu, torch.distributed's gloo at world size 1). Prints one JSON line per config: the
engine DeepSpeed built (ZeRO stage, offload, optimizer, buckets, bf16) and the layout the toolkit read from the
same environment, or the error that stopped it. A config whose launch environment is one built already (the
7-GPU, 8-GPU and multi-node configs differ only in their processes and machines, one here) has that engine's
record, with ``same_engine_as``: the same environment builds the same engine, so it is built once.

What differs from a GPU, and why: the CPU accelerator would compile a shared-memory collective (C++, minutes) that
no GPU build has, so it is left out; transformers refuses bf16 without a GPU before DeepSpeed is reached, so that
one check is lifted (DeepSpeed then runs the configs' bf16 on the CPU); one process instead of 7, 8 or 14.

    PYTHONPATH=tests python -m support.deepspeed_engines MODEL SHARDS OUT CONFIG.yaml...
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

STARTED = time.monotonic()


def accelerate_env(config: str) -> dict[str, str]:
    """The ACCELERATE_* variables `accelerate launch --config_file CONFIG --num_processes 1 --num_machines 1`
    sets for its DeepSpeed processes (accelerate's launch code: its argument parser, its config checks and its
    DeepSpeed environment)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env

    args = launch_command_parser().parse_args(["--config_file", config, "--num_processes", "1", "--num_machines",
                                                "1", "train.py"])
    args, defaults, mixed_precision_from_config = _validate_launch_command(args)
    fields = list(defaults.deepspeed_config) + (["mixed_precision"] if mixed_precision_from_config else [])
    args.deepspeed_fields_from_accelerate_config = ",".join(fields)  # as accelerate's launch_command sets it
    _, env = prepare_deepspeed_cmd_env(args)
    return {k: v for k, v in env.items() if k.startswith("ACCELERATE_")}


def main(model: str, shards: str, out: str, configs: list[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), DS_ACCELERATOR="cpu")
    import deepspeed
    import deepspeed.ops
    import transformers.training_args

    print(json.dumps({"config": "imports", "seconds": round(time.monotonic() - STARTED, 1)}), flush=True)
    deepspeed.ops.__compatible_ops__ = {}  # no shared-memory collective to compile: gloo, as on no GPU build
    transformers.training_args.is_torch_bf16_gpu_available = lambda: True  # bf16 as the configs run it on a GPU
    engines: list[Any] = []
    initialize = deepspeed.initialize

    def recording(*args: Any, **kwargs: Any) -> Any:
        built = initialize(*args, **kwargs)
        engines.append(built[0])
        return built

    deepspeed.initialize = recording
    from accelerate.state import AcceleratorState

    from rag_curriculum.train import compose_train_config, train
    from rag_curriculum.train._memory import current_layout

    built: dict[tuple, dict[str, Any]] = {}  # each launch environment's engine, by the environment
    for config in configs:
        if config.startswith("client-optimizer:"):  # DeepSpeed alone, handed a torch AdamW with this JSON
            print(json.dumps(client_optimizer(config.split(":", 1)[1])), flush=True)
            continue
        if config.startswith("plugin:"):  # accelerate's DeepSpeed plugin alone, made from the config's environment
            print(json.dumps(plugin(config.split(":", 1)[1])), flush=True)
            continue
        name = Path(config).name
        for key in [k for k in os.environ if k.startswith("ACCELERATE_")]:
            del os.environ[key]
        engines.clear()
        record: dict[str, Any] = {"config": name}
        start = time.monotonic()
        try:
            env = accelerate_env(config)
            same = built.get(tuple(sorted(env.items())))
            if same is not None:  # the environment of a config built already: the same engine, not built twice
                record.update({k: v for k, v in same.items() if k not in ("config", "seconds")},
                              same_engine_as=same["config"])
                print(json.dumps(record), flush=True)
                continue
            os.environ.update(env)
            AcceleratorState._reset_state(True)
            cfg = compose_train_config("rag-rl-min-max", [
                f"model.name_or_path={model}", f"data.shards={shards}", f"run.output_dir={out}/{name}",
                "batch.prompts_per_step=2", "batch.per_device_completions=2", "grpo.num_generations=2",
                "grpo.max_completion_length=4", "grpo.use_vllm=false", "grpo.max_steps=1", "grpo.save_strategy=no",
                "grpo.report_to=none", "grpo.dataloader_pin_memory=false", "run.save_final=false",
                "run.resume=null", "data.max_rows=2"])
            result = train(cfg)
            # the policy's engine, handed the Trainer's optimizer (TRL's reference model gets one without)
            engine = next(e for e in engines if getattr(e, "client_optimizer", None) is not None)
            layout = current_layout(1, "colocate")
            record.update(
                steps=result.global_step, zero=engine.zero_optimization_stage(), offload=engine.zero_cpu_offload(),
                optimizer=type(engine.optimizer).__name__, client_optimizer=type(engine.basic_optimizer).__name__,
                reduce_bucket=int(engine.zero_reduce_bucket_size()),
                allgather_bucket=int(engine.zero_allgather_bucket_size()), overlap_comm=engine.zero_overlap_comm(),
                bf16=engine.bfloat16_enabled(),
                layout={"zero": layout.zero, "offload": layout.offload, "reduce_bucket": layout.reduce_bucket,
                        "allgather_bucket": layout.allgather_bucket, "overlap_comm": layout.overlap_comm})
            built[tuple(sorted(env.items()))] = record
        except Exception as e:  # noqa: BLE001 - what stopped it is the result
            record["error"] = f"{type(e).__name__}: {e}"
        record["seconds"] = round(time.monotonic() - start, 1)
        print(json.dumps(record), flush=True)


def plugin(config: str) -> dict[str, Any]:
    """accelerate's DeepSpeedPlugin made as an Accelerator makes it, from the environment `accelerate launch`
    gives the config's processes: where accelerate checks a config before any model is built."""
    from accelerate.utils import DeepSpeedPlugin

    for key in [k for k in os.environ if k.startswith("ACCELERATE_")]:
        del os.environ[key]
    record: dict[str, Any] = {"config": f"plugin:{Path(config).name}"}
    try:
        os.environ.update(accelerate_env(config))
        record["zero"] = DeepSpeedPlugin().zero_stage
    except Exception as e:  # noqa: BLE001 - accelerate's refusal is the result
        record["error"] = f"{type(e).__name__}: {e}"
    return record


def client_optimizer(path: str) -> dict[str, Any]:
    """deepspeed.initialize on a small module with a torch AdamW and the DeepSpeed JSON at ``path``: what DeepSpeed
    itself makes of a client optimizer under ZeRO-Offload (accelerate swaps a torch Adam for DeepSpeedCPUAdam, a
    compiled op, unless the JSON's zero_force_ds_cpu_optimizer is false)."""
    import deepspeed
    import torch

    config = json.loads(Path(path).read_text())
    config.update(train_micro_batch_size_per_gpu=1, gradient_accumulation_steps=1, bf16={"enabled": False})
    config.pop("gradient_clipping", None)
    config.pop("train_batch_size", None)
    model = torch.nn.Linear(8, 8)
    record: dict[str, Any] = {"config": f"client-optimizer:{Path(path).name}"}
    try:
        engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters()), config=config)
        record.update(zero=engine.zero_optimization_stage(), offload=engine.zero_cpu_offload(),
                      client_optimizer=type(engine.basic_optimizer).__name__)
    except Exception as e:  # noqa: BLE001 - DeepSpeed's refusal is the result
        record["error"] = f"{type(e).__name__}: {e}"
    return record


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
