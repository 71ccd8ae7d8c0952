"""``python -m rag_curriculum.verl agent-data``: a curriculum's rows as verl search-agent rows (the tool's part of
verl itself runs in the verl tier, tests/tier_verl/test_verl_search_tool.py)."""

from __future__ import annotations

import pyarrow.parquet as pq

from rag_curriculum.shards import shard_files
from rag_curriculum.verl.data import main


def test_the_rows_in_curriculum_order_byte_identical_and_an_existing_file_kept(min_max_shards, tmp_path, capsys):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert main(["agent-data", str(min_max_shards), str(a)]) == 0
    assert main(["agent-data", str(min_max_shards), str(b), "--template", "search-r1-original"]) == 0
    rows = pq.read_table(a).to_pylist()
    source = [r for f in shard_files(min_max_shards) for r in pq.read_table(f).to_pylist()]
    assert [r["id"] for r in rows] == [r["id"] for r in source]
    first = rows[0]
    assert first["agent_name"] == "tool_agent" and len(first["prompt"]) == 1
    assert first["prompt"][0]["content"].endswith(f"Question: {source[0]['question'].strip()}")
    assert "Question:" in pq.read_table(b).to_pylist()[0]["prompt"][0]["content"]
    row = first["extra_info"]["tools_kwargs"]["search"]["create_kwargs"]["row"]
    assert row["level"] == source[0]["level"] and row["answers"] == source[0]["answers"]
    assert [p["is_gold"] for p in row["passages"]] == [p["is_gold"] for p in source[0]["passages"]]
    assert first["extra_info"]["index"] == source[0]["extra_info"]["index"]  # the row's own extra_info kept
    # the same shards give the same bytes; an existing file is not replaced without --overwrite
    before = a.read_bytes()
    assert main(["agent-data", str(min_max_shards), str(a)]) == 2
    assert "exists" in capsys.readouterr().err and a.read_bytes() == before
    assert main(["agent-data", str(min_max_shards), str(a), "--overwrite"]) == 0 and a.read_bytes() == before


def test_bad_arguments_exit_2_with_one_line(tmp_path, capsys):
    assert main(["agent-data"]) == 2 and "usage:" in capsys.readouterr().err
    assert main(["agent-data", str(tmp_path / "missing"), str(tmp_path / "o.parquet")]) != 0
    err = capsys.readouterr().err
    assert err.startswith("error:") and "Traceback" not in err and not (tmp_path / "o.parquet").exists()
    assert main(["agent-data", str(tmp_path), str(tmp_path / "o.parquet"), "--template", "nosuch"]) != 0
    assert "Traceback" not in capsys.readouterr().err
