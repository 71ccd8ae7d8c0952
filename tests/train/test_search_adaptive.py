"""A search agent's difficulty moved during training (train/_agent_adaptive.py): an adaptive controller drives the
level of each row's searches (agent.difficulty=hard-negatives) or the probability p its gold is withheld
(withhold), ZeroSearch's schedule moves p without one; recorded per row in curriculum_levels.jsonl, the
controller's state in every checkpoint.

Unit tests of the mapping, the hook (render, score, update, save/load, the schedule), the config's refusals and the
tool-calling environment; then real TRL GRPO runs of 3 steps of the tiny model through ``curriculum train``'s
``search-r1-cpu-tiny`` recipe against the real BM25 index of the MuSiQue sample, on a ``max`` K=3 build of it, the
first turn scripted (a search for the question): the target-band controller moves the level (then p) from 3 down
as the model answers nothing right, and every search's ``shaped`` record follows the row's level / p, recomputed
here from the same index."""

from __future__ import annotations

import json
import math
import random

import pytest
from conftest import MUSIQUE_TRAIN

from rag_curriculum.agents._difficulty import (
    P_COLUMN,
    RowView,
    SearchDifficulty,
    hard_negative_count,
    noise_probability,
)
from rag_curriculum.agents._retrievers import Hit
from rag_curriculum.errors import ConfigError
from rag_curriculum.train._agent_adaptive import SearchCurriculumHook, level_to_p, p_to_level
from rag_curriculum.train.controllers import make_controller


# --- the mapping -------------------------------------------------------------------------------------------------
def test_level_to_p_is_linear_from_p_start_to_p_end_and_p_to_level_inverts_it():
    assert [level_to_p(lv, 6, 0.0, 0.5) for lv in range(1, 7)] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    assert level_to_p(2, 3, 0.2, 1.0) == 0.6 and level_to_p(0, 3, 0.2, 1.0) == 0.2 and level_to_p(9, 3, 0.2, 1.0) == 1.0
    assert level_to_p(2.5, 3, 0.0, 1.0) == 0.75  # target-band's continuous T
    for lv in (1, 2, 3.5, 6):
        assert p_to_level(level_to_p(lv, 6, 0.1, 0.4), 6, 0.1, 0.4) == pytest.approx(lv)
    with pytest.raises(ConfigError, match="p_levels"):
        level_to_p(1, 1, 0.0, 0.5)


# --- the row's p and level shape its searches --------------------------------------------------------------------
def _row(level=1, p=None):
    passages = [{"title": "G0", "text": "gold zero", "is_gold": True}, {"title": "G1", "text": "gold one", "is_gold": True}]
    passages += [{"title": f"N{i}", "text": f"negative {i}", "is_gold": False} for i in range(4)]
    row = {"id": "q", "question": "?", "answers": ["a"], "level": level, "passages": passages}
    if p is not None:
        row[P_COLUMN] = p
    return row


HITS = [Hit("x1", "X1", "other one"), Hit("g0", "G0", "gold zero"), Hit("x2", "X2", "other two"),
        Hit("g1", "G1", "gold one"), Hit("x3", "X3", "other three"), Hit("x4", "X4", "other four")]


def test_a_rows_search_p_overrides_the_settings_p_and_is_recorded():
    shape = SearchDifficulty("withhold", p=0.5)
    for s in range(20):
        shown, info = shape.apply(HITS, 3, RowView(_row(p=1.0)), random.Random(s))
        assert info == {"withheld": 1, "p": 1.0} and [h.id for h in shown] == ["x1", "x2", "x3"]
        shown, info = shape.apply(HITS, 3, RowView(_row(p=0.0)), random.Random(s))
        assert info == {"withheld": 0, "p": 0.0} and [h.id for h in shown] == ["x1", "g0", "x2"]
    assert shape.apply(HITS, 3, RowView(_row()), random.Random(0))[1]["p"] == 0.5  # no column: the setting's p
    with pytest.raises(ConfigError, match="search_p"):
        RowView(_row(p=1.5))


