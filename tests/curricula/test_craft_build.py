"""Builds in CRAFT's formats on ../shared/data: numbered passages (from 1 by default, or 0), gold labels that are
the gold documents' numbers, the row renderer checked against the dict oracle, the template picked on the command
line and on the CRAFT mixture recipe."""

from __future__ import annotations

import json

import pytest
from conftest import HOTPOT_TRAIN, MUSIQUE_TRAIN, TWOWIKI_TRAIN
from typer.testing import CliRunner

from rag_curriculum.cli import app
from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.errors import ConfigError
from rag_curriculum.rewards import get_parser, score_completion
from rag_curriculum.shards import read_rows


def _rows(tmp_path, name, **kw):
    cfg = BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 6)], schedule="linear", K=4,
                      out=str(tmp_path / name), seed=1, workers=1, **kw)
    build_curriculum(cfg)
    return read_rows(tmp_path / name), json.loads((tmp_path / name / "manifest.json").read_text())


@pytest.mark.parametrize("base", [None, 0, 1])
def test_numbered_rows(tmp_path, shared_data, base):
    rows, manifest = _rows(tmp_path, f"b{base}", template="craft-v1", index_base=base)
    rag, _ = _rows(tmp_path, "rag", template="rag-rl")
    first = 1 if base is None else base
    assert manifest["config"].get("index_base") == base and manifest["config"]["template"] == "craft-v1"
    for r, q in zip(rows, rag, strict=True):
        n = len(r["passages"])
        labels = [str(first + k) for k in range(n)]
        assert [p["label"] for p in r["passages"]] == labels == r["extra_info"]["labels"]
        # the same documents in the same order as the RAG-RL row: only the labels and the prompt differ
        assert [(p["title"], p["text"], p["is_gold"]) for p in r["passages"]] == [
            (p["title"], p["text"], p["is_gold"]) for p in q["passages"]]
        gold = [p["label"] for p in r["passages"] if p["is_gold"]]
        assert r["gold_labels"] == gold == r["reward_model"]["ground_truth"]["gold_labels"] and gold
        assert r["template"] == "craft-v1"
        user = r["prompt"][-1]["content"]
        for p in r["passages"]:
            assert f"[{p['label']}] {p['title']}\n{p['text']}" in user
        assert r["prompt"][0]["content"].startswith("Respond in the following format:\n<plan>")
        # a completion declaring exactly the gold documents scores evidence F1 = 1 against the row
        y = (f"<plan>p</plan><gold_docs>[{', '.join(gold)}]</gold_docs><reason>document [{gold[0]}]</reason>"
             f"<answer>{r['answers'][0]}</answer>")
        s = score_completion(y, r["answers"], r["gold_labels"], parse=get_parser(r["template"]))
        assert (s.valid, s.citation_f1, s.exact_match) == (True, 1.0, 1.0)


def test_rag_rl_config_unchanged_and_index_base_refused(tmp_path, shared_data):
    _, manifest = _rows(tmp_path, "rag")
    assert "index_base" not in manifest["config"]  # a build without it records the config it always did
    with pytest.raises(ConfigError, match="cites passages by title"):
        BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 6)], index_base=0).validate()


def test_columnar_rendering_equals_row_oracle(shared_data):
    from support.oracles.row_oracle import render

    from rag_curriculum.curricula._plan import plan_rows
    from rag_curriculum.curricula._render import render_rows
    from rag_curriculum.curricula._sources import load_source
    from rag_curriculum.shards import rows_to_table

    for template, base in (("craft-v1", None), ("craft-v3", 0), ("craft-v5", 1)):
        cfg = BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), None)], schedule="max",
                          setting="distractor", seed=5, allow_split_mismatch=True, template=template,
                          index_base=base)
        plan, _ = plan_rows(cfg, [load_source(cfg, cfg.sources[0])])
        assert render_rows(plan, cfg, 0, 25).equals(rows_to_table(render(plan, cfg, 0, 25)))


@pytest.mark.slow
def test_template_on_the_command_line_and_on_the_mixture_recipe(tmp_path, shared_data):
    runner = CliRunner()
    res = runner.invoke(app, ["build", "-d", "musique", "-i", str(MUSIQUE_TRAIN), "--n", "3", "--K", "3",
                              "--template", "craft-v2", "--index-base", "0", "-o", str(tmp_path / "cli"),
                              "--no-progress"])
    assert res.exit_code == 0, res.output
    r = read_rows(tmp_path / "cli")[0]
    assert r["template"] == "craft-v2" and r["passages"][0]["label"] == "0"
    assert "<plan>" not in r["prompt"][0]["content"] and "<gold_docs>" in r["prompt"][0]["content"]
    inputs = [f"sources.{i}.input={p}" for i, p in enumerate((MUSIQUE_TRAIN, HOTPOT_TRAIN, TWOWIKI_TRAIN))]
    quotas = [f"sources.{i}.n={n}" for i, n in enumerate((4, 2, 2))]
    # the mixture recipe with the template as an override ...
    res = runner.invoke(app, ["build", "recipe=mixture-craft", "template=craft-v4", f"out={tmp_path / 'mix'}",
                              *inputs, *quotas, "--no-progress"])
    assert res.exit_code == 0, res.output
    # ... and the recipe of CRAFT's own training set (every paragraph, shuffled), in craft-v1
    res = runner.invoke(app, ["build", "recipe=mixture-craft-v1", f"out={tmp_path / 'v1'}", *inputs, *quotas,
                              "--no-progress"])
    assert res.exit_code == 0, res.output
    mix, v1 = read_rows(tmp_path / "mix"), read_rows(tmp_path / "v1")
    assert {r["template"] for r in mix} == {"craft-v4"} and {r["template"] for r in v1} == {"craft-v1"}
    assert sorted(r["data_source"] for r in v1) == ["2wikimultihopqa"] * 2 + ["hotpotqa"] * 2 + ["musique"] * 4
    assert sorted(r["id"] for r in v1) == sorted(r["id"] for r in mix)  # the same questions in either format
    for r in v1:  # level K of every source: all of the question's paragraphs (the native set CRAFT shows)
        assert r["level"] == {"musique": 20, "hotpotqa": 10, "2wikimultihopqa": 10}[r["data_source"]]
