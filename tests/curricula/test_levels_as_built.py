"""The difficulty a build really has, on the real HotpotQA sample: HotpotQA supplies 8 distractors,
so a linear K = 10 build's levels 9 and 10 ask for 9 and 10 but show 8, the same difficulty as level 8. The build
says so once, the manifest records each level as built and the levels that collapse, the card's table and note say
it, the plot draws the level as built beside the schedule's, and a BM25 index (the suggested fix) fills them."""

from __future__ import annotations

import json
import logging

import pytest
from conftest import HOTPOT_TRAIN
from rag_retriever import IndexConfig, build_index

from rag_curriculum import _plots
from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.shards import read_rows


def _build(out, **kw):
    kw = {"sources": [SourceSpec("hotpotqa", str(HOTPOT_TRAIN), 100)], "K": 10, **kw}
    return build_curriculum(BuildConfig(schedule="linear", out=str(out), seed=0, **kw),
                            command="curriculum build (test)")


@pytest.fixture(scope="module")
def k10(tmp_path_factory, shared_data):
    """The linear K = 10 build, the warnings it logged, and what its level plot was drawn with."""
    drawn: list = []
    save = _plots.save_png

    def record(fig, path):
        drawn.append([(line.get_label(), list(line.get_ydata())) for line in fig.axes[0].get_lines()])
        return save(fig, path)

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("rag_curriculum").addHandler(handler)
    mp = pytest.MonkeyPatch()
    mp.setattr(_plots, "save_png", record)
    try:
        res = _build(tmp_path_factory.mktemp("asbuilt") / "hotpotqa-linear")
    finally:
        mp.undo()
        logging.getLogger("rag_curriculum").removeHandler(handler)
    return res, [r.getMessage() for r in records if r.levelno >= logging.WARNING], drawn


def test_the_levels_that_collapse_are_recorded_and_said_once(k10):
    res, warnings, _ = k10
    m = res.manifest
    rows = read_rows(res.out)
    # the rows themselves: every level-9 and level-10 row shows at most 8 distractors, as many as level 8's
    assert max(r["num_distractors"] for r in rows if r["level"] >= 9) == 8
    by_level = m["counts"]["by_level"]
    assert list(by_level) == [str(lv) for lv in range(1, 11)]  # levels as numbers
    assert by_level["9"] == {"rows": 10, "asked": 9.0, "distractors": 8.0, "distractors_min": 8, "passages": 10.0,
                             "short_rows": 10, "short_max": 8, "shows": 8}
    assert by_level["10"]["asked"] == 10.0 and by_level["10"]["distractors"] == 8.0
    assert by_level["8"]["short_rows"] == 0 and by_level["8"]["distractors"] == 8.0
    for level, b in by_level.items():  # what the rows hold, recomputed
        got = [r for r in rows if r["level"] == int(level)]
        assert b["distractors"] == round(sum(r["num_distractors"] for r in got) / len(got), 2)
    assert m["capped_levels"] == {"distractors": "provided", "groups": [
        {"dataset": "hotpotqa", "as_level": 8, "levels": [8, 9, 10], "capped": [9, 10], "rows": 30,
         "short_rows": 20, "max_distractors": 8}]}
    said = [w for w in warnings if "same difficulty" in w]
    assert len(said) == 1, warnings  # once, for the whole build
    assert "Levels 8, 9 and 10 of hotpotqa hold the same difficulty (30 rows, 30.0% of the curriculum)" in said[0]
    assert "--distractors bm25 --index DIR" in said[0]


def test_the_manifest_on_disk_sorts_levels_as_numbers(k10):
    res, _, _ = k10
    m = json.loads((res.out / "manifest.json").read_text())
    ten = [str(lv) for lv in range(1, 11)]
    assert list(m["counts"]["levels"]) == ten and list(m["counts"]["levels_by_source"]["hotpotqa"]) == ten
    assert list(m["counts"]["by_level"]) == ten and list(m["counts"]["num_distractors"]) == [str(d) for d in
                                                                                               range(1, 9)]


