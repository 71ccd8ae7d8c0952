"""`curriculum index --kind dense --engine ray` on a real local Ray cluster (2 CPUs) with Ray Data:
the passages' shards are streamed to two encoder actors and written as they finish; a run stopped after its first
shard leaves nothing where the index is expected and is resumed from that shard (only the others are encoded);
a resume over a corpus that changed meanwhile is refused in one line; the finished index is the local build's,
byte for byte, and its work folder is gone. One end-to-end test: Ray Data's start-up is the slow part."""

from __future__ import annotations

import json
import logging

import pytest
from scaling._scripts import inside, tree
from support.cli_runs import one_error, run

pytest.importorskip("faiss", reason="the dense extra is needed: pip install 'rag-curriculum[dense]'")
pytest.importorskip("ray.data", reason="the `ray` extra (ray[data]) is needed for --engine ray")

pytestmark = pytest.mark.timeout(900)  # a hang's bound: 78 s in CI, 275 s on 2 cores under three jobs

# blocks of 256 passages; a shard is 16 encoder calls of 8 * 4 passages at most, so each block is one shard
ARGS = ["--kind", "dense", "--device", "cpu", "--no-progress", "--block", "256", "--batch-size", "4"]
RAY = ["--engine", "ray", "--num-workers", "2", "--cpus-per-worker", "1"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, shared_data):
    from conftest import MUSIQUE_TRAIN
    from support.tiny_model import build_tiny_encoder

    root = tmp_path_factory.mktemp("ray-encode")
    enc = build_tiny_encoder(root / "enc", shared_data)
    lines = [json.loads(x) for x in MUSIQUE_TRAIN.read_text().splitlines()[:40]]
    passages = list(dict.fromkeys((p["title"], p["paragraph_text"]) for r in lines for p in r["paragraphs"]))[:700]
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"p{i}", "contents": f"{t}\n{x}"}) + "\n"
                              for i, (t, x) in enumerate(passages)))
    assert 512 < len(passages) <= 768  # 3 shards
    return enc, corpus


@pytest.mark.slow
def test_ray_data_encoding_stops_resumes_and_makes_the_local_index(ray_cluster, inputs, tmp_path, monkeypatch,
                                                                   caplog):
    from rag_retriever import IndexConfig, build_index
    from rag_retriever._ray_encode import RayEncoding, work_dir

    enc, corpus = inputs
    base = ["index", "--encoder", enc, "--corpus", corpus, "--out", "out", *ARGS]
    with inside(tmp_path / "local"):
        r = run(*base)
        assert r.exit_code == 0, r.output
        local = tree(tmp_path / "local" / "out")

    with inside(tmp_path / "ray") as out:
        # 1. stopped (Ctrl-C) as soon as the first shard is written
        written = []
        original = RayEncoding._write_shard

        def stop_after_one(self, i, shard, vecs):
            original(self, i, shard, vecs)
            written.append(i)
            raise KeyboardInterrupt

        monkeypatch.setattr(RayEncoding, "_write_shard", stop_after_one)
        cfg = IndexConfig(kind="dense", encoder=str(enc), corpus=str(corpus), out=str(out), device="cpu", block=256,
                          batch_size=4, engine="ray", num_workers=2)
        with pytest.raises(KeyboardInterrupt):
            build_index(cfg)
        monkeypatch.undo()
        work = work_dir(out)
        assert not out.exists() and sorted(p.name for p in out.parent.iterdir()) == [".out.encoding"]
        assert sorted(p.name for p in work.iterdir()) == ["encoding.json", f"shard-{written[0]:06d}.f32",
                                                          f"shard-{written[0]:06d}.json"]
        kept = tree(work)

        # 2. the corpus changed meanwhile: one line naming the work folder; nothing written, the shard kept
        original_corpus = corpus.read_text()
        lines = original_corpus.splitlines(keepends=True)
        lines[256 * written[0]] = json.dumps({"id": "x", "contents": "Changed\nA passage that was not there."}) + "\n"
        corpus.write_text("".join(lines))
        try:
            line = one_error(run(*base, *RAY))
        finally:
            corpus.write_text(original_corpus)
        assert f"the passages changed since the encoding in {work} stopped: shard {written[0]}" in line, line
        assert not out.exists() and tree(work) == kept

        # 3. the same command resumes: only the other shards are encoded, and the index is the local one
        with caplog.at_level(logging.INFO, logger="rag_retriever._ray_encode"):
            r = run(*base, *RAY)
        assert r.exit_code == 0, r.output
        assert "resuming the encoding" in caplog.text and "1 shard(s) already encoded" in caplog.text
        done = min(256, len(lines) - 256 * written[0])
        assert "on 2 Ray worker(s)" in caplog.text and f"{done:,} were already encoded" in caplog.text, caplog.text
        assert tree(out) == local  # vectors, FAISS index, manifest (the engine options left out of its command)
        assert not work.exists()


