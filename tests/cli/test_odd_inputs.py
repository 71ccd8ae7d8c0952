"""Inputs a careful user rarely gives, each answered by one line that names the file or the value and says what to
do: an index whose manifest is missing, damaged or names no kind (`validate`, with or without --quick, and
`serve`); encoder options given for a BM25 index; a retriever URL whose port is no port; ``--device cuda`` where
torch has no GPU."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import MUSIQUE_TRAIN
from support.cli_runs import one_error, run
from support.servers import busy_port

pytest.importorskip("bm25s")


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, shared_data):
    from rag_retriever import IndexConfig, build_index

    out = tmp_path_factory.mktemp("odd-inputs") / "ix"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), depth=5))
    return out


DAMAGE = {
    "missing": (None, "holds an index's files (passages.bin, ranked_ids.npy) but no manifest.json"),
    "cut short": ('{"kind": "index", "format"', "manifest.json: cannot be read as JSON (JSONDecodeError"),
    "no kind": ("{}", "manifest.json: names no kind (neither a shard directory's nor an index's manifest)"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize("quick", [False, True])
def test_validate_names_an_index_manifest_missing_or_damaged(index_dir, tmp_path, damage, quick):
    text, said = DAMAGE[damage]
    d = tmp_path / "ix"
    shutil.copytree(index_dir, d)
    if text is None:
        (d / "manifest.json").unlink()
    else:
        (d / "manifest.json").write_text(text)
    r = run("validate", d, *(["--quick"] if quick else []))
    line = one_error(r)
    assert said in line and str(d) in line, line
    assert "schema_version None" not in r.output and "--quick is for" not in r.output, r.output
    assert "build the index again into a new --out" in r.output, r.output


def test_a_shard_directory_manifest_without_a_schema_version_says_so(shared_data, tmp_path):
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path / "b"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 4)], out=str(out), seed=0))
    m = json.loads((out / "manifest.json").read_text())
    del m["schema_version"]
    (out / "manifest.json").write_text(json.dumps(m))
    line = one_error(run("validate", out))
    assert "manifest.json has no schema_version (this toolkit reads 1)" in line, line


def test_serve_names_an_index_manifest_that_names_no_kind(index_dir, tmp_path):
    d = tmp_path / "ix"
    shutil.copytree(index_dir, d)
    (d / "manifest.json").write_text("{}")
    line = one_error(run("serve", "--index", d, "--port", str(busy_port())))
    assert line == f"error: {d / 'manifest.json'}: names no kind: it is damaged, or this toolkit did not write it", \
        line


@pytest.mark.parametrize("options", [["--encoder", "intfloat/e5-base-v2"], ["--device", "cpu"],
                                     ["--allow-other-encoder"]])
def test_encoder_options_for_a_bm25_index_are_refused_not_ignored(index_dir, options):
    pytest.importorskip("fastapi", reason="the serve extra is needed")
    r = run("serve", "--index", index_dir, *options, "--port", str(busy_port()))
    line = one_error(r, code=2)
    assert line.startswith(f"error: {' '.join(options)}: {index_dir} is a bm25 index, which uses no encoder"), line
    assert f"drop {options[0]}" in r.output and "serving" not in r.output, r.output


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/retrieve", "http://127.0.0.1:http/retrieve",
                                 "http://alice:pa55#SECRET@127.0.0.1:8000/retrieve"])
def test_a_retriever_url_whose_port_is_no_port_is_one_line_at_once(min_max_shards, tmp_path, url):
    import time

    t0 = time.perf_counter()
    r = run("eval", "--agent", "search-r1", "--retriever", url, "--backend", "scripted", "--model",
            "p=support.agent_policies:search_then_answer", "--data", min_max_shards, "--limit", "1", "--out", tmp_path / "ev",
            "--no-progress")
    line = one_error(r)
    assert "its port is not a number in 1..65535" in line, line
    assert "unreachable" not in r.output and "retries" not in r.output and "SECRET" not in r.output, r.output
    assert "pa55" not in r.output  # the part of a password a parser read as the port is not echoed either
    assert time.perf_counter() - t0 < 30  # no retries with backoff
    assert not (tmp_path / "ev").exists()


@pytest.mark.slow
def test_device_cuda_where_torch_has_no_gpu_is_one_line(shared_data, tmp_path, monkeypatch):
    """``curriculum index --kind dense --device cuda`` where torch sees no GPU (this CPU build, or a GPU machine's
    torch told so): one usage line naming the device and torch, before the model loads."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("sentence_transformers")
    from support.tiny_model import build_tiny_encoder

    encoder = build_tiny_encoder(tmp_path / "enc", shared_data)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    r = run("index", "-d", "musique", "-i", MUSIQUE_TRAIN, "--kind", "dense", "--encoder", encoder, "--device",
            "cuda", "-o", tmp_path / "ix", "--no-progress")
    line = one_error(r, code=2)
    assert line.startswith("error: --device cuda: "), line
    assert f"(torch {torch.__version__})" in line and "give --device cpu" in r.output, r.output
    assert not (tmp_path / "ix").exists()


def test_train_on_an_index_is_one_line_that_names_no_file_it_did_not_write(index_dir, tmp_path):
    """``data.shards=`` an index: one line saying it is an index and where an index goes; the start line names no
    train_config.yaml (none is written)."""
    pytest.importorskip("trl")
    r = run("train", "recipe=rag-rl-min-max", f"data.shards={index_dir}", f"run.output_dir={tmp_path / 'run'}")
    line = one_error(r)
    assert line == (f"error: {index_dir} is an index (made by `curriculum index`: passages to search), not a shard "
                    "directory of rows"), line
    assert "--retriever" in r.output and "train_config.yaml" not in r.output, r.output
    assert not (tmp_path / "run" / "train_config.yaml").exists()


