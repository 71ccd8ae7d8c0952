"""A process already connected to a Ray cluster: a command's --ray-address naming that cluster (as Ray records it,
or through this machine's loopback) joins it; another cluster's address is refused in one line naming both, never
silently ignored for the connected one (a `curriculum index --engine ray --ray-address` called from a notebook
that ran ray.init() before)."""

from __future__ import annotations

import logging

import pytest

from rag_curriculum.errors import UsageError

pytestmark = pytest.mark.slow


def test_the_connected_cluster_is_joined_and_another_address_refused(ray_cluster):
    from rag_plumbing._ray import connect_ray

    ray = ray_cluster
    joined = ray.get_runtime_context().gcs_address
    port = joined.rsplit(":", 1)[1]
    log = logging.getLogger("test")
    for same in (joined, f"127.0.0.1:{port}", f"localhost:{port}", "auto", None):
        assert connect_ray(ray, same, error=UsageError, log=log, purpose="a test") is False  # joined, not started
    with pytest.raises(UsageError) as e:
        connect_ray(ray, "127.0.0.1:9", error=UsageError, log=log, purpose="a test")
    assert f"--ray-address 127.0.0.1:9: this process is connected to the Ray cluster at {joined} already" in str(e.value)
    assert "ray.shutdown()" in e.value.hint
    assert ray.is_initialized()  # the connection kept
