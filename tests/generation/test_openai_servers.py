"""`--backend openai` against a real OpenAI-compatible server: `transformers serve` (transformers' serving extra:
FastAPI + uvicorn), started on 127.0.0.1 on a free port with the tiny random model, once for the module, and
stopped by its process group.

What a user meets with that server, end to end through `curriculum partition` / `curriculum eval`:

- the default request is refused (HTTP 422: it rejects top_k / min_p / repetition_penalty); the error shows the
  server's own detail and the option that fixes it (`--backend-arg disable_server_defaults=false`);
- it returns one choice whatever `n`: named with `--backend-arg max_n_per_request=1`;
- it decodes greedily unless the request turns sampling on, so every sample of a question is the same: the run
  stops (identical samples) before writing anything, naming the extra_body that turns sampling on;
- with that extra_body the partition completes with k distinct samples per question; a rerun into the same
  --out with another extra_body is refused.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

pytest.importorskip("openai")
pytest.importorskip("transformers")
pytest.importorskip("fastapi", reason="transformers serve needs its serving extra (fastapi, uvicorn): the dev extra")
pytest.importorskip("uvicorn", reason="transformers serve needs its serving extra (fastapi, uvicorn): the dev extra")

from conftest import MUSIQUE_DEV, MUSIQUE_TRAIN  # noqa: E402
from support.servers import free_port, server_process  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from rag_curriculum.cli import app  # noqa: E402
from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum  # noqa: E402
from rag_curriculum.generation._openai_backend import TRANSFORMERS_SERVE_SAMPLING  # noqa: E402

N_QUESTIONS = 8  # the identical-samples check judges at least 8 questions
K = 4
SAMPLING_ON = f"extra_body={json.dumps(TRANSFORMERS_SERVE_SAMPLING)}"


@pytest.fixture(scope="module")
def tserve(tiny_model_dir, tmp_path_factory) -> Iterator[str]:
    """`transformers serve` of the tiny model on 127.0.0.1: its /v1 URL."""
    exe = Path(sys.executable).parent / "transformers"
    if not exe.exists():
        pytest.skip(f"no transformers CLI beside {sys.executable}")
    port = free_port()
    log = tmp_path_factory.mktemp("transformers-serve") / "serve.log"
    argv = [str(exe), "serve", str(tiny_model_dir), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
            "--log-level", "warning"]
    with server_process(argv, f"http://127.0.0.1:{port}/health", log,
                        env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_COLOR": "1"}):
        yield f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="module")
def max_dir(tmp_path_factory, shared_data) -> Path:
    out = tmp_path_factory.mktemp("served") / "musique-max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), N_QUESTIONS, K=2)],
                                 schedule="max", out=str(out), seed=0), command="test")
    return out


def partition(max_dir: Path, url: str, model: Path, out: Path, *args: str):
    argv = ["partition", str(max_dir), "--backend", "openai", "--model", str(model), "--base-url", url,
            "--pass-at", str(K), "--max-tokens", "8", "--concurrency", "4", "--no-progress", "--out", str(out),
            *args]
    return CliRunner().invoke(app, argv)


def chunks(out: Path) -> list[Path]:
    return sorted((out / "work").glob("chunk-*.parquet"))


def test_the_default_request_is_refused_with_the_servers_detail_and_the_fix(tserve, tiny_model_dir, max_dir,
                                                                              tmp_path):
    r = partition(max_dir, tserve, tiny_model_dir, tmp_path / "a")
    assert r.exit_code == 1, r.output
    out = " ".join(r.output.split())  # rich may wrap
    assert "HTTP 422" in out and "Unexpected fields in the request" in out  # the server's own words
    assert "--backend-arg disable_server_defaults=false" in out
    # with that fix: the server answers one choice whatever n
    r = partition(max_dir, tserve, tiny_model_dir, tmp_path / "b", "--backend-arg", "disable_server_defaults=false")
    assert r.exit_code == 1, r.output
    out = " ".join(r.output.split())
    assert f"asked for n={K} completions, got 1" in out and "--backend-arg max_n_per_request=1" in out
    assert not chunks(tmp_path / "a") and not chunks(tmp_path / "b")


def test_greedy_samples_are_refused_and_sampling_turned_on_partitions_with_distinct_samples(
        tserve, tiny_model_dir, max_dir, tmp_path):
    fixes = ["--backend-arg", "disable_server_defaults=false", "--backend-arg", "max_n_per_request=1"]
    out = tmp_path / "p"
    r = partition(max_dir, tserve, tiny_model_dir, out, *fixes)
    assert r.exit_code == 1, r.output
    text = " ".join(r.output.split())
    assert f"{N_QUESTIONS} of {N_QUESTIONS} questions got {K} identical samples at temperature 1.0" in text
    assert "ignores the sampling parameters" in text and "--allow-identical-samples" in text
    assert SAMPLING_ON.replace(" ", "") in text.replace(" ", "")  # the extra_body that turns sampling on
    assert not chunks(out)  # nothing degenerate on disk

    # the fix: the refused run left nothing generated, so the corrected command (another extra_body) simply runs
    # (no --overwrite: nothing to protect), and the server now samples
    r = partition(max_dir, tserve, tiny_model_dir, out, *fixes, "--backend-arg", SAMPLING_ON, "--keep-completions")
    assert r.exit_code == 0, r.output
    stats = pq.read_table(out / "stats.parquet").to_pylist()
    assert len(stats) == N_QUESTIONS
    for row in stats:
        assert row["n"] == K and len(set(row["base_completions"])) == K, row["base_completions"]
    run = json.loads((out / "work" / "run.json").read_text())
    gen = run["fingerprint"]["generation"]
    assert gen["options"]["extra_body"] == TRANSFORMERS_SERVE_SAMPLING
    assert gen["options"]["disable_server_defaults"] is False and gen["options"]["max_n_per_request"] == 1
    assert "concurrency" not in gen["options"] and "base_url" not in gen["options"]

    # the same command again reuses everything; another extra_body in the same --out is refused
    r = partition(max_dir, tserve, tiny_model_dir, out, *fixes, "--backend-arg", SAMPLING_ON, "--keep-completions",
                  "--concurrency", "2")
    assert r.exit_code == 0 and "every chunk was already generated" in r.output, r.output
    other = "extra_body=" + json.dumps({"generation_config": json.dumps({"do_sample": True, "top_k": 5})})
    r = partition(max_dir, tserve, tiny_model_dir, out, *fixes, "--backend-arg", other)
    assert r.exit_code == 1, r.output
    assert "other settings" in r.output and "extra_body" in r.output


def test_eval_refuses_greedy_samples_too(tserve, tiny_model_dir, tmp_path, shared_data):
    data = tmp_path / "musique-ideal"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_DEV), N_QUESTIONS)], setting="ideal",
                                 out=str(data)), command="test")
    argv = ["eval", "--model", f"tiny={tiny_model_dir}", "--data", str(data), "--backend", "openai", "--base-url",
            tserve, "--samples", "2", "--max-tokens", "8", "--no-progress", "--no-plots", "--out",
            str(tmp_path / "eval"), "--backend-arg", "disable_server_defaults=false", "--backend-arg",
            "max_n_per_request=1"]
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 1, r.output
    assert "identical samples" in r.output and "--allow-identical-samples" in r.output
    r = CliRunner().invoke(app, [*argv, "--backend-arg", SAMPLING_ON, "--overwrite"])
    assert r.exit_code == 0, r.output
    res = pq.read_table(tmp_path / "eval" / "results" / "tiny" / "musique-ideal.parquet").to_pylist()
    assert len(res) == N_QUESTIONS and all(len(set(x["completions"])) == 2 for x in res)
