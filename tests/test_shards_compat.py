"""The shards as TRL and verl read them: `datasets.load_dataset("parquet")`, verl's RLHFDataset reads, and the
column types both expect."""

from __future__ import annotations

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import MUSIQUE_TRAIN

from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.shards import ROW_SCHEMA, load_hf_dataset, shard_files


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("shards") / "musique-min-max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 45)], schedule="min-max",
                                 rows_per_shard=20, out=str(out)), command="test")
    return out


def test_datasets_load_dataset_reads_the_shards_in_order(shard_dir):
    files = [str(f) for f in shard_files(shard_dir)]
    ds = datasets.load_dataset("parquet", data_files={"train": files}, split="train")
    assert len(ds) == 45
    assert ds["curriculum_index"] == list(range(45))
    assert ds.features["prompt"] == [{"role": datasets.Value("string"), "content": datasets.Value("string")}] or \
        isinstance(ds.features["prompt"], datasets.List)
    assert load_hf_dataset(shard_dir)["id"] == ds["id"]


def test_parquet_types_are_the_schema(shard_dir):
    for f in shard_files(shard_dir):
        schema = pq.read_schema(f)
        for field in ROW_SCHEMA:
            assert schema.field(field.name).type.equals(field.type), field.name
    assert ROW_SCHEMA.field("level").type == pa.int32()
    assert ROW_SCHEMA.field("curriculum_index").type == pa.int64()


def test_verl_rlhfdataset_reads(shard_dir, tiny_model_dir):
    """What verl's RLHFDataset does with a row (verl/utils/dataset/rl_dataset.py): load each file with
    `datasets.load_dataset("parquet", data_files=f)["train"]`, `concatenate_datasets` in list order, pop the
    `prompt` messages and apply the chat template, read `extra_info.index` / `tools_kwargs`, route the reward by
    `data_source` and hand `reward_model.ground_truth` to compute_score."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    frames = [datasets.load_dataset("parquet", data_files=str(f))["train"] for f in shard_files(shard_dir)]
    df = datasets.concatenate_datasets(frames)
    assert len(df) == 45
    for item in range(len(df)):
        row = df[item]
        messages = row.pop("prompt")
        assert isinstance(messages, list) and [m["role"] for m in messages] == ["system", "user"]
        assert all(isinstance(m["content"], str) for m in messages)
        raw = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert raw.endswith("<|im_start|>assistant\n")
        assert row.get("extra_info", {}).get("index", 0) == item
        assert row.get("extra_info", {}).get("tools_kwargs", {}) in ({}, None)
        assert isinstance(row["data_source"], str) and row["data_source"] == "musique"
        assert isinstance(row["ability"], str)
        gt = row["reward_model"]["ground_truth"]
        assert row["reward_model"]["style"] == "rule"
        assert gt["answers"] == row["answers"] and gt["gold_labels"] == row["gold_labels"]
        assert isinstance(row["extra_info"]["split"], str)


def test_trl_sees_every_column_as_a_list_kwarg(shard_dir):
    """TRL's GRPOTrainer passes every column except prompt/completion to reward functions as list kwargs."""
    ds = load_hf_dataset(shard_dir)
    batch = ds.select(range(4))
    keys = [k for k in batch[0] if k not in ("prompt", "completion", "completion_ids")]
    kwargs = {k: [row[k] for row in batch] for k in keys}
    assert {"answers", "gold_labels", "passages", "level", "hops"} <= set(kwargs)
    assert all(isinstance(a, list) and isinstance(a[0], str) for a in kwargs["answers"])


@pytest.mark.parametrize("before", ["answerable", "target"])
def test_shards_written_before_the_additive_fields_still_read(shard_dir, tmp_path, before):
    """Shards written before `origin`/`bm25_rank`, `answerable` and `gold_recall` existed, or before
    `ground_truth.target` did (rewritten here in the old schema, manifest hashes updated) validate, and read with
    the new fields filled in: every passage was provided and unranked, every row answerable, no recall, the
    target the row's answers."""
    import json
    import shutil

    from rag_curriculum.shards import (
        LEGACY_GROUND_TRUTH,
        LEGACY_GROUND_TRUTH_2,
        LEGACY_PASSAGE,
        read_rows,
        read_table,
        sha256_file,
        validate_shards,
    )

    old = tmp_path / "old"
    shutil.copytree(shard_dir, old)
    manifest = json.loads((old / "manifest.json").read_text())
    for entry in manifest["shards"]:
        path = old / entry["file"]
        rows = pq.read_table(path).to_pylist()
        for r in rows:
            del r["reward_model"]["ground_truth"]["target"]
            if before == "answerable":
                for p in r["passages"]:
                    del p["origin"], p["bm25_rank"]
                del r["reward_model"]["ground_truth"]["answerable"], r["answerable"], r["gold_recall"]
        gt = LEGACY_GROUND_TRUTH if before == "answerable" else LEGACY_GROUND_TRUTH_2
        fields = [f for f in ROW_SCHEMA if before == "target" or f.name not in ("answerable", "gold_recall")]
        legacy = pa.schema([pa.field("passages", pa.list_(LEGACY_PASSAGE))
                            if f.name == "passages" and before == "answerable" else
                            pa.field("reward_model", pa.struct([("style", pa.string()), ("ground_truth", gt)]))
                            if f.name == "reward_model" else f for f in fields])
        pq.write_table(pa.Table.from_pylist(rows, schema=legacy), path)
        entry["sha256"] = sha256_file(path)
    (old / "manifest.json").write_text(json.dumps(manifest))
    assert "target" not in str(pq.read_schema(shard_files(old)[0]))
    assert ("origin" in str(pq.read_schema(shard_files(old)[0]))) == (before == "target")
    validate_shards(old)
    new_rows, old_rows = read_rows(shard_dir), read_rows(old)
    assert old_rows == new_rows  # the fields a provided build writes are exactly what an old shard implies
    assert {p["origin"] for r in old_rows for p in r["passages"]} == {"provided"}
    t = read_table(old, columns=["id", "answerable", "gold_recall", "passages"])
    assert t.schema.names == ["id", "answerable", "gold_recall", "passages"]
    assert t.column("answerable").to_pylist() == [True] * 45
    assert t.column("gold_recall").null_count == 45
    assert load_hf_dataset(shard_dir)["answerable"] == [True] * 45
