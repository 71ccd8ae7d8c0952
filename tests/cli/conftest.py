"""Fixtures the command-line tests share: a scripted model (``scripted_answers:ok`` answers "yes", ``:wrong`` a
wrong answer, ``:slow`` waits to be released), a 4-row max curriculum and a 3-row evaluation set of the MuSiQue
samples."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import MUSIQUE_DEV, MUSIQUE_TRAIN

SCRIPT = '''
import threading

release = threading.Event()
started = threading.Event()

def ok(messages, n, seed):
    return ["<think>t</think> Final answer: yes"] * n

def wrong(messages, n, seed):
    return ["<think>t</think> Final answer: zzzq"] * n

def slow(messages, n, seed):
    started.set()
    assert release.wait(60), "never released"
    return ["<think>t</think> Final answer: yes"] * n
'''


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    d = tmp_path_factory.mktemp("scripts")
    (d / "scripted_answers.py").write_text(SCRIPT)
    sys.path.insert(0, str(d))
    import scripted_answers

    yield scripted_answers
    sys.path.remove(str(d))
    sys.modules.pop("scripted_answers", None)


@pytest.fixture(scope="module")
def max_dir(tmp_path_factory, shared_data) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("cli") / "musique-max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 4, K=2)], schedule="max",
                                 out=str(out), seed=0), command="t")
    return out


@pytest.fixture(scope="module")
def eval_dir(tmp_path_factory, shared_data) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("cli") / "musique-distractor"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_DEV), 3)], setting="distractor",
                                 out=str(out), seed=0), command="t")
    return out
