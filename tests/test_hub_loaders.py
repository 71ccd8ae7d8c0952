"""The toolkit's outputs as the Hugging Face loaders read them, with the real
``datasets.load_dataset``: a built curriculum and a partition bucket load through their cards' ``configs`` (only the
Parquet shards under ``data/``, never ``manifest.json``, the card or the plot beside them), in curriculum order; an
empty bucket streams as an empty dataset with its features. What ``datasets`` itself cannot do is pinned here, so
that a ``datasets`` release that changes it shows up: a split of 0 rows is never built without streaming, and the
packaged ``parquet`` builder given the output folder itself (not its ``data/``) globs every file in it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN

from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.generation._scripted import ScriptedBackend
from rag_curriculum.partition import PartitionConfig, partition
from rag_curriculum.shards import load_hf_dataset, read_manifest, read_rows

datasets = pytest.importorskip("datasets")


@pytest.fixture(scope="module")
def built(tmp_path_factory, shared_data) -> Path:
    out = tmp_path_factory.mktemp("hub") / "musique-min-max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 12, K=2)], schedule="min-max",
                                 out=str(out), seed=0), command="curriculum build (test)")
    assert (out / "level_by_index.png").is_file() and (out / "manifest.json").is_file()  # beside data/
    return out


@pytest.fixture(scope="module")
def buckets(built, tmp_path_factory) -> Path:
    """A partition where every other question is answered right: answerable/ and unanswerable/ have rows,
    learnable/ (0 < c < n) has none."""
    rows = read_rows(built)
    right = {r["prompt"][-1]["content"]: r["answers"][0] for r in rows[::2]}

    def script(messages, n, seed):
        answer = right.get(messages[-1]["content"], "nothing at all")
        return [f"<reasoning>\nfound it\n</reasoning>\n<answer>\nFinal answer: {answer}\nSupporting passages: x\n"
                "</answer>"] * n

    out = tmp_path_factory.mktemp("hub") / "partition"
    partition(PartitionConfig(shards=str(built), backend="scripted", model="inline", samples=2, out=str(out)),
              backend=ScriptedBackend(script=script))
    return out


def _ids(ds) -> list[str]:
    return list(ds["id"])


def test_a_built_curriculum_loads_through_its_card(built, tmp_path):
    order = [r["id"] for r in read_rows(built)]  # curriculum order, shard by shard
    def load(*args, **kw):  # a cache of this test's own: datasets keys a local folder's cache by its path
        return datasets.load_dataset(*args, split="train", cache_dir=str(tmp_path / str(len(seen))), **kw)

    seen: list = []
    for args, kw in [((str(built),), {}), ((str(built),), {"data_dir": "data"}),
                     (("parquet",), {"data_dir": str(built / "data")}),
                     (("parquet",), {"data_files": str(built / "data" / "*.parquet")})]:
        seen.append(_ids(load(*args, **kw)))
    assert seen == [order] * 4 and len(order) == 12  # every row, in curriculum order, nothing else
    assert _ids(load_hf_dataset(built)) == order


def test_the_packaged_parquet_builder_given_the_folder_itself_globs_every_file(built):
    """``load_dataset("parquet", data_dir=OUT)`` reads no card: its default pattern ``**`` takes manifest.json and
    the plot as Parquet. The card's calls (above) are the ones to use; this pins datasets' behaviour."""
    from datasets.data_files import DataFilesDict, get_data_patterns

    files = DataFilesDict.from_patterns(get_data_patterns(str(built)), base_path=str(built))["train"]
    names = sorted(Path(f).name for f in files)
    assert "manifest.json" in names and "level_by_index.png" in names and "README.md" not in names


def test_a_partition_bucket_loads_through_its_card(buckets, tmp_path):
    for bucket in ("answerable", "unanswerable"):
        d = buckets / bucket
        assert (d / "pass_rate.png").is_file()
        order = [r["id"] for r in read_rows(d)]
        assert len(order) == 6, (buckets / "partition.json").read_text()
        ds = datasets.load_dataset(str(d), split="train", cache_dir=str(tmp_path / bucket))
        assert _ids(ds) == order and "pass_at_k" in ds.column_names


def test_an_empty_bucket_streams_as_an_empty_dataset_and_the_toolkit_reads_it(buckets, tmp_path):
    empty = buckets / "learnable"
    assert read_rows(empty) == []
    streamed = datasets.load_dataset(str(empty), split="train", streaming=True)  # through the card's configs
    assert list(streamed) == [] and {"prompt", "answers", "pass_at_k", "c"} <= set(streamed.features)
    ds = load_hf_dataset(empty)
    assert len(ds) == 0 and set(streamed.features) == set(ds.column_names)
    card = (empty / "README.md").read_text()
    assert "streaming=True)` reads it as an empty iterable dataset" in card
    # datasets 5.2's split reader skips a split of 0 examples (arrow_reader.make_file_instructions): without
    # streaming no split of 0 rows is ever built, whatever the files hold; pinned so a release that changes it shows
    with pytest.raises(ValueError, match="corresponds to no data"):
        datasets.load_dataset(str(empty), split="train", cache_dir=str(tmp_path))


@pytest.mark.slow
def test_two_curricula_of_one_folder_name_each_load_their_own_rows(tmp_path, shared_data):
    """``datasets`` keys a local folder's cache by its name, the card's ``configs`` and ``dataset_info`` (not the
    files): the card's ``dataset_info`` (rows and Parquet bytes) keeps a second curriculum of the same folder name,
    or a partition rewritten in place, from loading the rows cached for the first."""
    cache = str(tmp_path / "cache")
    got = []
    for n in (5, 7):
        out = tmp_path / str(n) / "musique-max"
        build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n, K=2)], schedule="max",
                                     out=str(out), seed=0), command="curriculum build (test)")
        got.append(_ids(datasets.load_dataset(str(out), split="train", cache_dir=cache)))
        assert got[-1] == [r["id"] for r in read_rows(out)]
    assert [len(g) for g in got] == [5, 7]
    from huggingface_hub import DatasetCard

    info = DatasetCard.load(out / "README.md").data.dataset_info
    assert info["splits"] == [{"name": "train", "num_bytes": info["download_size"], "num_examples": 7}]
    assert info["download_size"] == sum(s["bytes"] for s in read_manifest(out)["shards"])

    rows = read_rows(out)  # a partition rewritten in place (--overwrite) with other answers
    for right_rows in (rows[:4], rows[:2]):
        right = {r["prompt"][-1]["content"]: r["answers"][0] for r in right_rows}

        def script(messages, n, seed, right=right):
            answer = right.get(messages[-1]["content"], "nothing at all")
            return [f"<reasoning>\nx\n</reasoning>\n<answer>\nFinal answer: {answer}\nSupporting passages: x\n"
                    "</answer>"] * n

        part = tmp_path / "partition"
        partition(PartitionConfig(shards=str(out), backend="scripted", model="inline", samples=2, out=str(part),
                                  overwrite=True), backend=ScriptedBackend(script=script))
        loaded = datasets.load_dataset(str(part / "answerable"), split="train", cache_dir=cache)
        assert len(loaded) == len(right_rows)
