"""Adaptive rows (``--schedule adaptive``): a stored row rendered at level l equals, column for column and byte for
byte in the prompt, the row ``--schedule max --K l`` builds for that question with the same seed, on real data."""

from __future__ import annotations

import pytest
from conftest import HOTPOT_TRAIN, MUSIQUE_TRAIN

N = 8
SEED = 5
_LOADED: dict = {}


def _build(tmp_path, dataset, path, schedule, K, name, **extra):
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.shards import read_manifest, read_rows

    out = tmp_path / name
    build_curriculum(BuildConfig(sources=[SourceSpec(dataset, str(path), n=N)], schedule=schedule, K=K,
                                 out=str(out), seed=SEED, workers=1, **extra))
    return read_rows(out), read_manifest(out)


def _fixed_rows(dataset, path, level, **extra):
    """The rows ``--schedule max --K level`` builds, rendered in memory by the builder's own plan and renderer (the
    written shards hold exactly these: test_cli_builds_adaptive checks one level through the command line)."""
    from rag_curriculum.curricula import BuildConfig, SourceSpec
    from rag_curriculum.curricula._plan import plan_rows
    from rag_curriculum.curricula._render import render_rows
    from rag_curriculum.curricula._sources import load_source

    cfg = BuildConfig(sources=[SourceSpec(dataset, str(path), n=N)], schedule="max", K=level, seed=SEED, **extra)
    if dataset not in _LOADED:  # loaded once (planning does not change it)
        _LOADED[dataset] = load_source(cfg, cfg.sources[0])
    plan, _ = plan_rows(cfg, [_LOADED[dataset]])
    return render_rows(plan, cfg).to_pylist()


@pytest.mark.parametrize(("dataset", "path", "K", "extra"), [
    ("musique", MUSIQUE_TRAIN, 20, {}), ("hotpotqa", HOTPOT_TRAIN, 10, {}),
    # half the rows unanswerable (their gold passages replaced by distractors), passages numbered from 1
    ("musique", MUSIQUE_TRAIN, 6, {"unanswerable_fraction": 0.5, "template": "craft-v1", "index_base": 1})])
def test_rows_at_each_level_equal_fixed_builds(tmp_path, shared_data, dataset, path, K, extra):
    from rag_curriculum.curricula.adaptive import POOL_SIZE, SOURCE_POSITION, LevelRenderer

    rows, manifest = _build(tmp_path, dataset, path, "adaptive", K, "adaptive", **extra)
    if extra:
        assert {r["answerable"] for r in rows} == {True, False}
    assert {r["level"] for r in rows} == {K} and all(len(r[SOURCE_POSITION]) == len(r["passages"]) for r in rows)
    assert manifest["columns"][-2:] == [SOURCE_POSITION, POOL_SIZE]
    renderer = LevelRenderer(manifest)
    # every level of the paper's K: low levels show a few distractors, high ones the whole pool (d capped by it)
    for level in range(1, K + 1):
        want = _fixed_rows(dataset, path, level, **extra)
        got = renderer.render(rows, [level] * len(rows))
        for g, w in zip(got, want, strict=True):
            assert g["prompt"][-1]["content"].encode() == w["prompt"][-1]["content"].encode()
            assert {k: g[k] for k in w} == w  # every column of the fixed build: passages, labels, reward columns
    # one batch may mix levels: each row is rendered at its own
    mixed = renderer.render(rows[:3], [1, K, 2])
    assert [r["level"] for r in mixed] == [1, K, 2]
    assert [r["curriculum_index"] for r in mixed] == [0, 1, 2]


def test_non_adaptive_shards_and_bad_levels_refused(tmp_path, shared_data):
    from rag_curriculum.curricula.adaptive import LevelRenderer
    from rag_curriculum.errors import ConfigError, ShardError

    rows, manifest = _build(tmp_path, "musique", MUSIQUE_TRAIN, "min-max", 4, "mm")
    with pytest.raises(ShardError, match="'min-max' curriculum, not an adaptive one") as e:
        LevelRenderer(manifest)
    assert "--schedule adaptive" in e.value.hint
    rows, manifest = _build(tmp_path, "musique", MUSIQUE_TRAIN, "adaptive", 4, "ad")
    with pytest.raises(ConfigError, match="level 5 for row 'musique-.*': outside 1..4"):
        LevelRenderer(manifest).render(rows[:1], [5])
    broken = dict(rows[0], source_position=rows[0]["source_position"][:-1])
    with pytest.raises(ShardError, match="passages but"):
        LevelRenderer(manifest).render([broken], [2])


def test_cli_builds_adaptive(tmp_path, shared_data):
    from typer.testing import CliRunner

    from rag_curriculum.cli import app
    from rag_curriculum.shards import read_manifest, read_rows

    out = tmp_path / "cli"
    r = CliRunner().invoke(app, ["build", "--dataset", "musique", "--input", str(MUSIQUE_TRAIN), "--n", "4",
                                 "--schedule", "adaptive", "--K", "5", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert read_manifest(out)["config"]["schedule"] == "adaptive"
    rows = read_rows(out)
    assert all(r["level"] == 5 and r["pool_size"] >= 1 for r in rows)
    # the written shards of a fixed build equal the renderer's rows at that level
    fixed = tmp_path / "fixed"
    r = CliRunner().invoke(app, ["build", "--dataset", "musique", "--input", str(MUSIQUE_TRAIN), "--n", "4",
                                 "--schedule", "max", "--K", "2", "--out", str(fixed)])
    assert r.exit_code == 0, r.output
    from rag_curriculum.curricula.adaptive import LevelRenderer

    got = LevelRenderer(read_manifest(out)).render(rows, [2] * len(rows))
    assert [{k: g[k] for k in w} for g, w in zip(got, read_rows(fixed), strict=True)] == read_rows(fixed)
