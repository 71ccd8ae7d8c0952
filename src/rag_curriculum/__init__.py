"""rag-curriculum: curricula of controlled difficulty for RL post-training of RAG answer generators.

Importing the package is cheap: it never imports torch, transformers or vllm.
"""

from __future__ import annotations

from .errors import DataError, SkipReport, WrongDatasetError
from .loaders import load_examples, sniff_dataset
from .records import Document, Example

__version__ = "0.1.0"

__all__ = [
    "DataError",
    "Document",
    "Example",
    "SkipReport",
    "WrongDatasetError",
    "__version__",
    "load_examples",
    "sniff_dataset",
]
