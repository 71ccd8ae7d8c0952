"""Every DeepSpeed launcher config the docs name (recipes/accelerate/zero2-*.yaml) starts its engine: built on the
CPU as a GPU run builds it (accelerate's launch environment for the config, the toolkit's trainer, DeepSpeed's
CPU accelerator; tests/support/deepspeed_engines.py says what differs), one GRPO step trained, and the engine's
ZeRO stage, offload, optimizer and buckets the layout the memory estimate counts. A config whose launch environment
is another's (processes and machines apart) has that one's engine: the 8-GPU and multi-node configs the 7 + 1's.
Configs a GPU start refuses are refused here too: the one-GPU offload config with the precision set beside its
DeepSpeed file (accelerate), and DeepSpeed handed the Trainer's AdamW under ZeRO-Offload without
"zero_force_ds_cpu_optimizer": false."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN

from rag_curriculum.train._memory import LAUNCHERS

pytestmark = pytest.mark.slow  # DeepSpeed, transformers and TRL in a process of its own; 2 engines (7 + 1, offload)
pytest.importorskip("deepspeed", reason="the `deepspeed` extra (in .venv: scripts/setup.sh)")
pytest.importorskip("trl", reason="the `train` extra")

ROOT = Path(__file__).resolve().parents[2]
ACCELERATE = ROOT / "recipes" / "accelerate"
CONFIGS = ["zero2-7gpu.yaml", "zero2-8gpu.yaml", "zero2-multinode.yaml", "zero2-offload-1gpu.yaml"]


@pytest.fixture(scope="module")
def engines(tmp_path_factory, tiny_model_dir) -> dict[str, dict]:
    import yaml

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    tmp = tmp_path_factory.mktemp("deepspeed")
    shards = tmp / "shards"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=2)], schedule="min-max", K=1,
                                 out=str(shards), seed=0, tokenizer=str(tiny_model_dir)))
    # what a GPU start refuses: accelerate, the precision set beside a deepspeed_config_file; DeepSpeed, a client
    # optimizer under ZeRO-Offload without zero_force_ds_cpu_optimizer false
    both = yaml.safe_load((ACCELERATE / "zero2-offload-1gpu.yaml").read_text())
    both["mixed_precision"] = "bf16"
    (tmp / "offload-with-precision.yaml").write_text(yaml.safe_dump(both))
    forced = json.loads((ACCELERATE / "zero2-offload-1gpu.json").read_text())
    del forced["zero_force_ds_cpu_optimizer"]
    (tmp / "offload-forced.json").write_text(json.dumps(forced))
    configs = [str(ACCELERATE / c) for c in CONFIGS] + [
        f"plugin:{tmp / 'offload-with-precision.yaml'}", f"client-optimizer:{ACCELERATE / 'zero2-offload-1gpu.json'}",
        f"client-optimizer:{tmp / 'offload-forced.json'}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    res = subprocess.run([sys.executable, "-m", "support.deepspeed_engines", str(tiny_model_dir), str(shards),
                          str(tmp / "runs"), *configs], capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    records = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    return {r["config"]: r for r in records}


@pytest.mark.parametrize("config", CONFIGS)
def test_each_config_builds_its_engine_and_trains_a_step(engines, config):
    record = engines[config]
    assert "error" not in record, record.get("error")
    if "same_engine_as" in record:  # the launch environment of a config built already: its engine, built there
        assert record["same_engine_as"] in CONFIGS and "same_engine_as" not in engines[record["same_engine_as"]]
    (layout,) = [x for x in LAUNCHERS if x.config == config]
    assert record["steps"] == 1 and record["bf16"] is True
    assert (record["zero"], record["offload"]) == (layout.zero, layout.offload)
    # the buckets the estimate counts are the engine's (DeepSpeed's defaults, or the config file's)
    assert (record["reduce_bucket"], record["allgather_bucket"], record["overlap_comm"]) == (
        layout.reduce_bucket, layout.allgather_bucket, layout.overlap_comm)
    # the toolkit read the same layout from the launcher's environment
    assert record["layout"] == {"zero": layout.zero, "offload": layout.offload, "reduce_bucket": layout.reduce_bucket,
                                "allgather_bucket": layout.allgather_bucket, "overlap_comm": layout.overlap_comm}
    if layout.offload:  # the Trainer's own AdamW, on the CPU: no DeepSpeedCPUAdam to compile at the start
        assert record["client_optimizer"] == "AdamW"


def test_what_a_gpu_start_refuses_is_refused(engines):
    assert "the following accelerate config variables will be ignored" in engines[
        "plugin:offload-with-precision.yaml"]["error"]
    accepted = engines["client-optimizer:zero2-offload-1gpu.json"]
    assert "error" not in accepted and accepted["client_optimizer"] == "AdamW" and accepted["offload"]
    refused = engines["client-optimizer:offload-forced.json"]["error"]
    assert refused.startswith("ZeRORuntimeException") and "zero_force_ds_cpu_optimizer" in refused
