"""Test workers share the cores: under N pytest-xdist workers each worker's torch, and each command a test starts,
uses cores / N OpenMP threads (N pools of every core, spinning on the same cores, ran the main tier 1.44x slower)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_each_worker_and_each_command_it_starts_take_their_share_of_the_cores():
    import torch

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    cores = len(os.sched_getaffinity(0))
    child = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                           capture_output=True, text=True, check=True).stdout.strip()
    if workers > 1:
        share = int(os.environ["OMP_NUM_THREADS"])  # the caller's, if it set one
        if os.environ.get("RAG_CURRICULUM_TEST_THREADS_SHARED"):
            assert share == max(1, cores // workers)
        assert torch.get_num_threads() == share and child == str(share)
    else:  # one process: torch's own default, all the cores it may use
        assert int(child) == torch.get_num_threads()