def test_the_card_shows_each_level_as_built_and_names_the_levels_that_collapse(k10):
    res, _, _ = k10
    card = (res.out / "README.md").read_text()
    assert ("| level | rows | distractors asked | distractors shown (mean) | fewest shown | passages | rows short |"
            in card)
    assert "| 8 | 10 | 8 | 8 | 8 | 10 | - |" in card
    assert "| 9 | 10 | 9 | 8 | 8 | 10 | 10 |" in card and "| 10 | 10 | 10 | 8 | 8 | 10 | 10 |" in card
    assert "| 3 | 10 | 3 | 2.9 | 2 | 4.9 | 1 |" in card  # one level-3 question has two distractors, named:
    assert "hotpotqa-5ac2a291554299657fa28ff6 (hotpotqa, curriculum_index 27) at level 3 shows 2 of 3" in card
    assert "Levels 8, 9 and 10 of hotpotqa hold the same difficulty" in card
    assert "`--distractors bm25 --index DIR`" in card
    from huggingface_hub import DatasetCard

    assert DatasetCard.load(res.out / "README.md").data.configs  # still a valid card


def test_the_plot_draws_the_level_as_built_beside_the_schedules(k10):
    _, _, drawn = k10
    (lines,) = drawn
    (sched, scheduled), (built, as_built), (short, marked) = lines
    assert sched == "level (schedule)" and built == "level as built (distractors shown)"
    assert short == "row short of its level (level it shows)" and marked == [2]  # the level-3 row shows level 2
    assert scheduled[-3:] == [9, 10, 10] and as_built[-3:] == [8, 8, 8]  # the last levels flat at 8
    assert as_built[:2] == [1, 2] and as_built[2] == pytest.approx(2.9)


def test_a_build_whose_levels_get_what_they_ask_for_says_nothing(tmp_path, shared_data, caplog):
    with caplog.at_level(logging.WARNING, logger="rag_curriculum"):
        res = _build(tmp_path / "k8", K=8)
    assert "capped_levels" not in res.manifest and "same difficulty" not in caplog.text
    assert "hold the same difficulty" not in (res.out / "README.md").read_text()
    assert res.manifest["counts"]["by_level"]["8"]["distractors"] == 8.0


def test_a_bm25_index_fills_the_levels_the_dataset_cannot(tmp_path, shared_data, caplog):
    """The suggested fix works: the same build with --distractors bm25 shows every level its distractors."""
    idx = tmp_path / "idx"
    build_index(IndexConfig(dataset="hotpotqa", input=str(HOTPOT_TRAIN), out=str(idx), depth=40))
    with caplog.at_level(logging.WARNING, logger="rag_curriculum"):
        res = _build(tmp_path / "bm25", distractors="bm25", index=str(idx))
    by_level = res.manifest["counts"]["by_level"]
    assert by_level["9"]["distractors"] == 9.0 and by_level["10"]["distractors"] == 10.0
    assert "capped_levels" not in res.manifest and "same difficulty" not in caplog.text


def test_a_mixture_names_each_datasets_collapsed_levels(tmp_path, shared_data, caplog):
    from conftest import MUSIQUE_TRAIN

    with caplog.at_level(logging.INFO, logger="rag_curriculum"):
        res = build_curriculum(BuildConfig(
            sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 40), SourceSpec("hotpotqa", str(HOTPOT_TRAIN), 40)],
            schedule="max", out=str(tmp_path / "mix"), seed=0), command="curriculum build (test)")
    groups = {g["dataset"]: g for g in res.manifest["capped_levels"]["groups"]}
    # max: every row at its dataset's K (the paper's: MuSiQue 20, HotpotQA 10); neither has the level it shows
    assert groups["hotpotqa"]["levels"] == [10] and groups["hotpotqa"]["as_level"] == 8
    assert groups["musique"]["levels"] == [20] and groups["musique"]["as_level"] == 18
    (said,) = [r for r in caplog.records if "distractors than" in r.getMessage()]  # said once
    assert "Level 10 of hotpotqa (40 rows) asks for more distractors" in said.getMessage()
    assert "Level 20 of musique (40 rows) asks for more distractors" in said.getMessage()
    # no two levels of this build hold one difficulty (only the top level's label overstates it): not a warning,
    # as the paper's own K under max or min-max (the quickstart's build) should not warn; the card says it
    assert said.levelno == logging.INFO
    assert "Level 20 of musique (40 rows) asks for more distractors" in (res.out / "README.md").read_text()
