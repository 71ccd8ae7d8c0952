"""`curriculum index --kind dense --engine ray` (issue 45 item 6) on a real local Ray cluster (2 CPUs) with Ray Data:
the passages' shards are streamed to two encoder actors and written as they finish; a run stopped after its first
shard leaves nothing where the index is expected and is resumed from that shard (only the others are encoded);
a resume over a corpus that changed meanwhile is refused in one line; the finished index is the local build's,
byte for byte, and its work folder is gone. One end-to-end test: Ray Data's start-up is the slow part."""

from __future__ import annotations

import json
import logging

import pytest
from cli_runs import one_error, run
from scaling._scripts import inside, tree

pytest.importorskip("faiss", reason="the dense extra is needed: pip install 'rag-curriculum[dense]'")
pytest.importorskip("ray.data", reason="the `ray` extra (ray[data]) is needed for --engine ray")

pytestmark = pytest.mark.timeout(300)

# blocks of 256 passages; a shard is 16 encoder calls of 8 * 4 passages at most, so each block is one shard
ARGS = ["--kind", "dense", "--device", "cpu", "--no-progress", "--block", "256", "--batch-size", "4"]
RAY = ["--engine", "ray", "--num-workers", "2", "--cpus-per-worker", "1"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, shared_data):
    from conftest import MUSIQUE_TRAIN
    from tiny_model import build_tiny_encoder

    root = tmp_path_factory.mktemp("ray-encode")
    enc = build_tiny_encoder(root / "enc", shared_data)
    lines = [json.loads(x) for x in MUSIQUE_TRAIN.read_text().splitlines()[:40]]
    passages = list(dict.fromkeys((p["title"], p["paragraph_text"]) for r in lines for p in r["paragraphs"]))[:700]
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"p{i}", "contents": f"{t}\n{x}"}) + "\n"
                              for i, (t, x) in enumerate(passages)))
    assert 512 < len(passages) <= 768  # 3 shards
    return enc, corpus


def test_ray_data_encoding_stops_resumes_and_makes_the_local_index(ray_cluster, inputs, tmp_path, monkeypatch,
                                                                   caplog):
    from rag_curriculum.retrieval import IndexConfig, build_index
    from rag_curriculum.retrieval._ray_encode import RayEncoding, work_dir

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
        with caplog.at_level(logging.INFO, logger="rag_curriculum.retrieval._ray_encode"):
            r = run(*base, *RAY)
        assert r.exit_code == 0, r.output
        assert "resuming the encoding" in caplog.text and "1 shard(s) already encoded" in caplog.text
        done = min(256, len(lines) - 256 * written[0])
        assert "on 2 Ray worker(s)" in caplog.text and f"{done:,} were already encoded" in caplog.text, caplog.text
        assert tree(out) == local  # vectors, FAISS index, manifest (the engine options left out of its command)
        assert not work.exists()
