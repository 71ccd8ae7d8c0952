"""The OpenAI backend retries with tenacity and keeps the toolkit's hints."""

from __future__ import annotations

import threading

import pytest


def test_openai_retries_are_tenacitys_and_keep_the_hints(monkeypatch):
    """The request goes through tenacity.Retrying (no loop of the toolkit's own): a retryable failure is retried
    with tenacity's wait, logged, counted; a refusal fails at once with its hint; giving up says how often."""
    import openai
    import tenacity

    from rag_curriculum.generation import GenerationError
    from rag_curriculum.generation._openai_backend import OpenAIBackend

    calls = []
    real = tenacity.Retrying.__call__

    def spy(self, fn, *a, **k):
        calls.append(self)
        return real(self, fn, *a, **k)

    monkeypatch.setattr(tenacity.Retrying, "__call__", spy)
    b = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", max_retries=2, backoff=0.001, timeout=0.2)
    with pytest.raises(GenerationError, match=r"after 3 attempt\(s\).*hint:"):
        b._with_retries({"model": "m", "messages": []}, threading.Event())
    assert calls and b.retries == 2
    import httpx

    refused = openai.AuthenticationError("no", response=httpx.Response(401, request=httpx.Request("POST", "http://x")),
                                         body={"message": "bad key"})
    monkeypatch.setattr(b, "_create", lambda kw: (_ for _ in ()).throw(refused))
    with pytest.raises(GenerationError, match="HTTP 401.*hint"):
        b._with_retries({}, threading.Event())
    assert b.retries == 2  # not retried
