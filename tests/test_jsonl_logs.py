"""The one reader of the toolkit's JSONL logs (_plumbing.read_jsonl_latest), through the three public names that use
it: train.read_steps, train.adaptive.read_levels, train._dynamic.read_records."""

import json

import pytest

from rag_curriculum._plumbing import read_jsonl_latest, read_state, write_state
from rag_curriculum.train import read_steps
from rag_curriculum.train._dynamic import read_records
from rag_curriculum.train.adaptive import read_levels


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_resumed_log_last_record_per_key_wins_sorted(tmp_path):
    # a run wrote batches 0..2, was resumed from batch 1 and wrote 1..3 again (with other numbers); a blank line
    # and a whitespace-only line between them are skipped
    recs = [{"batch": b, "step": b + 1, "v": "first"} for b in (0, 1, 2)]
    recs += [{"batch": b, "step": b + 1, "v": "resumed"} for b in (1, 2, 3)]
    path = _write(tmp_path / "log.jsonl", [json.dumps(recs[0]), "", *map(json.dumps, recs[1:3]), "   ",
                                           *map(json.dumps, recs[3:])])
    want = [recs[0], *recs[3:]]
    assert read_jsonl_latest(path, "batch") == want
    assert read_levels(path) == want
    assert read_records(path) == want
    assert read_steps(path) == want  # keyed by step: the same records here
    assert [r["v"] for r in read_jsonl_latest(path, "batch")] == ["first", "resumed", "resumed", "resumed"]


def test_keys_sorted_numerically_not_by_line(tmp_path):
    path = _write(tmp_path / "steps.jsonl", [json.dumps({"step": s}) for s in (10, 2, 1)])
    assert [r["step"] for r in read_steps(path)] == [1, 2, 10]


@pytest.mark.parametrize("bad, says", [
    ('{"batch": 1', "not valid JSON"),
    ('[1, 2]', "expected a JSON object with a 'batch' field"),
    ('{"step": 1}', "expected a JSON object with a 'batch' field"),
])
def test_bad_line_names_the_file_and_line(tmp_path, bad, says):
    path = _write(tmp_path / "levels.jsonl", [json.dumps({"batch": 0}), "", bad])
    with pytest.raises(ValueError) as e:
        read_levels(path)
    assert str(e.value).startswith(f"{path}, line 3: ")
    assert says in str(e.value)


def test_empty_file_has_no_records(tmp_path):
    assert read_records(_write(tmp_path / "d.jsonl", [])) == []


def test_a_checkpoints_state_round_trips_and_a_damaged_one_names_its_file(tmp_path):
    """write_state / read_state (the training callbacks' checkpoint state): the same value back, keys sorted on disk;
    no file is None (the caller decides); a file cut short is refused naming it, never read as a fresh start."""
    path = tmp_path / "checkpoint-4" / "curriculum_controller.json"
    path.parent.mkdir()
    state = {"name": "target-band", "batch": 7, "levels": [1, 2, 2], "target": 2.5}
    write_state(path, state)
    assert read_state(path) == state
    assert path.read_text().index('"batch"') < path.read_text().index('"name"')
    assert read_state(tmp_path / "checkpoint-4" / "absent.json") is None
    path.write_text(path.read_text()[:-5])
    with pytest.raises(ValueError, match=r"curriculum_controller\.json: not valid JSON .*damaged"):
        read_state(path)
