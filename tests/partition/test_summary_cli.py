"""The summary `curriculum partition` prints, on rows built from ../shared/data by a scripted model: mean pass@k with
its 95% interval (as partition.json records it), and the note that says why no sample kept the output format."""

from __future__ import annotations

import json

from conftest import HOTPOT_TRAIN
from typer.testing import CliRunner

from rag_curriculum.cli import app


def test_summary_gives_pass_at_k_with_its_interval_and_explains_a_format_never_kept(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({}))  # every prompt gets the default: an answer without the format
    out = tmp_path / "part"
    res = CliRunner().invoke(app, ["partition", "--dataset", "hotpotqa", "--input", str(HOTPOT_TRAIN), "--n", "6",
                                   "--K", "1", "--backend", "scripted", "--model", str(script), "--backend-arg",
                                   "default=Final answer: Paris", "--pass-at", "2", "--no-progress",
                                   "--out", str(out)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    counts = json.loads((out / "partition.json").read_text())["counts"]
    assert counts["format_valid_rate"] == 0 and set(counts["pass_at_k_interval"]) == {"1", "2"}
    for k in ("1", "2"):
        lo, hi = counts["pass_at_k_interval"][k]
        assert f"mean pass@{k} (95% interval)" in res.output
        assert f"{counts['mean_pass_at_k'][k]:.4f} [{lo:.4f}, {hi:.4f}]" in res.output
    flat = " ".join(res.output.split())
    assert "no sample kept the output format" in flat
    assert "docs/base-models.md#why-citation-and-joint-f1-are-0" in flat