def test_the_tool_environment_reads_the_rows_level_and_p():
    from rag_curriculum.train import SearchEnvironment

    class Fixed:
        def search(self, queries, k):
            return [HITS[:k] for _ in queries]

    env = SearchEnvironment(Fixed(), top_k=3, difficulty=SearchDifficulty("hard-negatives"))
    for level, d in ((1, 1), (3, 3)):
        env.reset(**_row(level=level))
        env.search("gold")
        assert env.record["searches"][0]["shaped"] == {"hard_negatives": d}
    env = SearchEnvironment(Fixed(), top_k=3, difficulty=SearchDifficulty("withhold", p=0.0))
    env.reset(**_row(p=1.0))
    env.search("gold")
    assert env.record["searches"][0]["shaped"] == {"withheld": 1, "p": 1.0} and not any(env.record["searches"][0]["gold"])


# --- the hook ----------------------------------------------------------------------------------------------------
def _rows(*ids, source="musique"):
    return [{"id": i, "question": f"question {i}", "answers": ["yes"], "data_source": source, "level": 3,
             "prompt": [{"role": "user", "content": i}]} for i in ids]


def _hook(controller, mode="hard-negatives", tmp_path=None, **kw):
    c = None if controller is None else make_controller(controller, K=kw.pop("K", 3), **kw.pop("ckw", {}))
    return SearchCurriculumHook(c, mode=mode, K_of=lambda r: 3, num_generations=2,
                                levels_file=None if tmp_path is None else tmp_path / "levels.jsonl", **kw)


def _batch(hook, rows, right, step):
    """Render, score (exact match from the trajectory's answer) and update one batch of 2 generations per row."""
    shown = hook.render([r for r in rows for _ in range(2)])
    traj = [{"answer": "yes" if ok else "no", "searches": []} for ok in right]
    scored = [{**r, "trajectory": t} for r, t in zip(shown, traj, strict=True)]
    scores = hook.scores(scored, ["ignored"] * len(scored), [0.0] * len(scored))
    assert scores == [1.0 if ok else 0.0 for ok in right]
    entries, hook.pending = hook.pending, None
    return shown, hook.update(entries, scores, step=step)


def test_target_band_drives_the_rows_level_and_records_every_row(tmp_path):
    hook = _hook("target-band", tmp_path=tmp_path, ckw={"start": 3, "eta": 1.0, "alpha": 2.0})
    rows = _rows("a", "b")
    seen = []
    for step in (1, 2, 3):
        shown, metrics = _batch(hook, rows, [False] * 4, step)
        seen.append([r["level"] for r in shown])
        assert P_COLUMN not in shown[0] and metrics["curriculum/success"] == 0.0
    assert seen == [[3] * 4, [2] * 4, [1] * 4]  # T: 3 -> 2.24 -> 1.48 -> 1
    records = [json.loads(x) for x in (tmp_path / "levels.jsonl").read_text().splitlines()]
    assert [r["rows"] for r in records] == [[{"id": i, "level": lv, "p": None} for i in "ab"] for lv in (3, 2, 1)]
    assert [r["level_target"] for r in records][0] == 3.0 and records[1]["level_target"] == pytest.approx(
        3 + math.tanh(-1.0))
    assert [r["step"] for r in records] == [1, 2, 3] and all(r["mode"] == "hard-negatives" for r in records)


def test_mastery_moves_each_question_on_its_own_and_resumes_exactly(tmp_path):
    hook = _hook("mastery", ckw={"start": 2})
    _batch(hook, _rows("a", "b"), [True, True, False, False], 1)
    shown, _ = _batch(hook, _rows("a", "b", "c"), [False] * 6, 2)
    assert [r["level"] for r in shown[::2]] == [3, 1, 2]  # a up, b down, c: the mean of the last batch's moves
    hook.save(tmp_path)
    resumed = _hook("mastery", ckw={"start": 2})
    assert resumed.load(tmp_path)
    again = resumed.render(_rows("a", "b", "c", "d"))
    assert [r["level"] for r in again] == [r["level"] for r in hook.render(_rows("a", "b", "c", "d"))] == [2, 1, 1, 1]
    assert resumed.controller.batch == 2


