"""Generation backends behind one interface (vLLM offline, an OpenAI-compatible server, transformers).

Backends are registered by dotted path, so importing this package never imports vLLM, openai or torch.

>>> sorted(BACKENDS.names())
['openai', 'scripted', 'transformers', 'vllm']
"""

from __future__ import annotations

from .base import BACKENDS, GenerationBackend, SamplingConfig, get_backend

__all__ = ["BACKENDS", "GenerationBackend", "SamplingConfig", "get_backend"]