# -- what the cluster cannot hold -----------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_workers_no_node_can_hold_are_refused_before_a_passage_is_read(ray_cluster, inputs, tmp_path):
    """`--cpus-per-worker 100` (or a GPU) on the 2-CPU cluster: one line naming the request and the cluster, in
    seconds (Ray Data would wait for the actors without end); nothing is written."""
    import time

    enc, corpus = inputs
    for more, says in ((["--cpus-per-worker", "100"], "needs 100 CPU and 0 GPU on one node (--cpus-per-worker 100, "
                                                      "--gpus-per-worker 0)"),
                       (["--gpus-per-worker", "1"], "needs 1 CPU and 1 GPU on one node (--cpus-per-worker 1, "
                                                    "--gpus-per-worker 1)")):
        t = time.monotonic()
        line = one_error(run("index", "--encoder", enc, "--corpus", corpus, "--out", tmp_path / "out", *ARGS,
                             "--engine", "ray", *more))
        assert line == (f"error: each Ray worker {says}, but no node of the Ray cluster has that many: the largest "
                        "have 2 CPU and 0 GPU (1 node, 2 CPU and 0 GPU in all)"), line
        assert time.monotonic() - t < 60 and not list(tmp_path.iterdir())
    assert ray_cluster.is_initialized()  # the cluster it joined is left running


def test_gpu_encoding_passes_ray_datas_own_check(ray_cluster):
    """Ray Data refuses `map_batches` with GPUs and no batch size ("You must provide `batch_size`"), before anything
    is scheduled: the encoding's arguments with a GPU pass that check (no GPU needed: nothing runs)."""
    import ray.data
    from rag_retriever._ray_encode import map_batches_args

    args = map_batches_args(workers=2, cpus=1, gpus=1, device="cuda", settings={"name": "enc"}, batch_size=4, step=32,
                            shard_rows=512)
    assert args["batch_size"] == 512 and args["num_gpus"] == 1  # a batch is one (padded) shard
    ds = ray.data.from_items([{"text": "a"}])
    ds.map_batches(**args)  # Ray's own check of the arguments
    with pytest.raises(ValueError, match="You must provide `batch_size`"):  # the check it passes is real
        ds.map_batches(**{**args, "batch_size": None})


def _encoding(inputs, out, dim=8, **settings):
    from rag_retriever import IndexConfig
    from rag_retriever._encoder import EncoderSettings
    from rag_retriever._ray_encode import RayEncoding

    enc, corpus = inputs
    cfg = IndexConfig(kind="dense", encoder=str(enc), corpus=str(corpus), out=str(out), device="cpu", block=256,
                      batch_size=4, engine="ray", num_workers=1)
    return RayEncoding(cfg, out, EncoderSettings(name=str(enc), **settings), dim)


def test_a_resume_ignores_the_query_prefix(ray_cluster, inputs, tmp_path):
    """The passages' vectors do not depend on --query-prefix: a stopped encoding resumes with another one (also
    from a record written before the prefix was left out of it); --passage-prefix is still refused."""
    from rag_retriever._ray_encode import EncodingError, work_dir

    out = tmp_path / "out"
    _encoding(inputs, out, query_prefix="query: ").close()
    _encoding(inputs, out, query_prefix="Represent this question: ").close()
    path = work_dir(out) / "encoding.json"
    old = json.loads(path.read_text())
    old["encoder"]["query_prefix"] = "q: "  # as an earlier version recorded it
    path.write_text(json.dumps(old))
    _encoding(inputs, out, query_prefix="query: ").close()
    with pytest.raises(EncodingError, match=r"was made with other settings \(the encoder's passage_prefix: "
                                            r"\"passage: \", now \"doc: \"\)"):
        _encoding(inputs, out, passage_prefix="doc: ")


def test_a_shard_whose_vectors_changed_is_encoded_again(ray_cluster, inputs, tmp_path, caplog):
    """A finished shard's record holds the SHA-256 of its vectors: a resume over a `.f32` edited since (same size)
    encodes that shard again, with a warning naming it, as it does a record without the digest."""
    import numpy as np
    from rag_retriever._ray_encode import work_dir

    out = tmp_path / "out"
    texts = [f"passage {i}" for i in range(40)]
    first = _encoding(inputs, out)
    assert first.add(texts, 0) == 0
    first._write_shard(0, first.shards[0], np.ones((40, 8), dtype=np.float32))
    again = _encoding(inputs, out)
    assert again.add(texts, 0) == 40 and again.shards[0]["ref"] is None  # resumed: the shard is done
    work = work_dir(out)
    f = work / "shard-000000.f32"
    data = bytearray(f.read_bytes())
    data[:4] = np.float32(2).tobytes()
    f.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="rag_retriever._ray_encode"):
        edited = _encoding(inputs, out)
        assert edited.add(texts, 0) == 0 and edited.shards[0]["ref"] is not None  # to encode again
    assert (f"shard 0 of the stopped encoding in {work}: its vectors (shard-000000.f32) are not those written; "
            "encoding it again") in caplog.text, caplog.text
    record = json.loads((work / "shard-000000.json").read_text())
    del record["vectors_sha256"]
    (work / "shard-000000.json").write_text(json.dumps(record))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rag_retriever._ray_encode"):
        assert _encoding(inputs, out).add(texts, 0) == 0
    assert "its record (shard-000000.json) holds no digest of its vectors; encoding it again" in caplog.text
