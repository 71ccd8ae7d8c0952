"""Ray's token authentication is named as the cause of a refused connection, not blamed on the install."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_a_ray_auth_refusal_is_named_not_blamed_on_the_install(monkeypatch):
    import ray
    from ray.exceptions import AuthenticationError

    from rag_curriculum.errors import EngineError
    from rag_curriculum.generation._engine import EngineConfig
    from rag_curriculum.generation._ray_engine import AUTH_HINT, RayEngine, is_auth_error

    def refuse(**kw):
        raise AuthenticationError("Authentication failed: the token does not match the cluster's")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    engine = RayEngine(EngineConfig(engine="ray", ray_address="auto"))
    with pytest.raises(EngineError, match="Ray's token authentication refused it") as ei:
        engine.connect()
    assert ei.value.hint == AUTH_HINT and "RAY_AUTH_MODE" in AUTH_HINT and "every node has the toolkit" not in AUTH_HINT
    assert is_auth_error(RuntimeError("grpc: UNAUTHENTICATED: missing x-ray-authorization header"))
    assert not is_auth_error(RuntimeError("No module named 'rag_curriculum'"))
    text = (Path(__file__).parents[2] / "docs" / "scaling.md").read_text()
    assert "RAY_AUTH_MODE=disabled ray start" in text and "ray get-auth-token --generate" in text
