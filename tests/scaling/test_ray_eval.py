"""`curriculum eval --engine ray` on a real local Ray cluster: one pool per model, its workers serving every
evaluation set, and the same results, summary and report, byte for byte, as the local engine."""

from __future__ import annotations

import pytest
from conftest import MUSIQUE_DEV
from scaling._scripts import inside, tree
from typer.testing import CliRunner

from rag_curriculum.cli import app
from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def eval_sets(tmp_path_factory, shared_data):
    root = tmp_path_factory.mktemp("ray-eval-sets")
    dirs = []
    for setting in ("distractor", "ideal"):
        d = root / f"musique-{setting}"
        build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_DEV), 6)], setting=setting,
                                     out=str(d), seed=0, K=4), command="curriculum build")
        dirs.append(d)
    return dirs


@pytest.mark.slow
def test_eval_on_ray_writes_the_local_runs_files(ray_cluster, eval_sets, tmp_path):
    trees = {}
    for engine in ("local", "ray"):
        with inside(tmp_path / engine) as out:
            args = ["eval", "--model", "base=scaling._scripts:seeded_answers", "--backend", "scripted",
                    *[a for d in eval_sets for a in ("--data", str(d))], "--samples", "3", "--chunk-size", "2",
                    "--out", str(out), "--no-plots", "--no-progress"]
            if engine == "ray":
                args += ["--engine", "ray", "--num-workers", "2"]
            res = CliRunner().invoke(app, args)
            assert res.exit_code == 0, res.output
            trees[engine] = tree(out)
    assert sorted(trees["ray"]) == sorted(trees["local"])
    assert {"results/base/musique-distractor.parquet", "results/base/musique-ideal.parquet"} <= set(trees["ray"])
    assert trees["ray"] == trees["local"]
