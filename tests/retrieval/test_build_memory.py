"""The BM25 build drops the pages of the temporary files it has read from its resident memory (``_release``): a
memory-mapped file read whole counts in the process's RSS until then (the 5.2M build's 12.7 GB peak)."""

import sys
from pathlib import Path

import numpy as np
import pytest

from rag_curriculum.retrieval import _postings


def _rss_file_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1])
    raise AssertionError("no RssFile line")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status (Linux)")
def test_release_drops_a_read_maps_pages_and_keeps_its_data(tmp_path):
    path = tmp_path / "tokens.bin"
    np.arange(16 << 20, dtype=np.int32).tofile(path)  # 64 MB
    tokens = np.memmap(path, dtype=np.int32, mode="r")
    before = _rss_file_kb()
    assert int(tokens.sum(dtype=np.int64)) == (16 << 20) * ((16 << 20) - 1) // 2  # every page touched
    touched = _rss_file_kb()
    assert touched - before > 50_000  # the file's pages count as this process's memory
    _postings._release(tokens[10:20])  # a view: its map is found through its base
    assert touched - _rss_file_kb() > 50_000
    assert int(tokens[12]) == 12 and int(tokens[-1]) == (16 << 20) - 1  # read back from the page cache
    _postings._release(np.zeros(3))  # an array in memory: nothing to drop, no error