PROGRESS_THEN_WARNINGS = '''
import logging
from rag_curriculum._cli.common import configure_logging
configure_logging()
from tqdm import tqdm
bar = tqdm(total=3, desc="encoding")
bar.update(1)
logging.getLogger("rag_curriculum.x").warning("during a bar")
bar.update(1)
bar.close()
bar = tqdm(total=3, desc="loading", leave=False)  # cleared on close: its line ends in a carriage return
bar.update(3)
bar.close()
logging.getLogger("rag_curriculum.x").warning("after a cleared bar")
logging.getLogger("rag_curriculum.x").warning("and another")
'''


def test_a_warning_after_a_progress_bar_starts_its_own_line_in_a_redirected_stderr(tmp_path):
    """stderr to a file: tqdm's ``\\r`` updates leave its line open; each WARNING starts a line of its own, and
    consecutive log lines get no blank line between them."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    with (tmp_path / "err").open("wb") as err:
        done = subprocess.run([sys.executable, "-c", PROGRESS_THEN_WARNINGS], stderr=err, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0
    data = (tmp_path / "err").read_bytes()
    lines = data.split(b"\n")
    warned = [line for line in lines if b"WARNING" in line]
    assert warned == [b"WARNING rag_curriculum.x: during a bar", b"WARNING rag_curriculum.x: after a cleared bar",
                      b"WARNING rag_curriculum.x: and another"], data
    assert b"\r" in data  # the bars were drawn
    assert b"after a cleared bar\nWARNING rag_curriculum.x: and another\n" in data, data


def test_a_build_on_an_index_of_another_dataset_is_warned(index_dir, tmp_path, caplog):
    """``--distractors bm25 --index`` of MuSiQue for a HotpotQA build: one warning naming the index, both datasets
    and what to build instead; a MuSiQue build on it gets none."""
    import logging

    from conftest import HOTPOT_TRAIN

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    def build(dataset, path, out):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            build_curriculum(BuildConfig(sources=[SourceSpec(dataset, str(path), 8)], distractors="bm25",
                                         index=str(index_dir), out=str(tmp_path / out), seed=0))
        return [r.getMessage() for r in caplog.records if "the index was built from" in r.getMessage()]

    (said,) = build("hotpotqa", HOTPOT_TRAIN, "hotpot")
    assert said.startswith(f"{index_dir}: the index was built from musique, not hotpotqa"), said
    assert "curriculum index -d hotpotqa -i FILE" in said and "--corpus" in said, said
    assert build("musique", MUSIQUE_TRAIN, "musique") == []


@pytest.mark.parametrize("given", ["--ray-address", "RAY_ADDRESS"])
def test_an_http_ray_address_is_one_line_saying_which_address_to_give(given, monkeypatch):
    """The dashboard's address (http://HOST:8265) where a cluster's is asked: refused before Ray is asked, naming
    where it came from and the address to give."""
    import logging

    ray = pytest.importorskip("ray")
    from rag_curriculum._plumbing import connect_ray
    from rag_curriculum.errors import UsageError

    if ray.is_initialized():  # pragma: no cover - a cluster of another test in this process
        pytest.skip("a Ray cluster is running in this process")
    address = "http://127.0.0.1:8265"
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    if given == "RAY_ADDRESS":
        monkeypatch.setenv("RAY_ADDRESS", address)
    with pytest.raises(UsageError) as e:
        connect_ray(ray, address if given == "--ray-address" else None, error=UsageError,
                    log=logging.getLogger("t"), purpose="a test")
    assert str(e.value) == (f"{given} {address}: an HTTP address (a Ray dashboard's or job API's, port 8265), not "
                            "a cluster's"), str(e.value)
    assert "HOST:6379" in e.value.hint and not ray.is_initialized()


def test_a_ray_refusal_is_said_whole_not_cut_at_its_first_line(monkeypatch):
    """Ray's multi-line advice ("To fix this, either:\\n 1. ...\\n 2. ...") is kept whole on the one line."""
    import logging
    import types

    from rag_curriculum._plumbing import connect_ray
    from rag_curriculum.errors import UsageError

    def init(**kw):
        raise ValueError("Invalid address. To fix this, either:\n  1. unset it, or\n  2. give HOST:6379.")

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    fake = types.SimpleNamespace(is_initialized=lambda: False, init=init)  # Ray's refusal, without a cluster
    with pytest.raises(UsageError) as e:
        connect_ray(fake, "auto", error=UsageError, log=logging.getLogger("t"), purpose="a test")
    assert str(e.value) == ("could not connect to the Ray cluster at auto: Invalid address. To fix this, either: "
                            "1. unset it, or 2. give HOST:6379."), str(e.value)


def test_a_ray_address_whose_port_is_no_port_says_so(monkeypatch):
    """``--ray-address 127.0.0.1:99999``: an invalid port, not "connection refused" nor an unknown host."""
    import logging

    ray = pytest.importorskip("ray")
    from rag_curriculum._plumbing import connect_ray
    from rag_curriculum.errors import UsageError

    if ray.is_initialized():  # pragma: no cover - a cluster of another test in this process
        pytest.skip("a Ray cluster is running in this process")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(UsageError) as e:
        connect_ray(ray, "127.0.0.1:99999", error=UsageError, log=logging.getLogger("t"), purpose="a test")
    assert str(e.value) == ("could not connect to the Ray cluster at 127.0.0.1:99999: 99999 is not a port "
                            "(1..65535)"), str(e.value)