def test_withhold_maps_the_controllers_level_to_p():
    hook = _hook("target-band", mode="withhold", K=3, ckw={"start": 3}, p_start=0.0, p_end=1.0, p_levels=3)
    ps = []
    for step in (1, 2, 3):
        shown, metrics = _batch(hook, _rows("a"), [False, False], step)
        ps.append(shown[0][P_COLUMN])
        assert shown[0]["level"] == 3  # the row's own level is left alone
        assert metrics["curriculum/p_mean"] == ps[-1] and "curriculum/level_mean" not in metrics
    assert ps == [1.0, 0.5, 0.0]
    assert hook.records[1]["p_target"] == pytest.approx(level_to_p(3 + math.tanh(-1.0), 3, 0.0, 1.0))


def test_zerosearch_schedule_follows_the_trainers_step(tmp_path):
    import types

    hook = _hook(None, mode="withhold", schedule="zerosearch", p_start=0.0, p_end=0.5)
    with pytest.raises(ConfigError, match="bound"):
        hook.render(_rows("a"))
    state = types.SimpleNamespace(global_step=0, max_steps=100)
    hook.bind(types.SimpleNamespace(state=state))
    got = []
    for t in (0, 50, 100):
        state.global_step = t
        shown, metrics = _batch(hook, _rows("a", "b"), [False] * 4, t + 1)
        got.append(shown[0][P_COLUMN])
        assert {r[P_COLUMN] for r in shown} == {got[-1]} and "curriculum/level_target" not in metrics
    assert got == [round(noise_probability(t, 100), 12) for t in (0, 50, 100)] == [0.0, pytest.approx(1 / 6), 0.5]
    assert [r["batch"] for r in hook.records] == [1, 2, 3]
    hook.save(tmp_path)
    resumed = _hook(None, mode="withhold", schedule="zerosearch")
    assert resumed.load(tmp_path) and resumed.batch == 3  # a resumed run's records continue the numbering
    with pytest.raises(ConfigError, match="p-schedule"):
        _hook("target-band", mode="withhold").load(tmp_path)


def test_success_can_be_the_total_reward():
    hook = _hook("target-band", success="reward")
    assert hook.scores(_rows("a"), ["x"], [0.25]) == [0.25]


# --- the config --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("overrides", "match"), [
    (["adaptive.controller=target-band"], "difficulty=none"),
    (["agent.difficulty=hard-negatives", "agent.p_schedule=zerosearch"], "p_schedule"),
    (["agent.difficulty=withhold", "agent.p_schedule=zerosearch", "adaptive.controller=target-band"], "both"),
    (["agent.difficulty=hard-negatives", "adaptive.controller=mastery", "adaptive.from_pass_rates=true",
      "data.pass_rates=x"], "from_pass_rates"),
    (["agent.difficulty=withhold", "agent.p_schedule=zerosearch", "dynamic.enabled=true"], "dynamic"),
])
def test_the_combinations_that_do_not_work_are_refused_in_one_line(tmp_path, overrides, match):
    from rag_curriculum.train import compose_train_config

    cfg = compose_train_config("search-r1-cpu-tiny", [f"data.shards={tmp_path}", *overrides])
    with pytest.raises(ConfigError, match=match):
        cfg.validate()


@pytest.mark.parametrize("overrides", [
    ["agent.difficulty=hard-negatives", "adaptive.controller=target-band"],
    ["agent.difficulty=hard-negatives", "adaptive.controller=mastery"],
    ["agent.difficulty=withhold", "adaptive.controller=target-band", "agent.p_levels=11"],
    ["agent.difficulty=withhold", "agent.p_schedule=zerosearch", "agent.p_end=0.7"],
    ["agent.difficulty=withhold", "agent.protocol=tools", "agent.template=search-tools", "agent.first_turn=null",
     "adaptive.controller=target-band"],
])
def test_the_combinations_that_work_are_accepted(tmp_path, overrides):
    from rag_curriculum.train import compose_train_config
    from rag_curriculum.train._trl import check_recipe

    check_recipe(compose_train_config("search-r1-cpu-tiny", [f"data.shards={tmp_path}", *overrides]))


# --- real GRPO runs ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    pytest.importorskip("trl", reason="the `train` extra is needed for training tests")
    pytest.importorskip("bm25s")
    from rag_retriever import IndexConfig, build_index

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    base = tmp_path_factory.mktemp("search-adaptive")
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(base / "ix"), depth=20))
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=6)], schedule="max", K=3,
                                 out=str(base / "shards"), seed=0, workers=1))
    return base


