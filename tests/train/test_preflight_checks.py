"""What a run checks before its model loads for the GPU pre-flight (scripts/gpu_paper_run.sh): data.longest_rows
keeps the rows whose prompts are longest, in curriculum order; the disk its checkpoints need is checked against the
free space at run.output_dir (a planted free space here) and a short disk refused, by a real run and by a dry run
where a GPU is (a dry run elsewhere says the shortfall)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN

pytestmark = pytest.mark.slow  # binds TRL's GRPOConfig (imports TRL)
pytest.importorskip("trl", reason="the `train` extra is needed")


@pytest.fixture(scope="module")
def shards(tmp_path_factory, tiny_model_dir) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("preflight") / "musique-min-max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=12)], schedule="min-max",
                                 K=3, out=str(out), seed=0, tokenizer=str(tiny_model_dir)))
    return out


def _cfg(model: Path, shards: Path, out: Path, *extra: str):
    from rag_curriculum.train import compose_train_config

    return compose_train_config("cpu-tiny", [f"model.name_or_path={model}", f"data.shards={shards}",
                                             f"run.output_dir={out}", "data.max_rows=null", *extra])


def test_the_longest_rows_first_in_curriculum_order(shards, tiny_model_dir, tmp_path):
    import pyarrow.parquet as pq

    from rag_curriculum.shards import shard_files
    from rag_curriculum.train import prepare

    rows = [r for f in shard_files(shards) for r in pq.read_table(f).to_pylist()]
    by_length = sorted(rows, key=lambda r: (-r["prompt_tokens"], r["curriculum_index"]))[:4]
    want = sorted(r["curriculum_index"] for r in by_length)
    run = prepare(_cfg(tiny_model_dir, shards, tmp_path / "run", "data.longest_rows=4"), dry_run=True)
    assert list(run.dataset["curriculum_index"]) == want and want != [0, 1, 2, 3]
    record = run.run_plan["longest_rows"]
    assert record["curriculum_index"] == want and record["levels"] == sorted({r["level"] for r in by_length})
    assert 3 in record["levels"]  # min-max: the hardest level's rows are among them
    top = max(r["prompt_tokens"] for r in rows)
    assert record["prompt_tokens"] == [min(r["prompt_tokens"] for r in by_length), top]
    assert run.plan.num_rows == 4 and run.lengths.max_tokens == top  # the curriculum's longest prompt is trained
    # the run's estimate, recorded for the pre-flight's comparison with the measured peak
    assert run.run_plan["memory_estimate"]["total_gib"] > 0


def test_a_short_disk_is_refused(shards, tiny_model_dir, tmp_path, monkeypatch):
    from rag_curriculum.errors import ConfigError
    from rag_curriculum.train import _memory, prepare

    cfg = _cfg(tiny_model_dir, shards, tmp_path / "run", "grpo.save_steps=1", "grpo.save_total_limit=2")
    run = prepare(cfg, dry_run=True)
    need = run.disk.total_gib
    assert run.disk.kept == 3 and need == pytest.approx(3 * run.disk.each_gib)  # 3 steps, each saved, 2 kept + 1
    monkeypatch.setattr(_memory, "free_gib", lambda path: need / 2)  # the planted free space: half the need
    # a real run refuses, naming the folder, the free space, the need and what to change
    with pytest.raises(ConfigError) as e:
        prepare(cfg)
    text = f"{e.value} {e.value.hint}"
    assert f"run.output_dir={tmp_path / 'run'}" in text and "GiB free" in text and "3 checkpoints" in text
    assert "grpo.save_total_limit, now 2" in text
    # a dry run where a GPU is (the run's own disk) refuses too; one without a GPU says the shortfall
    monkeypatch.setattr(_memory, "gpu_here", lambda: True)
    with pytest.raises(ConfigError, match="GiB free on its disk"):
        prepare(cfg, dry_run=True)
    monkeypatch.setattr(_memory, "gpu_here", lambda: False)
    run = prepare(cfg, dry_run=True)
    assert "NOT enough here" in " ".join(_memory.disk_lines(run.disk, run.free_disk, run.args))
    # enough room, or the check turned off: the run goes on
    monkeypatch.setattr(_memory, "free_gib", lambda path: need * 2)
    assert prepare(cfg).disk.total_gib <= need  # a real run knows its layout (here no ZeRO: 12 bytes a parameter)
    monkeypatch.setattr(_memory, "free_gib", lambda path: 0.0)
    assert prepare(_cfg(tiny_model_dir, shards, tmp_path / "run", "grpo.save_steps=1",
                        "run.check_free_disk=false")).disk is not None
