"""The engine options of `curriculum partition` and `curriculum eval` without a cluster: `--engine ray` where Ray is
not installed stops with the install hint (really missing in the notrain tier, hidden here otherwise), Ray-only
options without `--engine ray` are refused, a vLLM worker's GPUs must be its tensor-parallel size, and the recorded
command leaves the engine options out. The shipped KubeRay RayJob manifest parses and runs the command."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rag_curriculum.cli import app
from rag_curriculum.errors import ConfigError, EngineError
from rag_curriculum.generation._engine import EngineConfig, without_engine_options

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_ray(monkeypatch):
    """Ray as if it were not installed (`import ray` fails, find_spec finds nothing)."""
    monkeypatch.setitem(sys.modules, "ray", None)


@pytest.mark.parametrize("command", ["partition", "eval"])
def test_engine_ray_without_ray_says_how_to_install_it(no_ray, command, tmp_path):
    args = (["partition", str(tmp_path / "shards"), "--backend", "scripted"] if command == "partition" else
            ["eval", "--model", "m=x:y", "--backend", "scripted", "--data", str(tmp_path / "set")])
    res = CliRunner().invoke(app, [*args, "--engine", "ray", "--out", str(tmp_path / "out")])
    assert res.exit_code == 1, res.output
    assert "--engine ray needs Ray, which is not installed here" in res.output
    assert "pip install 'rag-curriculum[ray]'" in res.output
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_engine_ray_without_ray_in_python(no_ray):
    with pytest.raises(EngineError, match="not installed") as e:
        EngineConfig(engine="ray").validate("scripted", {})
    assert "rag-curriculum[ray]" in e.value.hint
    from rag_curriculum.generation._ray_engine import import_ray

    with pytest.raises(EngineError, match="needs Ray"):
        import_ray()


def test_ray_options_need_the_ray_engine(tmp_path):
    res = CliRunner().invoke(app, ["partition", str(tmp_path), "--backend", "scripted", "--num-workers", "2",
                                   "--out", str(tmp_path / "out")])
    assert res.exit_code == 1 and "--num-workers only apply to --engine ray" in res.output, res.output


def test_a_vllm_worker_uses_its_tensor_parallel_gpus():
    pytest.importorskip("ray")
    with pytest.raises(ConfigError, match="tensor-parallel size is 1") as e:
        EngineConfig(engine="ray", gpus_per_worker=2).validate("vllm", {})
    assert "--tensor-parallel-size 2" in e.value.hint
    EngineConfig(engine="ray", gpus_per_worker=2).validate("vllm", {"tensor_parallel_size": 2})
    with pytest.raises(ConfigError, match="cpus_per_worker"):
        EngineConfig(engine="ray", cpus_per_worker=-1)


def test_the_recorded_command_leaves_the_engine_out():
    cmd = ("curriculum partition in --engine=ray --ray-address auto --num-workers 4 --gpus-per-worker 1 "
           "--cpus-per-worker 8 --chunk-retries 5 --pass-at 8 -o out")
    assert without_engine_options(cmd) == "curriculum partition in --pass-at 8 -o out"


def test_the_rayjob_manifest_parses_and_runs_the_partition():
    import yaml

    docs = list(yaml.safe_load_all((ROOT / "recipes" / "ray" / "rayjob-partition.yaml").read_text()))
    (job,) = [d for d in docs if d and d.get("kind") == "RayJob"]
    assert job["apiVersion"].startswith("ray.io/")
    spec = job["spec"]
    assert "curriculum partition recipe=rag-rl-pass8 input=" in spec["entrypoint"] and "--engine ray" in spec["entrypoint"]
    assert "--balance" not in spec["entrypoint"] and "balance=false" not in spec["entrypoint"]  # the recipe balances
    cluster = spec["rayClusterSpec"]
    assert cluster["headGroupSpec"]["template"]["spec"]["containers"]
    (workers,) = cluster["workerGroupSpecs"]
    gpus = workers["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    assert int(gpus) >= 1
