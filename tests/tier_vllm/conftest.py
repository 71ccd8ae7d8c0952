"""The vLLM tier: the real engine (vLLM's CPU build on CPU machines, the CUDA build on GPUs), run by
``bash scripts/test.sh`` in the environment of its own that ``scripts/setup.sh vllm`` makes (``.venv-vllm``; vLLM's
pins differ from the ``train`` extra's). In an environment without vLLM every test here is skipped.

The model is a tiny random Qwen2 built on the spot (hidden size 128, 2 heads: head size 64, which vLLM's CPU
attention supports; it rejects head size 8). ``VLLM_CPU_KVCACHE_SPACE`` (GiB) sizes the CPU KV cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

#: Engine options of the engine shared by this tier's tests: eager (no torch.compile warm-up) and in this process
#: (no engine-core and worker processes to spawn, each importing torch and vLLM: about 35 s of a start on 2 cores).
ENGINE = dict(max_model_len=2048, enforce_eager=True, in_process_engine=True)


@pytest.fixture(scope="session")
def vllm_model_dir(tmp_path_factory, shared_data) -> Path:
    from support.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2-vllm"), shared_data, hidden_size=128, heads=2)


@pytest.fixture(scope="session")
def engine(vllm_model_dir):
    """One real vLLM engine for the in-process tests (an engine start costs tens of seconds on 2 cores)."""
    from rag_curriculum.generation._vllm_backend import VLLMBackend

    b = VLLMBackend(str(vllm_model_dir), **ENGINE)
    yield b
    b.close()


@pytest.fixture(scope="session")
def gemma_gguf(gemma_gguf) -> Path:
    """Gemma 3 270M's file, its conversion cached by the main environment (``.venv``) first. vLLM's pins keep
    transformers below 5.20, which rebuilds Gemma's tokenizer wrongly (a conversion here is refused, naming the
    version), so, as docs/base-models.md tells users, the folder is converted where transformers reads it right and
    found here by the file's digest. (A no-op once converted; a conversion another process runs at the same time is
    waited for on the cache's lock.)"""
    main = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python"
    if main.exists():
        r = subprocess.run([str(main), "-c", "import sys; from rag_curriculum.models import resolve_model; "
                            "resolve_model(sys.argv[1])", str(gemma_gguf)], capture_output=True, text=True,
                           timeout=900)
        assert r.returncode == 0, f"the main environment could not convert {gemma_gguf}:\n{r.stderr[-3000:]}"
    return gemma_gguf


def _curriculum(*args: str, timeout: float = 600, **popen) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("curriculum")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, **popen)


@pytest.fixture(scope="session")
def curriculum():
    """Run the ``curriculum`` command of this environment: ``curriculum("partition", ...)``."""
    return _curriculum
