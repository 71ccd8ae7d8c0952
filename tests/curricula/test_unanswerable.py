"""Unanswerable rows built from ../shared/data through the real builder and the `curriculum build`
command: which rows, what replaces the gold passages, the answer, the prompt, determinism, nesting, the manifest and
the card, the short-row fallback, and the errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import HOTPOT_TRAIN, MUSIQUE_DEV, MUSIQUE_TRAIN
from typer.testing import CliRunner

from rag_curriculum import load_examples
from rag_curriculum.cli import app
from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.curricula._plan import is_unanswerable
from rag_curriculum.curricula.distractors import distractor_pool
from rag_curriculum.errors import ConfigError
from rag_curriculum.prompts import RAG_RL_USER_INSTRUCTIONS
from rag_curriculum.shards import read_rows, shard_files

ABSTAIN_LINE = 'give "unanswerable" as the final answer and leave the supporting passages empty.'


def build(out: Path, **kw) -> tuple[list[dict], dict]:
    sources = [SourceSpec(kw.pop("dataset", "musique"), str(kw.pop("input", MUSIQUE_TRAIN)), kw.pop("n", None))]
    res = build_curriculum(BuildConfig(sources=sources, out=str(out), **kw), command="test")
    return read_rows(res.out), res.manifest


@pytest.fixture(scope="module")
def musique(tmp_path_factory):
    """The 100 real MuSiQue train questions, linear K = 20, with and without 30% unanswerable rows (same seed)."""
    d = tmp_path_factory.mktemp("unanswerable")
    plain = build(d / "plain", schedule="linear", seed=3)
    mixed = build(d / "mixed", schedule="linear", seed=3, unanswerable_fraction=0.3)
    return plain, mixed, {e.id: e for e in load_examples("musique", MUSIQUE_TRAIN)}


def test_unanswerable_rows_replace_every_gold_passage(musique):
    (plain, _), (rows, manifest), examples = musique
    before = {r["id"]: r for r in plain}
    unanswerable = [r for r in rows if not r["answerable"]]
    assert 15 <= len(unanswerable) <= 45  # 30% of 100, drawn per question
    for r in rows:
        ex = examples[r["source_id"]]
        assert r["answerable"] is (not is_unanswerable(3, ex, 0.3))
        assert r["reward_model"]["ground_truth"]["answerable"] is r["answerable"]
        old = before[r["id"]]
        if r["answerable"]:  # everything as without the option except the prompt's added sentence
            assert (r["passages"], r["answers"], r["gold_labels"]) == (old["passages"], old["answers"],
                                                                       old["gold_labels"])
            continue
        assert r["answers"] == ["unanswerable"] and r["gold_labels"] == []
        assert r["reward_model"]["ground_truth"] == {"answers": ["unanswerable"], "gold_labels": [],
                                                     "answerable": False, "target": ["unanswerable"]}
        assert (r["level"], r["hops"]) == (old["level"], old["hops"])
        gold = {(d.title, d.text) for d in ex.documents if d.is_gold}
        shown = [(p["title"], p["text"]) for p in r["passages"]]
        assert not any(p["is_gold"] for p in r["passages"]) and not gold & set(shown)
        assert len(set(shown)) == len(shown)  # no distractor twice
        pool = {(d.title, d.text) for d in distractor_pool(ex)}
        assert set(shown) <= pool
        # each gold passage's place holds a new distractor; the other places are unchanged
        short = old["num_distractors"] + old["hops"] - len(pool)
        if short <= 0:
            assert len(r["passages"]) == len(old["passages"]) == r["num_distractors"]
            for p, q in zip(r["passages"], old["passages"], strict=True):
                if not q["is_gold"]:  # (labels may differ: a replacement can repeat a title)
                    assert (p["title"], p["text"], p["origin"]) == (q["title"], q["text"], q["origin"])
                else:
                    assert (p["title"], p["text"]) not in {(x["title"], x["text"]) for x in old["passages"]}
        else:  # the dataset's distractors ran out: all of them are shown
            assert set(shown) == pool and len(shown) == len(old["passages"]) - short
    assert manifest["unanswerable"]["unanswerable_rows"] == len(unanswerable)
    assert manifest["unanswerable"]["answerable_rows"] == len(rows) - len(unanswerable)


def test_the_prompt_says_the_model_may_abstain_only_in_such_builds(musique):
    (plain, _), (rows, _), _ = musique
    for r in plain:  # the paper's prompt, byte for byte
        user = r["prompt"][-1]["content"]
        assert user.startswith(RAG_RL_USER_INSTRUCTIONS + "\n\n") and "unanswerable" not in user
    for r in rows:  # every row of the build, answerable or not, so the prompt tells none apart
        user = r["prompt"][-1]["content"]
        assert user.startswith(RAG_RL_USER_INSTRUCTIONS + " If the passages do not contain") and ABSTAIN_LINE in user


def test_manifest_and_card_record_the_option_and_counts(musique):
    (_, plain_manifest), (rows, manifest), _ = musique
    assert "unanswerable_fraction" not in plain_manifest["config"] and "unanswerable" not in plain_manifest
    assert manifest["config"]["unanswerable_fraction"] == 0.3
    assert manifest["config"]["abstention_answer"] == "unanswerable"
    u = manifest["unanswerable"]
    n_un = sum(not r["answerable"] for r in rows)
    assert u["by_source"] == {"musique": {"answerable": len(rows) - n_un, "unanswerable": n_un}}
    # linear K=20 on MuSiQue (18 distractors, 2-4 hops): the top levels have no distractor left to replace gold with
    assert u["short_rows"] > 0 and u["missing_passages"] >= u["short_rows"]


def test_card_reports_the_counts(tmp_path):
    rows, manifest = build(tmp_path / "c", n=30, schedule="max", K=4, unanswerable_fraction=0.5, seed=1)
    card = (tmp_path / "c" / "README.md").read_text()
    u = manifest["unanswerable"]
    assert f"Answerable rows: {u['answerable_rows']}; unanswerable rows: {u['unanswerable_rows']}" in card
    assert "| musique | " in card and "`--unanswerable-fraction 0.5`" in card
    assert u["short_rows"] == 0 and "ran out" not in card  # level 4: plenty of distractors left


def test_a_rows_status_and_content_do_not_change_when_rows_are_added(tmp_path):
    small, _ = build(tmp_path / "small", n=20, schedule="max", unanswerable_fraction=0.4)
    big, _ = build(tmp_path / "big", schedule="max", unanswerable_fraction=0.4)
    by_id = {r["id"]: r for r in big}
    assert any(not r["answerable"] for r in small)
    for r in small:
        assert {k: v for k, v in r.items() if k not in ("curriculum_index", "extra_info")} == {
            k: v for k, v in by_id[r["id"]].items() if k not in ("curriculum_index", "extra_info")}


def test_byte_identical_and_nested_across_levels(tmp_path):
    kw = dict(schedule="max", unanswerable_fraction=0.5, seed=2, n=40)
    build(tmp_path / "a", K=3, **kw)
    lo, _ = build(tmp_path / "b", K=3, **kw)
    assert [f.read_bytes() for f in shard_files(tmp_path / "a")] == [f.read_bytes() for f in shard_files(tmp_path / "b")]
    hi, _ = build(tmp_path / "hi", K=12, **kw)
    hi_by = {r["id"]: r for r in hi}
    for r in lo:
        assert r["answerable"] == hi_by[r["id"]]["answerable"]
        a = {(p["title"], p["text"]) for p in r["passages"]}
        b = {(p["title"], p["text"]) for p in hi_by[r["id"]]["passages"]}
        assert a <= b


def test_fraction_one(tmp_path):
    every, m1 = build(tmp_path / "1", n=10, schedule="max", K=3, unanswerable_fraction=1.0)
    assert not any(r["answerable"] for r in every) and m1["unanswerable"]["unanswerable_rows"] == 10


def test_columnar_rendering_equals_row_rendering_with_unanswerable_rows(shared_data):
    from support.oracles.row_oracle import render

    from rag_curriculum.curricula._plan import plan_rows
    from rag_curriculum.curricula._render import render_rows
    from rag_curriculum.curricula._sources import load_source
    from rag_curriculum.shards import rows_to_table

    for setting in ("curriculum", "distractor", "ideal"):
        cfg = BuildConfig(sources=[SourceSpec("hotpotqa", str(HOTPOT_TRAIN), None)], schedule="linear",
                          setting=setting, seed=5, allow_split_mismatch=True, unanswerable_fraction=0.5,
                          abstention_answer="insufficient information")
        plan, _ = plan_rows(cfg, [load_source(cfg, cfg.sources[0])])
        table = render_rows(plan, cfg, 10, 60)
        assert table.equals(rows_to_table(render(plan, cfg, 10, 60)))
        assert {tuple(a) for a, ok in zip(table.column("answers").to_pylist(), table.column("answerable").to_pylist(),
                                          strict=True) if not ok} == {("insufficient information",)}


def test_cli_eval_set_with_a_custom_abstention_answer(tmp_path):
    """`curriculum build --setting distractor --unanswerable-fraction`: the dataset's distractors are all shown
    already, so unanswerable rows show fewer passages; the manifest counts them."""
    out = tmp_path / "eval"
    res = CliRunner().invoke(app, ["build", "--setting", "distractor", "-d", "musique", "-i", str(MUSIQUE_DEV),
                                   "--n", "40", "--unanswerable-fraction", "0.25", "--abstention-answer",
                                   "Not enough information", "--out", str(out)])
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    rows = read_rows(out)
    un = [r for r in rows if not r["answerable"]]
    assert un and all(r["answers"] == ["Not enough information"] for r in un)
    u = manifest["unanswerable"]
    assert u["short_rows"] == len(un) and u["missing_passages"] == sum(r["hops"] for r in un)
    assert all(len(r["passages"]) == r["num_distractors"] <= 18 for r in un)
    assert all('give "Not enough information" as the final answer' in r["prompt"][-1]["content"] for r in rows)
    shown = " ".join(res.output.split())
    assert (f"unanswerable rows: {len(un)} of 40 (answer 'Not enough information'); {len(un)} short of distractors "
            f"({u['missing_passages']} passages fewer), {u['answer_in_passages']} showing a passage") in shown
    res = CliRunner().invoke(app, ["inspect", str(out)])
    assert res.exit_code == 0 and f"unanswerable rows: {len(un)} of 40" in " ".join(res.output.split())


@pytest.mark.parametrize(("args", "message"), [
    (["--unanswerable-fraction", "1.5"], "unanswerable_fraction"),
    (["--unanswerable-fraction", "0.2", "--abstention-answer", "the"], "abstention answer"),
])
def test_bad_options_are_refused(tmp_path, args, message):
    res = CliRunner().invoke(app, ["build", "-d", "musique", "-i", str(MUSIQUE_TRAIN), "--n", "5",
                                   "--out", str(tmp_path / "x"), *args])
    assert res.exit_code != 0 and message in res.output, res.output
    with pytest.raises(ConfigError):
        BuildConfig(unanswerable_fraction=-0.1)
