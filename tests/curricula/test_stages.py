"""The build as stages (sources -> plan -> render -> write): each stage imports only the stages before it, the
stages called one by one write what ``build_curriculum`` writes, the forked writers leave no state behind, and
every distractor source has the hooks the :class:`DistractorSource` protocol declares."""

from __future__ import annotations

import ast
import hashlib
import inspect
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN

from rag_curriculum.curricula import BuildConfig, SourceSpec, _render, build_curriculum, distractors
from rag_curriculum.curricula._plan import BuildPlan, make_plan
from rag_curriculum.curricula._sources import BuildSources, gather_sources
from rag_curriculum.curricula._write import build_manifest, write_build
from rag_curriculum.curricula.distractors import DistractorSource

CURRICULA = Path(_render.__file__).parent
#: each module of curricula/ -> the modules of curricula/ it may import (the stages in order; adaptive on render)
STAGES = {
    "_sources": {"_config", "distractors"},
    "_plan": {"_sources", "_config", "distractors", "_leakage", "_schedules", "_calibrated"},
    "_calibrated": {"_config"},  # the plan's: a profile's schedules scored, the calibrated placement
    "_render": {"_plan", "_config", "distractors"},
    "_write": {"_plan", "_render", "_sources", "_config"},
    "adaptive": {"_plan", "_render", "_config"},
}


def _own_imports(name: str) -> set[str]:
    tree = ast.parse((CURRICULA / f"{name}.py").read_text(encoding="utf-8"))
    return {n.module.split(".")[0] for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.level == 1 and n.module}


@pytest.mark.parametrize("name", sorted(STAGES))
def test_each_stage_imports_only_the_stages_before_it(name):
    got = _own_imports(name)
    assert got <= STAGES[name], f"curricula/{name}.py imports {sorted(got - STAGES[name])}"
    assert "_builder" not in got and "builder" not in got


def test_every_distractor_source_has_the_protocols_hooks():
    members = [m for m in vars(DistractorSource) if not m.startswith("_") and callable(vars(DistractorSource)[m])]
    assert {"prepare", "plan_hint", "available", "select", "before_render", "recall", "hops", "facts"} <= set(members)
    classes = [distractors.ProvidedSource, distractors.BM25Source, distractors.MixedSource,
               distractors.RetrievedSource]
    for cls in classes:
        for m in members:
            want = list(inspect.signature(getattr(DistractorSource, m)).parameters)
            assert list(inspect.signature(getattr(cls, m)).parameters) == want, (cls.__name__, m)


@pytest.mark.slow
def test_the_stages_one_by_one_write_what_the_build_writes(shared_data, tmp_path):
    def cfg(out: str) -> BuildConfig:
        return BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 40)], schedule="min-max",
                           rows_per_shard=15, out=str(tmp_path / out))

    whole = build_curriculum(cfg("whole"), command="test")
    c = cfg("stages")
    sources = gather_sources(c)
    assert isinstance(sources, BuildSources) and [len(s.examples) for s in sources.loaded] == [100]
    plan = make_plan(c, sources)
    assert isinstance(plan, BuildPlan) and len(plan.rows) == 40 and plan.facts["per_source"] == {"musique": 40}
    manifest = write_build(c, sources, plan, build_manifest(c, sources, plan, command="test"))
    assert [s["sha256"] for s in manifest["shards"]] == [s["sha256"] for s in whole.manifest["shards"]]
    assert len(manifest["shards"]) == 3 and manifest["counts"] == whole.manifest["counts"]
    for entry in manifest["shards"]:  # the recorded digests are those of the files written
        assert hashlib.sha256((Path(c.out) / entry["file"]).read_bytes()).hexdigest() == entry["sha256"]
    # forked writers (workers asked for): the same bytes, and nothing left in this process's module state
    c = cfg("forked")
    c.workers = 2
    forked = build_curriculum(c, command="test")
    assert [s["sha256"] for s in forked.manifest["shards"]] == [s["sha256"] for s in whole.manifest["shards"]]
    assert _render._Worker.job is None
