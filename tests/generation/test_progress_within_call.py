"""Progress within a backend call: a partition whose questions fit in one chunk used to show its
bar and then nothing until the call returned. Backends report each step (scripted: a prompt; transformers: a
batch; vLLM: a finished request; openai: a request) and the runner shows the call's prompts done and its
completions per second under its bar, only when progress is on."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN

from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.generation import SamplingConfig, runner
from rag_curriculum.generation._base import listening, progress_listened, report_progress
from rag_curriculum.generation._scripted import ScriptedBackend
from rag_curriculum.generation._vllm_backend import _Reported
from rag_curriculum.shards import read_rows


def m(text):
    return [{"role": "user", "content": text}]


def test_report_progress_reaches_only_the_listened_backend():
    a, b, got = object(), object(), []
    report_progress(a, 1, 2)  # nobody listening: nothing
    with listening(a, lambda p, c: got.append((p, c))):
        assert progress_listened(a) and not progress_listened(b)
        report_progress(a, 1, 4)
        report_progress(b, 1, 4)  # a backend inside the called one (an agent's model): not the call's prompts
    report_progress(a, 1, 8)
    assert got == [(1, 4)] and not progress_listened(a)


def test_the_bar_shows_the_call_in_flight_prompt_by_prompt(tmp_path, monkeypatch, runner_bars):
    """The rich task under the bar advances as each prompt of the one call finishes, and goes when it returns."""
    bars = runner_bars
    seen: list = []

    def script(messages, n, seed):
        tasks = [t for t in bars[0].progress.tasks if "p" in t.fields]  # the call's line, as rich holds it
        seen.append((tasks[0].description, tasks[0].fields["p"], tasks[0].fields["pt"], tasks[0].completed))
        return [f"a{j}" for j in range(n)]

    ids = [f"q{i}" for i in range(6)]
    report = runner.run_chunks(tmp_path / "work", ids=ids, prompts=[m(i) for i in ids],
                               backend=ScriptedBackend(script=script), sampling=SamplingConfig(n=3),
                               fingerprint={"t": 1}, chunk_size=64, progress=True)
    assert report.complete and report.completions == 18
    # before prompt k: k prompts done, 3k completions; the line names the call
    assert seen == [("  └ chunk 0 (questions 0..5)", k, 6, 3 * k) for k in range(6)]
    assert [t for t in bars[0].progress.tasks if "p" in t.fields] == []  # removed once the call returned


def test_progress_off_on_a_terminal_listens_to_nothing(tmp_path, monkeypatch):
    """No bar and a terminal (--no-progress): nothing to show, so no backend measures its progress (without a
    terminal the heartbeat listens: tests/generation/test_progress_counts.py)."""
    monkeypatch.setattr(runner, "_is_terminal", lambda stream: True)
    backend = ScriptedBackend(script=lambda messages, n, seed: ["x"] * n)
    listened = []
    original = backend._completions

    def spy(*a):
        listened.append(progress_listened(backend))
        return original(*a)

    backend._completions = spy
    runner.run_chunks(tmp_path / "work", ids=["a", "b"], prompts=[m("a"), m("b")], backend=backend,
                      sampling=SamplingConfig(n=2), fingerprint={}, chunk_size=8, progress=False)
    assert listened == [False, False]


def test_transformers_reports_each_batch(tiny_model_dir):
    from rag_curriculum.generation._hf_backend import TransformersBackend

    backend = TransformersBackend(str(tiny_model_dir), device="cpu", batch_size=2)
    got: list = []
    with listening(backend, lambda p, c: got.append((p, c))):
        out = backend.generate([m(f"question {i}") for i in range(5)], SamplingConfig(n=2, max_tokens=2))
    assert len(out) == 5
    # batches of 2, 2, 1 prompts, n=2 completions each: a completion that ends early (its end-of-sequence token)
    # is reported as it finishes (0 prompts), the rest with its batch
    batches, pending = [], 0
    for prompts, completions in got:
        pending += completions
        if prompts:
            batches.append((prompts, pending))
            pending = 0
    assert batches == [(2, 4), (2, 4), (1, 2)] and pending == 0


def test_transformers_listened_generates_the_same_completions_and_says_its_tokens(tiny_model_dir):
    """Listened to, the backend moves its stop strings inside its progress counter: the same completions as
    unlistened (the same criteria stop the same rows), and at every step how far the unfinished rows are."""
    from rag_curriculum.generation._hf_backend import TransformersBackend

    backend = TransformersBackend(str(tiny_model_dir), device="cpu", batch_size=4)
    prompts = [m(f"question {i}") for i in range(4)]
    sampling = SamplingConfig(n=2, max_tokens=6, temperature=1.0, seed=3)
    quiet = backend.generate(prompts, sampling, stop=["e", " "])
    got, work = [], []
    with listening(backend, lambda p, c: got.append((p, c)), work.append):
        said = backend.generate(prompts, sampling, stop=["e", " "])
    assert said == quiet
    assert sum(c for _, c in got) == 8 and sum(p for p, _ in got) == 4
    assert any(p == 0 and c > 0 for p, c in got), got  # a row ended by a stop string, counted as it ended
    assert len(work) >= 2 and all(0 <= w <= 8 for w in work) and work[-1] == 0.0  # settled when the batch returns


def test_vllm_reported_bar_follows_vllms_use_tqdm_contract():
    """``_Reported`` is what vLLM's ``LLM.generate(use_tqdm=factory)`` builds: the calls vLLM makes on it
    (vllm/entrypoints/common/offline.py ``_run_engine``: the factory with total/desc/dynamic_ncols/postfix,
    ``format_dict['elapsed']``, ``postfix =``, ``update(n)`` per finished request, ``n``, ``refresh``, ``close``;
    and vllm/utils/tqdm_utils.py ``maybe_tqdm``: the factory around an iterable, iterated)."""
    source, got = object(), []
    with listening(source, lambda p, c: got.append((p, c))):
        bar = _Reported(source, total=3, desc="Processed prompts", dynamic_ncols=True, postfix="x")
        for n in (4, 4, 4):
            assert bar.format_dict["elapsed"] > 0
            bar.postfix = "est. speed"
            bar.update(n)
        assert bar.n == 12
        bar.refresh()
        bar.close()
        wrapped = _Reported(source, ["p0", "p1"], desc="Rendering prompts")  # vllm.utils.tqdm_utils.maybe_tqdm
        assert list(wrapped) == ["p0", "p1"] and len(wrapped) == 2
    assert got == [(1, 4)] * 3  # rendering reports nothing


@pytest.fixture(scope="module")
def one_chunk(tmp_path_factory, shared_data) -> tuple[Path, Path]:
    """A 20-question curriculum (one chunk at the default chunk size) and a script answering every prompt."""
    tmp = tmp_path_factory.mktemp("one-chunk")
    out = tmp / "max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 20, K=2)], schedule="max",
                                 out=str(out), seed=0), command="curriculum build (test)")
    script = {r["prompt"][-1]["content"]: "<answer>\nFinal answer: x\n</answer>" for r in read_rows(out)}
    (tmp / "script.json").write_text(json.dumps(script))
    return out, tmp / "script.json"


def _partition(one_chunk, out: Path, *extra: str) -> subprocess.CompletedProcess:
    built, script = one_chunk
    env = {**os.environ, "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "COLUMNS": "160"}  # rich draws live
    return subprocess.run([sys.executable, "-m", "rag_curriculum.cli", "partition", str(built), "--backend", "scripted",
                           "--model", str(script), "--pass-at", "2", "--backend-arg", "delay=0.06", "--out", str(out),
                           *extra], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.slow
def test_cli_partition_in_one_chunk_shows_prompts_done_while_it_runs(one_chunk, tmp_path):
    r = _partition(one_chunk, tmp_path / "p")
    assert r.returncode == 0, r.stderr
    counts = {int(x) for x in re.findall(r"(\d+)/20 prompts", r.stderr)}
    assert len({c for c in counts if 0 < c < 20}) >= 3, r.stderr[-2000:]  # several updates inside the one call
    assert "└ chunk 0" in r.stderr and "completions/s" in r.stderr
    quiet = _partition(one_chunk, tmp_path / "q", "--no-progress")
    assert quiet.returncode == 0, quiet.stderr
    assert not re.search(r"\d+/20 (prompts|questions)|└", quiet.stderr), quiet.stderr  # no bar, no call line
