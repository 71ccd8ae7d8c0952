"""verl's own code (verl 0.9.1 from the registry) on shards built by the toolkit from the real MuSiQue sample.

These tests run in the environment ``scripts/setup.sh verl`` makes::

    bash scripts/setup.sh verl && .venv-verl/bin/python -m pytest -q -p no:cacheprovider tests/tier_verl

Every test module skips itself when ``verl`` is not importable, so an environment without verl (the main
``.venv``, ``.venv-core``) collects this folder and reports it skipped. Nothing here imports verl at module
level: the fixtures do, when a test asks for them.

The verl configuration is verl's own Hydra config (``verl/trainer/config/ppo_trainer.yaml``) composed with the
exact overrides ``recipes/verl/run_grpo.sh`` prints with ``DRY_RUN=1``, so the tests read the data, the sampler
and the reward the way the toolkit's launch script sets them up.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "recipes" / "verl" / "run_grpo.sh"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")


def pytest_configure(config):
    # verl 0.9.1 announces every training engine it cannot import (megatron, torchtitan, ...): none is used here
    config.addinivalue_line("filterwarnings", "ignore:.* engine is not available:UserWarning")
    config.addinivalue_line("filterwarnings", "ignore:'set_vital' is deprecated:UserWarning")
    config.addinivalue_line("filterwarnings", "ignore:Ray state API is no longer experimental:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:Disabled critic as algorithm.adv_estimator:UserWarning")


@pytest.fixture(scope="session")
def shards(min_max_shards) -> Path:
    """The root conftest's min-max curriculum of the 100 real MuSiQue rows."""
    return min_max_shards


@pytest.fixture(scope="session")
def shard_rows(min_max_rows) -> list[dict]:
    return min_max_rows


def _launch(model: Path, shards: Path, *extra: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "SHARDS": str(shards), "MODEL": str(model), "DRY_RUN": "1", "PYTHON": sys.executable,
            **env}
    return subprocess.run(["bash", str(SCRIPT), *extra], capture_output=True, text=True, env=full, cwd=ROOT)


@pytest.fixture(scope="session")
def launch(tiny_model_dir):
    """``launch(shards, *overrides, **env)``: ``recipes/verl/run_grpo.sh`` with DRY_RUN=1 (it prints the verl
    command instead of running it) and MODEL set to the tiny model."""
    return lambda shards, *extra, **env: _launch(tiny_model_dir, shards, *extra, **env)


def _compose(overrides: list[str]):
    """verl's own ``ppo_trainer`` Hydra config (what ``python -m verl.trainer.main_ppo`` composes) with
    ``overrides``; Hydra rejects an override whose key verl's schema lacks (unless it starts with ``+``)."""
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = str(Path(verl.__file__).resolve().parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


@pytest.fixture(scope="session")
def compose_verl_config():
    """``compose_verl_config(overrides)``: verl's own ``ppo_trainer`` config with those overrides."""
    return _compose


@pytest.fixture(scope="session")
def launched(shards, launch) -> subprocess.CompletedProcess:
    """The launch script's dry run on the shards, with the tiny model (MODEL), the script's own prompt budget (the
    longest prompt, counted with MODEL's tokenizer) and a data loader in the main process (verl's default is 8
    worker processes; the order is the sampler's either way)."""
    res = launch(shards, "data.dataloader_num_workers=0")
    assert res.returncode == 0, res.stderr
    return res


@pytest.fixture(scope="session")
def launch_overrides(launched) -> list[str]:
    """The Hydra overrides of the launch script's verl command."""
    args = shlex.split(launched.stdout)
    assert args[1:3] == ["-m", "verl.trainer.main_ppo"], args[:3]
    return args[3:]


@pytest.fixture(scope="session")
def verl_config(launch_overrides):
    return _compose(launch_overrides)


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir):
    """The tiny model's tokenizer, loaded the way verl loads the actor's (``verl.utils.hf_tokenizer``)."""
    from verl.utils import hf_tokenizer

    return hf_tokenizer(str(tiny_model_dir))


@pytest.fixture(scope="session")
def dataset(verl_config, tokenizer):
    """verl's training dataset over the shards, made by ``create_rl_dataset`` as verl's trainer makes it."""
    from verl.trainer.ppo.utils import create_rl_dataset

    data = verl_config.data
    return create_rl_dataset(data.train_files, data, tokenizer, None, is_train=True,
                             max_samples=data.get("train_max_samples", -1))


@pytest.fixture(scope="session")
def chat_ids(tokenizer):
    """``chat_ids(messages)``: a prompt's token ids with the chat template applied, computed here (not by verl)."""
    return lambda messages: _chat_ids(tokenizer, messages)


def _chat_ids(tokenizer, messages) -> list[int]:
    text = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]
