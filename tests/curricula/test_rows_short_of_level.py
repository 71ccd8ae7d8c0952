"""A row shown fewer distractors than its level asks for, alone in its level, is named rather than averaged away:
in the real HotpotQA validation sample one question comes with only its two gold paragraphs, so wherever a linear
K = 10 build places it, it shows 0 distractors. The build (the `curriculum build` command) names it in its
warning (id, level, distractors shown), the manifest records it, the card's per-level table gives the fewest
distractors shown beside the mean and its note names the row, and the level plot marks it where it is."""

from __future__ import annotations

import logging

import pytest
from conftest import HOTPOT_HUB
from typer.testing import CliRunner

from rag_curriculum import _plots
from rag_curriculum.cli import app
from rag_curriculum.difficulty import num_distractors
from rag_curriculum.shards import read_manifest, read_rows

BARE = "hotpotqa-5ade28b15542997c77aded83"  # its context: the two gold paragraphs, nothing else


@pytest.fixture(scope="module")
def built(tmp_path_factory, shared_data):
    """The build through the command, its warnings and what its level plot drew (label, x, y of each line)."""
    out = tmp_path_factory.mktemp("short") / "hotpotqa-dev-linear"
    drawn: list = []
    save = _plots.save_png

    def record(fig, path):
        drawn.append({line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
                      for line in fig.axes[0].get_lines()})
        return save(fig, path)

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("rag_curriculum").addHandler(handler)
    mp = pytest.MonkeyPatch()
    mp.setattr(_plots, "save_png", record)
    try:
        r = CliRunner().invoke(app, ["build", "--dataset", "hotpotqa", "--input", str(HOTPOT_HUB), "--schedule",
                                     "linear", "--K", "10", "--n", "300", "--allow-split-mismatch", "--out", str(out),
                                     "--no-progress"], catch_exceptions=False)
    finally:
        mp.undo()
        logging.getLogger("rag_curriculum").removeHandler(handler)
    assert r.exit_code == 0, r.output
    (row,) = [x for x in read_rows(out) if x["id"] == BARE]
    return out, row, [x.getMessage() for x in records if x.levelno >= logging.WARNING], drawn


def test_the_row_is_named_in_the_warning_and_the_manifest(built):
    out, row, warnings, _ = built
    level, index = row["level"], row["curriculum_index"]
    asked = num_distractors(level, row["hops"], 1 << 30)
    assert row["num_distractors"] == 0 and asked > 0
    said = [w for w in warnings if BARE in w]
    assert len(said) == 1, warnings
    assert (f"{BARE} (hotpotqa, curriculum_index {index}) at level {level} shows 0 of {asked} distractors, what "
            f"level 0 shows") in said[0]
    record = read_manifest(out)["short_rows"]
    assert {"id": BARE, "dataset": "hotpotqa", "curriculum_index": index, "level": level, "asked": asked,
            "shown": 0, "shows": 0} == record["rows"][0]  # the farthest short first
    # every row named is short of its level, and none of the others is far short of it
    rows = read_rows(out)
    named = {r["id"] for r in record["rows"]}
    assert record["count"] == len(named)
    for r in rows:
        if r["id"] in named:
            assert r["num_distractors"] < num_distractors(r["level"], r["hops"], 1 << 30)


def test_the_card_gives_the_fewest_shown_beside_the_mean_and_names_the_row(built):
    out, row, _, _ = built
    card = (out / "README.md").read_text()
    assert "| level | rows | distractors asked | distractors shown (mean) | fewest shown | passages | rows short |" \
        in card
    by_level = read_manifest(out)["counts"]["by_level"][str(row["level"])]
    assert by_level["distractors_min"] == 0 and by_level["distractors"] > 0  # the mean alone would hide it
    line = next(x for x in card.splitlines() if x.startswith(f"| {row['level']} | "))
    assert line.split(" | ")[4] == "0", line
    assert f"{BARE} (hotpotqa, curriculum_index {row['curriculum_index']}) at level {row['level']} shows 0" in card


def test_the_plot_marks_the_row_where_it_is(built):
    _, row, _, drawn = built
    (lines,) = drawn
    xs, ys = lines["row short of its level (level it shows)"]
    assert (row["curriculum_index"] + 1, 0) in set(zip(xs, ys, strict=True))
