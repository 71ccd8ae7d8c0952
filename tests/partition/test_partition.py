"""`curriculum partition` on real rows from ../shared/data: exact buckets and statistics with a scripted base model,
balancing, re-bucketing without generation, skipped prompts, sharding and merging, building from a dataset file,
the CLI, and an end-to-end run with the transformers backend on a tiny model (real generation on the CPU)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import MUSIQUE_TRAIN
from typer.testing import CliRunner

from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.difficulty.accuracy import pass_at_k_curve
from rag_curriculum.generation import PromptTooLongError
from rag_curriculum.generation._scripted import ScriptedBackend
from rag_curriculum.partition import (
    STATS_SCHEMA,
    PartitionConfig,
    PartitionError,
    merge_partitions,
    partition,
)
from rag_curriculum.rewards import answer_f1, parse_completion
from rag_curriculum.shards import ROW_FIELDS, read_manifest, read_rows, read_table, validate_shards

K_SAMPLES = 4
#: Correct samples (answer F1 = 1) per question, by input position; a pattern long enough to cover every bucket.
C = [0, 1, 4, 2, 0, 3, 0, 0, 4, 1, 0, 2]
#: Questions whose wrong samples still get partial credit (F1 < 1), to check max F1 and the "= 1" rule.
PARTIAL = {0, 3, 6}


def right(answer: str) -> str:
    return f"<reasoning>\nfound it\n</reasoning>\n<answer>\nFinal answer: {answer}\nSupporting passages: x\n</answer>"


@pytest.fixture(scope="module")
def max_dir(tmp_path_factory, shared_data) -> Path:
    out = tmp_path_factory.mktemp("max") / "musique-max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), len(C), K=3)], schedule="max",
                                 out=str(out), seed=0), command="curriculum build (test)")
    return out


@pytest.fixture(scope="module")
def rows(max_dir):
    return read_rows(max_dir)


class Oracle:
    """A scripted base model: question i answers right in its first C[i] samples; the other samples are wrong
    (or, for PARTIAL questions, the answer plus extra words: partial credit), and the last sample of question 5
    is right but breaks the format (for --strict-format)."""

    def __init__(self, rows):
        self.by_prompt = {r["prompt"][-1]["content"]: (i, r["answers"][0]) for i, r in enumerate(rows)}

    def __call__(self, messages, n, seed):
        i, answer = self.by_prompt[messages[-1]["content"]]
        out = []
        for j in range(n):
            if j < C[i]:
                out.append(f"Final answer: {answer}" if (i == 5 and j == C[i] - 1) else right(answer))
            elif i in PARTIAL:
                out.append(right(f"{answer} and something else"))
            else:
                out.append(right("zzzq"))
        return out


def oracle(rows, **kw):
    return ScriptedBackend(script=Oracle(rows), **kw)


def cfg_for(max_dir, out, **kw):
    kw = {"backend": "scripted", "samples": K_SAMPLES, "chunk_size": 5, **kw}
    return PartitionConfig(shards=str(max_dir), out=str(out), **kw)


def ids_of(d):
    return read_table(d, columns=["id"]).column("id").to_pylist()


def test_buckets_and_statistics_are_exact(max_dir, rows, tmp_path):
    res = partition(cfg_for(max_dir, tmp_path / "p"), backend=oracle(rows), command="test")
    assert res.complete and res.run.generated_chunks == 3 and res.run.completions == len(C) * K_SAMPLES
    ids = [r["id"] for r in rows]
    assert ids_of(tmp_path / "p" / "answerable") == [ids[i] for i, c in enumerate(C) if c > 0]
    assert ids_of(tmp_path / "p" / "unanswerable") == [ids[i] for i, c in enumerate(C) if c == 0]
    assert ids_of(tmp_path / "p" / "learnable") == [ids[i] for i, c in enumerate(C) if 0 < c < K_SAMPLES]
    st = pq.read_table(tmp_path / "p" / "stats.parquet")
    assert st.schema.equals(STATS_SCHEMA)
    s = st.to_pylist()
    assert [r["id"] for r in s] == ids and [r["position"] for r in s] == list(range(len(C)))
    for i, r in enumerate(s):
        assert (r["n"], r["c"]) == (K_SAMPLES, C[i])
        assert r["pass_rate"] == C[i] / K_SAMPLES and r["pass_at_k"] == pass_at_k_curve(K_SAMPLES, C[i])
        assert r["bucket"] == ("answerable" if C[i] else "unanswerable")
        assert r["learnable"] == (0 < C[i] < K_SAMPLES)
        ans = rows[i]["answers"]
        partial = answer_f1(f"{ans[0]} and something else", ans)
        want = [1.0] * C[i] + [partial if i in PARTIAL else 0.0] * (K_SAMPLES - C[i])
        assert r["sample_f1"] == want and r["max_f1"] == max(want)
        assert r["mean_f1"] == pytest.approx(sum(want) / K_SAMPLES)
        assert r["base_predictions"][0] == (ans[0] if C[i] else r["base_predictions"][0])
        assert r["num_valid_format"] == K_SAMPLES - (1 if i == 5 else 0)
        assert (r["source_id"], r["data_source"], r["level"], r["hops"]) == (
            rows[i]["source_id"], "musique", rows[i]["level"], rows[i]["hops"])
        assert r["seed"] is not None and r["skipped"] is None and r["kept"] is True
    assert 0 < min(r["max_f1"] for r in s if r["bucket"] == "unanswerable" and r["position"] in PARTIAL) < 1
    counts = res.counts
    assert (counts["answerable"], counts["unanswerable"], counts["learnable"]) == (7, 5, 5)
    assert counts["correct_samples_histogram"] == {"0": 5, "1": 2, "2": 2, "3": 1, "4": 2}
    assert counts["mean_pass_at_k"]["1"] == round(sum(C) / (K_SAMPLES * len(C)), 6)
    # mean pass@k's 95% interval: the questions resampled with replacement (1,000 draws, seed 0), written out here
    curves = [pass_at_k_curve(K_SAMPLES, c) for c in C]
    draws = np.random.default_rng(0).integers(0, len(C), size=(1000, len(C)))
    for k in range(K_SAMPLES):
        means = [sum(curves[i][k] for i in row) / len(row) for row in draws]
        want = [np.percentile(means, 2.5), np.percentile(means, 97.5)]
        assert counts["pass_at_k_interval"][str(k + 1)] == pytest.approx(want, abs=1e-6)
        assert want[0] <= counts["mean_pass_at_k"][str(k + 1)] <= want[1]


def test_outputs_are_shard_directories_in_the_builder_schema_plus_statistics(max_dir, rows, tmp_path):
    partition(cfg_for(max_dir, tmp_path / "p"), backend=oracle(rows), command="test")
    by_id = {r["id"]: r for r in rows}
    for bucket in ("answerable", "unanswerable", "learnable"):
        d = tmp_path / "p" / bucket
        m = validate_shards(d)
        assert m["kind"] == "curriculum" and m["partition"]["bucket"] == bucket and m["command"] == "test"
        t = read_table(d)
        for f in ROW_FIELDS:
            assert t.schema.field(f.name).type.equals(f.type), f.name
        for name in ("input_index", "n", "c", "sample_f1", "max_f1", "mean_f1", "pass_rate", "pass_at_k",
                     "num_valid_format"):
            assert name in t.schema.names
        assert "completions" not in t.schema.names and "base_completions" not in t.schema.names
        out_rows = t.to_pylist()
        assert [r["curriculum_index"] for r in out_rows] == list(range(len(out_rows)))
        assert [r["extra_info"]["index"] for r in out_rows] == list(range(len(out_rows)))
        for r in out_rows:
            src = by_id[r["id"]]
            assert r["input_index"] == src["curriculum_index"]
            for k in ("prompt", "passages", "answers", "gold_labels", "level", "hops", "reward_model"):
                assert r[k] == src[k]
            assert r["c"] == C[r["input_index"]]
        card = (d / "README.md").read_text()
        assert card.startswith("---\nlicense:") and "pass@4" in card and "| c | pass rate c/k |" in card
        assert "![distribution of pass rates](pass_rate.png)" in card and (d / "pass_rate.png").stat().st_size > 0
    summary = json.loads((tmp_path / "p" / "partition.json").read_text())
    assert summary["outputs"] == {"answerable": {"path": "answerable", "rows": 7},
                                  "unanswerable": {"path": "unanswerable", "rows": 5},
                                  "learnable": {"path": "learnable", "rows": 5}}


def test_balance_clips_both_buckets_to_the_same_size_with_the_seed(max_dir, rows, tmp_path):
    res = partition(cfg_for(max_dir, tmp_path / "p", balance=True, seed=3), backend=oracle(rows), command="t")
    a, u = ids_of(tmp_path / "p" / "answerable"), ids_of(tmp_path / "p" / "unanswerable")
    ids = [r["id"] for r in rows]
    assert len(a) == len(u) == 5 and u == [ids[i] for i, c in enumerate(C) if c == 0]
    assert set(a) < {ids[i] for i, c in enumerate(C) if c > 0} and a == sorted(a, key=ids.index)
    assert len(ids_of(tmp_path / "p" / "learnable")) == 5  # never clipped
    assert res.summary["balance"] == {"enabled": True, "answerable_before": 7, "unanswerable_before": 5, "size": 5}
    kept = {r["id"] for r in pq.read_table(tmp_path / "p" / "stats.parquet").to_pylist() if r["kept"]}
    assert kept == set(a) | set(u)
    res2 = partition(cfg_for(max_dir, tmp_path / "q", balance=True, seed=3), backend=oracle(rows), command="t")
    assert ids_of(tmp_path / "q" / "answerable") == a and res2.counts == res.counts


@pytest.mark.slow
def test_rebucketing_never_generates_again(max_dir, rows, tmp_path):
    b = oracle(rows)
    partition(cfg_for(max_dir, tmp_path / "p"), backend=b, command="t")
    calls = list(b.calls)
    res = partition(cfg_for(max_dir, tmp_path / "p", strict_format=True), backend=b, command="t")
    assert b.calls == calls and res.run.generated_chunks == 0
    st = {r["position"]: r for r in pq.read_table(tmp_path / "p" / "stats.parquet").to_pylist()}
    assert st[5]["c"] == C[5] - 1  # its last right sample breaks the format
    res = partition(cfg_for(max_dir, tmp_path / "p", correct_f1=0.2), backend=b, command="t")  # partial F1 is 0.4
    assert b.calls == calls
    assert res.counts["answerable"] == 7 + len([i for i in PARTIAL if C[i] == 0])


def test_keep_completions(max_dir, rows, tmp_path):
    partition(cfg_for(max_dir, tmp_path / "p", keep_completions=True), backend=oracle(rows), command="t")
    t = read_table(tmp_path / "p" / "answerable").to_pylist()
    o = Oracle(rows)
    for r in t:
        assert r["base_completions"] == o(r["prompt"], K_SAMPLES, 0)


class TooLong(ScriptedBackend):
    def generate(self, prompts, sampling, *, seeds=None):
        bad = [i for i, p in enumerate(prompts) if len(p[-1]["content"]) > self.limit]
        if bad:
            raise PromptTooLongError(bad, limit=self.limit)
        return super().generate(prompts, sampling, seeds=seeds)


def test_too_long_prompts_are_counted_and_left_out_of_every_bucket(max_dir, rows, tmp_path):
    lengths = sorted(len(r["prompt"][-1]["content"]) for r in rows)
    b = TooLong(script=Oracle(rows))
    b.limit = lengths[-3]  # the two longest prompts do not fit
    res = partition(cfg_for(max_dir, tmp_path / "p"), backend=b, command="t")
    assert res.counts["skipped"] == 2 and res.counts["scored"] == len(C) - 2
    st = pq.read_table(tmp_path / "p" / "stats.parquet").to_pylist()
    skipped = {r["id"] for r in st if r["skipped"]}
    assert len(skipped) == 2 and all(r["bucket"] is None and r["n"] is None for r in st if r["skipped"])
    every = set(ids_of(tmp_path / "p" / "answerable")) | set(ids_of(tmp_path / "p" / "unanswerable"))
    assert not skipped & every and len(every) == len(C) - 2


def test_shards_in_one_directory_finish_by_themselves(max_dir, rows, tmp_path):
    partition(cfg_for(max_dir, tmp_path / "one"), backend=oracle(rows), command="t")
    r0 = partition(cfg_for(max_dir, tmp_path / "shared", num_shards=2, shard_index=0), backend=oracle(rows),
                   command="t")
    assert not r0.complete and not (tmp_path / "shared" / "partition.json").exists()
    r1 = partition(cfg_for(max_dir, tmp_path / "shared", num_shards=2, shard_index=1), backend=oracle(rows),
                   command="t")
    assert r1.complete
    for f in ("stats.parquet", "answerable/data/part-00000.parquet", "unanswerable/data/part-00000.parquet",
              "learnable/README.md", "learnable/pass_rate.png"):
        assert (tmp_path / "one" / f).read_bytes() == (tmp_path / "shared" / f).read_bytes(), f
    m1, m2 = (json.loads((tmp_path / d / "answerable" / "manifest.json").read_text()) for d in ("one", "shared"))
    assert m1["config"].pop("out") != m2["config"].pop("out") and m1 == m2


@pytest.mark.slow
def test_merge_joins_directories_from_several_machines(max_dir, rows, tmp_path):
    partition(cfg_for(max_dir, tmp_path / "one"), backend=oracle(rows), command="t")
    for i in range(3):
        r = partition(cfg_for(max_dir, tmp_path / f"node{i}", num_shards=3, shard_index=i), backend=oracle(rows),
                      command="t")
        assert not r.complete
    with pytest.raises(PartitionError, match="chunk"):
        merge_partitions([tmp_path / "node0", tmp_path / "node1"], out=tmp_path / "merged", command="t")
    res = merge_partitions([tmp_path / f"node{i}" for i in range(3)], out=tmp_path / "merged", command="t")
    assert res.complete and res.counts == json.loads((tmp_path / "one" / "partition.json").read_text())["counts"]
    assert pq.read_table(tmp_path / "merged" / "stats.parquet").equals(pq.read_table(tmp_path / "one" / "stats.parquet"))
    for b in ("answerable", "unanswerable", "learnable"):
        assert read_table(tmp_path / "merged" / b).equals(read_table(tmp_path / "one" / b))
    # output options may change at merge time, without generating
    res = merge_partitions([tmp_path / "merged"], balance=True, command="t")
    assert res.summary["balance"]["size"] == 5 and len(ids_of(tmp_path / "merged" / "answerable")) == 5
    with pytest.raises(PartitionError, match="only change"):
        merge_partitions([tmp_path / "merged"], k=8)
    other = cfg_for(max_dir, tmp_path / "other", temperature=0.5)
    partition(other, backend=oracle(rows), command="t")
    with pytest.raises(PartitionError, match="another run"):
        merge_partitions([tmp_path / "merged", tmp_path / "other"], out=tmp_path / "x")


def test_another_run_in_the_same_directory_is_refused(max_dir, rows, tmp_path):
    partition(cfg_for(max_dir, tmp_path / "p"), backend=oracle(rows), command="t")
    with pytest.raises(Exception, match="other settings"):
        partition(cfg_for(max_dir, tmp_path / "p", samples=2), backend=oracle(rows), command="t")
    res = partition(cfg_for(max_dir, tmp_path / "p", samples=2, overwrite=True), backend=oracle(rows), command="t")
    assert res.complete and res.counts["samples_per_question"] == 2


@pytest.mark.slow
def test_build_from_a_dataset_file_first(rows, tmp_path, shared_data):
    cfg = PartitionConfig(dataset="musique", input=str(MUSIQUE_TRAIN), n=len(C), K=3, out=str(tmp_path / "p"),
                          backend="scripted", samples=K_SAMPLES, chunk_size=5)
    res = partition(cfg, backend=oracle(rows), command="t")
    assert res.complete and validate_shards(tmp_path / "p" / "input")["config"]["schedule"] == "max"
    assert read_rows(tmp_path / "p" / "input") == rows  # the same build as `curriculum build --schedule max`
    again = partition(cfg, backend=oracle(rows), command="t")
    assert again.run.generated_chunks == 0


@pytest.mark.slow
def test_a_dataset_file_is_built_by_the_row_stages_and_a_full_build_is_reused(rows, tmp_path, shared_data):
    """From a dataset file, partition runs the build's stages that make rows (sources, plan, render, shards and
    manifest), not the whole build: OUT/input holds the shards and manifest `curriculum build --schedule max`
    writes, without its data card and plot. An OUT/input with them (what earlier versions built) is reused as it
    is, with the same outputs."""
    out = tmp_path / "p"
    cfg = PartitionConfig(dataset="musique", input=str(MUSIQUE_TRAIN), n=len(C), K=3, out=str(out),
                          backend="scripted", samples=K_SAMPLES, chunk_size=5)
    partition(cfg, backend=oracle(rows), command="t")
    built = out / "input"
    assert sorted(p.name for p in built.iterdir()) == ["data", "manifest.json"]
    mine = read_manifest(built)
    full = tmp_path / "full" / "input"  # the same name: the manifest records it
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), len(C), K=3)], schedule="max",
                                 out=str(full), seed=0, overwrite=True, allow_split_mismatch=True, n_up_to=True),
                     command=mine["command"])
    whole = read_manifest(full)
    assert (mine.pop("files"), whole.pop("files")) == ([], ["README.md", "level_by_index.png"])
    assert (mine.pop("file_sha256"), sorted(whole.pop("file_sha256"))) == ({}, ["README.md", "level_by_index.png"])
    assert mine == whole  # shards (their hashes), counts, sources, config: the whole build's
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    shutil.rmtree(built)
    full.rename(built)
    again = partition(cfg, backend=oracle(rows), command="t")
    assert again.run.generated_chunks == 0 and (built / "README.md").exists()  # reused, not built again
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    # an input built before n meant "up to" (no n_up_to in its config; it took exactly n) is reused too
    m = read_manifest(built)
    del m["config"]["n_up_to"]
    (built / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
    again = partition(cfg, backend=oracle(rows), command="t")
    assert again.run.generated_chunks == 0 and "n_up_to" not in read_manifest(built)["config"]


def test_bad_configs():
    for kw, match in [({}, "no questions"), (dict(shards="x", dataset="musique"), "not both"),
                      (dict(shards="x", samples=0), "pass-at"), (dict(shards="x", correct_f1=1.5), "correct_f1"),
                      (dict(shards="x", num_shards=2, shard_index=2), "shard_index"),
                      (dict(shards="x", backend="vllm"), "--model"), (dict(shards="x", backend="vlm"), "vllm"),
                      (dict(shards="x", temperature=-1), "temperature")]:
        kw.setdefault("backend", "scripted")
        with pytest.raises((ValueError, KeyError), match=match):
            PartitionConfig(**kw).validate()


def test_eval_reads_the_buckets(max_dir, rows, tmp_path):
    """`curriculum eval --stats` reads base-answerable / base-unanswerable by dataset and source id."""
    from rag_curriculum.evaluation import load_buckets

    partition(cfg_for(max_dir, tmp_path / "p"), backend=oracle(rows), command="t")
    buckets = load_buckets([tmp_path / "p"])
    assert {(k[1], k[2]): v for k, v in buckets.items()} == {
        ("musique", r["source_id"]): ("answerable" if C[i] else "unanswerable") for i, r in enumerate(rows)}


# -- the command line ----------------------------------------------------------------------------------------------
@pytest.fixture()
def cli():
    from rag_curriculum.cli import app  # the real `curriculum` command

    return app


@pytest.mark.slow
def test_cli_partition_and_merge(cli, max_dir, rows, tmp_path):
    o = Oracle(rows)
    script = {r["prompt"][-1]["content"]: o(r["prompt"], K_SAMPLES, 0) for r in rows}
    (tmp_path / "script.json").write_text(json.dumps(script))
    common = ["partition", str(max_dir), "--backend", "scripted", "--model", str(tmp_path / "script.json"),
              "--pass-at", "4", "--chunk-size", "5", "--no-progress", "--concurrency", "3"]
    runner = CliRunner()
    r = runner.invoke(cli, [*common, "--out", str(tmp_path / "a"), "--num-shards", "2", "--shard-index", "0"])
    assert r.exit_code == 0, r.output
    assert "does not apply to the scripted backend" in r.output and "shard 0 of 2 is done" in r.output
    r = runner.invoke(cli, [*common, "--out", str(tmp_path / "b"), "--num-shards", "2", "--shard-index", "1"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, ["partition-merge", str(tmp_path / "a"), str(tmp_path / "b"), "--balance"])
    assert r.exit_code == 0, r.output
    assert "base-answerable (c > 0)" in r.output and "answerable/ (5 rows)" in r.output
    st = pq.read_table(tmp_path / "a" / "stats.parquet").to_pylist()
    assert [x["c"] for x in st] == C
    m = read_manifest(tmp_path / "a" / "answerable")
    assert m["partition"]["balance"]["size"] == 5 and m["config"]["balance"] is True
    r = runner.invoke(cli, [*common, "--out", str(tmp_path / "c"), "--max-chunks", "1"])
    assert r.exit_code == 0 and "run the same command again" in r.output
    r = runner.invoke(cli, [*common, "--out", str(tmp_path / "c")])
    assert r.exit_code == 0 and "learnable/ (5 rows)" in r.output
    ci = read_manifest(tmp_path / "c" / "answerable")["partition"]["counts"]["pass_at_k_interval"]
    assert f"[{ci['4'][0]:.4f}, {ci['4'][1]:.4f}]" in r.output and "mean pass@4 (95% interval)" in r.output
    r = runner.invoke(cli, [*common, "--out", str(tmp_path / "c"), "--pass-at", "2"])
    assert r.exit_code == 1 and "--overwrite" in r.output
    r = runner.invoke(cli, ["partition", "--backend", "scripted", "--out", str(tmp_path / "d")])
    assert r.exit_code == 1 and "no questions" in r.output


def test_cli_help_names_the_merge_step(cli):
    r = CliRunner().invoke(cli, ["partition", "--help"])
    assert r.exit_code == 0 and "partition-merge" in r.output and "--num-shards" in r.output
    assert "--pass-at" in r.output and "--max-model-len" in r.output and "--tensor-parallel-size" in r.output
    r = CliRunner().invoke(cli, ["partition-merge", "--help"])
    assert r.exit_code == 0 and "--balance" in r.output


def test_api_keys_stay_out_of_manifests(max_dir, rows, tmp_path):
    cfg = cfg_for(max_dir, tmp_path / "p", backend_args={"api_key": "sk-very-secret"})
    partition(cfg, backend=oracle(rows), command="curriculum partition --api-key ***")
    for f in (tmp_path / "p").rglob("*.json"):
        assert "sk-very-secret" not in f.read_text(), f


# -- end to end with a real model ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_end_to_end_with_the_transformers_backend(tiny_model_dir, shared_data, tmp_path):
    """Real generation on the CPU; every statistic is recomputed from the kept completions."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        short = tmp_path / "k2"
        build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 5, K=2)], schedule="max",
                                     out=str(short), seed=1), command="t")
        cfg = PartitionConfig(shards=str(short), out=str(tmp_path / "p"), backend="transformers",
                              model=str(tiny_model_dir), backend_args={"device": "cpu", "batch_size": 4}, samples=3,
                              max_tokens=24, chunk_size=2, keep_completions=True, seed=5)
        res = partition(cfg, command="t")
        assert res.complete and res.run.completions == 15
        st = pq.read_table(tmp_path / "p" / "stats.parquet").to_pylist()
        rows_ = {r["id"]: r for r in read_rows(short)}
        for s in st:
            comps = s["base_completions"]
            assert len(comps) == 3 and s["n"] == 3
            f1 = [answer_f1(parse_completion(c).answer, rows_[s["id"]]["answers"]) for c in comps]
            assert s["sample_f1"] == f1 and s["max_f1"] == max(f1)
            assert s["c"] == sum(f == 1.0 for f in f1) and s["pass_at_k"] == pass_at_k_curve(3, s["c"])
            assert s["base_predictions"] == [parse_completion(c).answer for c in comps]
            assert s["num_valid_format"] == sum(parse_completion(c).valid for c in comps)
            assert s["bucket"] == ("answerable" if s["c"] else "unanswerable")
        assert len({c for s in st for c in s["base_completions"]}) > 5  # real, varied samples
        n_a, n_u = len(ids_of(tmp_path / "p" / "answerable")), len(ids_of(tmp_path / "p" / "unanswerable"))
        assert n_a + n_u == 5
        # an interrupted run, resumed, gives the same completions (per-question seeds, fixed chunks)
        partition(PartitionConfig(**{**cfg.to_dict(), "out": str(tmp_path / "q")}), command="t", max_chunks=1)
        partition(PartitionConfig(**{**cfg.to_dict(), "out": str(tmp_path / "q")}), command="t")
        again = pq.read_table(tmp_path / "q" / "stats.parquet").to_pylist()
        assert [s["base_completions"] for s in again] == [s["base_completions"] for s in st]
    finally:
        torch.set_num_threads(threads)


def test_an_unknown_output_format_is_refused_before_generating(max_dir, rows, tmp_path):
    """Rows whose template names no registered output format cannot be scored: one error naming it (with the
    closest known name), raised before any completion is generated (it used to warn and parse them as RAG-RL)."""
    from rag_curriculum.errors import UnknownNameError
    from rag_curriculum.shards import write_shards

    table = read_table(max_dir)
    i = table.schema.get_field_index("template")
    table = table.set_column(i, "template", pa.array(["rag-rll"] * table.num_rows, pa.string()))
    odd = tmp_path / "odd"
    write_shards(table, odd, manifest={k: v for k, v in read_manifest(max_dir).items()
                                       if k in ("kind", "config", "sources", "K", "seed", "counts")})
    backend = oracle(rows)
    with pytest.raises(UnknownNameError, match="template 'rag-rll'; did you mean 'rag-rl'"):
        partition(cfg_for(odd, tmp_path / "p"), backend=backend, command="test")
    assert backend.calls == [] and not list((tmp_path / "p").rglob("chunk-*"))