TARGET_BAND = ("adaptive.controller=target-band", "adaptive.kwargs.start=3")
TOPK = 1  # one passage per search: the shortest trajectories (the test's time is the tiny model's forward passes)


def _train(base, tiny_model_dir, name, *overrides):
    from rag_curriculum.train import SearchRollout, compose_train_config, train

    calls: list[tuple[list[dict], dict]] = []
    call = SearchRollout.__call__

    def record(self, prompts, trainer):
        got = call(self, prompts, trainer)
        calls.append(([dict(r) for r in trainer.current_inputs], got))
        return got

    mp = pytest.MonkeyPatch()
    mp.setattr(SearchRollout, "__call__", record)
    try:
        cfg = compose_train_config("search-r1-cpu-tiny", [
            f"model.name_or_path={tiny_model_dir}", f"data.shards={base / 'shards'}", f"run.output_dir={base / name}",
            f"agent.retriever={base / 'ix'}", f"agent.top_k={TOPK}", "agent.max_turn_tokens=8", "grpo.beta=0.0",
            "grpo.report_to=none", *overrides])
        result = train(cfg, overrides=["recipe=search-r1-cpu-tiny"])
    finally:
        mp.undo()
    return result, calls


@pytest.mark.slow
def test_target_band_moves_the_search_level_and_the_hard_negatives_follow(setup, tiny_model_dir):
    from rag_curriculum.agents._retrievers import open_retriever
    from rag_curriculum.train.adaptive import LEVELS_FILE, PLOT_FILE, read_levels

    result, calls = _train(setup, tiny_model_dir, "hard", "agent.difficulty=hard-negatives", *TARGET_BAND)
    assert result.global_step == 3 and len(calls) == 3
    levels = [[r["level"] for r in rows] for rows, _ in calls]
    assert levels == [[3] * 4, [2] * 4, [1] * 4]  # nothing right: T 3 -> 2.24 -> 1.48
    records = read_levels(result.output_dir / LEVELS_FILE)
    assert [[x["level"] for x in r["rows"]] for r in records] == [[3, 3], [2, 2], [1, 1]]
    assert [[x["id"] for x in r["rows"]] for r in records] == [[rows[0]["id"], rows[2]["id"]] for rows, _ in calls]
    assert [r["success"] for r in records] == [0.0, 0.0, 0.0]
    # every first search shaped at its row's level: d = min(max(l + 2 - j, 0), k) when the ranking holds a gold
    retriever = open_retriever(str(setup / "ix"))
    used: dict[int, set[int]] = {}
    for rows, got in calls:
        depth = TOPK + max(SearchDifficulty("hard-negatives").extra(TOPK, RowView(r)) for r in rows)  # the batch's
        for row, traj in zip(rows, got["trajectory"], strict=True):
            first = traj["searches"][0]  # the scripted search, run for every trajectory in one retriever call
            view = RowView(row)
            hits = retriever.search([first["query"]], depth)[0]
            found = any(view.is_gold(h) for h in hits)
            d = hard_negative_count(row["level"], len(view.gold), len(view.negatives)) if found else 0
            assert first["shaped"] == {"hard_negatives": d}, (row["id"], row["level"])
            used.setdefault(row["level"], set()).add(d)
    assert max(used[3]) > max(used[1])  # the shaping followed the controller down
    state = json.loads((result.output_dir / "checkpoint-3" / "curriculum_controller.json").read_text())
    assert state["name"] == "target-band" and state["batch"] == 3 and state["T"] == pytest.approx(records[-1]["next_target"])
    assert (result.output_dir / PLOT_FILE).stat().st_size > 0
    logged = {k for h in result.log_history for k in h}
    assert {"curriculum/level_target", "curriculum/success"} <= logged
    assert [h["curriculum/level_mean"] for h in result.log_history if "loss" in h] == [3.0, 2.0, 1.0]


WITHHOLD = ("agent.difficulty=withhold", "agent.p_levels=3", "agent.p_start=0.0", "agent.p_end=1.0", *TARGET_BAND,
            "grpo.save_steps=2", "grpo.save_total_limit=2")


@pytest.fixture(scope="module")
def withheld(setup, tiny_model_dir):
    return _train(setup, tiny_model_dir, "withhold", *WITHHOLD)


@pytest.mark.slow
def test_target_band_moves_p_and_the_withheld_gold_follows(setup, withheld):
    from rag_curriculum.agents._retrievers import open_retriever
    from rag_curriculum.train.adaptive import LEVELS_FILE, read_levels

    result, calls = withheld
    ps = [[r[P_COLUMN] for r in rows] for rows, _ in calls]
    assert ps == [[1.0] * 4, [0.5] * 4, [0.0] * 4]
    records = read_levels(result.output_dir / LEVELS_FILE)
    assert [[x["p"] for x in r["rows"]] for r in records] == [[1.0, 1.0], [0.5, 0.5], [0.0, 0.0]]
    assert [r["p_mean"] for r in records] == [1.0, 0.5, 0.0]
    assert [h["curriculum/p_mean"] for h in result.log_history if "loss" in h] == [1.0, 0.5, 0.0]
    retriever = open_retriever(str(setup / "ix"))
    withheld = 0
    for (rows, got), p in zip(calls, (1.0, 0.5, 0.0), strict=True):
        for row, traj in zip(rows, got["trajectory"], strict=True):
            view = RowView(row)
            for s in traj["searches"]:
                assert s["shaped"]["p"] == p
                gold_top = sum(view.is_gold(h) for h in retriever.search([s["query"]], TOPK)[0])
                if p == 1.0:
                    assert s["shaped"]["withheld"] == gold_top and not any(s["gold"])
                    withheld += gold_top
                elif p == 0.0:
                    assert s["shaped"]["withheld"] == 0 and sum(s["gold"]) == gold_top
    assert withheld > 0  # the index does rank gold passages for these questions: p = 1 removed them


@pytest.mark.slow
def test_a_resumed_run_continues_with_the_controllers_state(setup, withheld, tiny_model_dir, tmp_path):
    """Resumed from checkpoint-2, step 3 is shown at the p the restored controller gives (0.0; a fresh one would
    start at level 3, p = 1.0), and the levels file reads as the uninterrupted run's."""
    import shutil

    from rag_curriculum.train.adaptive import LEVELS_FILE, read_levels

    result, calls = withheld
    name = f"resumed-{tmp_path.name}"
    shutil.copytree(result.output_dir, setup / name, ignore=shutil.ignore_patterns("checkpoint-3"))
    resumed, again = _train(setup, tiny_model_dir, name, *WITHHOLD)
    assert resumed.global_step == 3 and len(again) == 1
    assert [r[P_COLUMN] for r in again[0][0]] == [r[P_COLUMN] for r in calls[2][0]] == [0.0] * 4
    assert [r["curriculum_index"] for r in again[0][0]] == [r["curriculum_index"] for r in calls[2][0]]
    assert read_levels(setup / name / LEVELS_FILE) == read_levels(result.output_dir / LEVELS_FILE)


@pytest.mark.slow
def test_zerosearch_schedule_moves_p_over_the_runs_steps(setup, tiny_model_dir):
    from rag_curriculum.train.adaptive import LEVELS_FILE, PLOT_FILE, read_levels

    result, calls = _train(setup, tiny_model_dir, "zerosearch", "agent.difficulty=withhold", "agent.p_schedule=zerosearch",
                           "agent.p_start=0.0", "agent.p_end=1.0", "grpo.max_steps=2")
    expected = [round(noise_probability(t, 2, 0.0, 1.0), 12) for t in (0, 1)]
    assert expected == [0.0, pytest.approx(1 / 3)]
    assert [[r[P_COLUMN] for r in rows] for rows, _ in calls] == [[p] * 4 for p in expected]
    assert [[s["shaped"]["p"] for t in got["trajectory"] for s in t["searches"]][0] for _, got in calls] == expected
    records = read_levels(result.output_dir / LEVELS_FILE)
    assert [r["p_target"] for r in records] == expected and all("level_target" not in r for r in records)
    assert [[x["p"] for x in r["rows"]] for r in records] == [[p, p] for p in expected]
    assert (result.output_dir / PLOT_FILE).stat().st_size > 0
