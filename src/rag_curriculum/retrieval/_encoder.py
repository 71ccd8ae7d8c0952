"""The dense kind's text encoder: a sentence-transformers model with the e5 conventions Search-R1 and FlashRAG use by
default (``query: `` / ``passage: `` prefixes, mean pooling, normalised vectors), each setting explicit, recorded in
the index's manifest and applied the same way when the index is built and when it is queried.

A model that cannot be loaded offline (a Hub name with no copy on this machine) is one error line saying what to do.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from ..errors import CurriculumError

log = logging.getLogger(__name__)


class EncoderError(CurriculumError):
    """A dense encoder that cannot be loaded or used as asked."""


@dataclass(frozen=True)
class EncoderSettings:
    """What turns a text into a vector (the manifest's ``dense`` section records every field)."""

    name: str
    query_prefix: str = "query: "
    passage_prefix: str = "passage: "
    pooling: str = "mean"
    normalize: bool = True
    max_length: int = 256


def default_device() -> str:
    """``cuda`` when torch sees a GPU, else ``cpu``."""
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:  # pragma: no cover - the dense extra installs torch through sentence-transformers
        return "cpu"


def _is_sentence_transformers_dir(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "modules.json"))


class Encoder:
    """A loaded sentence-transformers model applying :class:`EncoderSettings`: ``encode(texts, kind)`` gives
    float32 vectors (``kind`` ``"query"`` or ``"passage"`` picks the prefix)."""

    def __init__(self, settings: EncoderSettings, *, device: str | None = None) -> None:
        self.settings = settings
        self.device = device or default_device()
        self.model = _load(settings, self.device)
        self.dim = int(_dimension(self.model))
        self.pooling = _pooling_of(self.model) or settings.pooling

    def encode(self, texts: list[str], kind: str, *, batch_size: int = 64) -> Any:
        import numpy as np

        s = self.settings
        prefix = s.query_prefix if kind == "query" else s.passage_prefix
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self.model.encode([prefix + t for t in texts], batch_size=batch_size, convert_to_numpy=True,
                                 normalize_embeddings=s.normalize, show_progress_bar=False)
        return np.ascontiguousarray(vecs, dtype=np.float32)


def _dimension(model: Any) -> int:
    for name in ("get_embedding_dimension", "get_sentence_embedding_dimension"):
        fn = getattr(model, name, None)
        if fn is not None:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                dim = fn()
            if dim:
                return int(dim)
    raise EncoderError("the encoder does not say its embedding dimension",
                       hint="pass a sentence-transformers model (with a Pooling module)")


def _pooling_of(model: Any) -> str | None:
    """The pooling of the model's Pooling module (mean / cls / max / ...), None when it has none."""
    for module in getattr(model, "_modules", {}).values():
        mode = getattr(module, "pooling_mode", None)
        if isinstance(mode, str):
            return mode.replace("_tokens", "").replace("lasttoken", "last")
        get = getattr(module, "get_pooling_mode_str", None)
        if callable(get):
            return str(get()).replace("_tokens", "")
    return None


def _load(settings: EncoderSettings, device: str) -> Any:
    """The model: a sentence-transformers folder or Hub name as it is (its own pooling); a plain transformers
    folder wrapped with ``settings.pooling`` and, when ``normalize``, a Normalize module."""
    try:
        import warnings

        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        raise EncoderError(f"dense retrieval needs sentence-transformers ({e})",
                           hint="pip install 'rag-curriculum[dense]'") from None
    name = settings.name
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # "Loading weights" bars on every load: not for a server's log
    except ImportError:  # pragma: no cover
        pass
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            if os.path.isdir(name) and not _is_sentence_transformers_dir(name):
                from sentence_transformers import models

                word = models.Transformer(name, max_seq_length=settings.max_length)
                dim = _word_dimension(word)
                pool = models.Pooling(dim, pooling_mode=settings.pooling)
                mods = [word, pool] + ([models.Normalize()] if settings.normalize else [])
                model = SentenceTransformer(modules=mods, device=device)
            else:
                model = SentenceTransformer(name, device=device)
    except OSError as e:
        offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0") or "couldn't connect" in str(e)
        raise EncoderError(
            f"--encoder {name}: cannot load it" + (" offline (no copy on this machine)" if offline else
                                                   f" ({str(e).splitlines()[0][:160]})"),
            hint=f"download it where there is a network (huggingface-cli download {name} --local-dir DIR) and "
                 "pass --encoder DIR, or give the folder of a sentence-transformers model") from None
    except ValueError as e:
        raise EncoderError(f"--encoder {name}: {str(e).splitlines()[0][:200]}",
                           hint="pass a sentence-transformers model folder or Hub name") from None
    model.max_seq_length = settings.max_length
    return model


def _word_dimension(word: Any) -> int:
    for name in ("get_embedding_dimension", "get_word_embedding_dimension"):
        fn = getattr(word, name, None)
        if fn is not None:
            return int(fn())
    raise EncoderError("cannot tell the encoder's hidden size")  # pragma: no cover


__all__ = ["Encoder", "EncoderError", "EncoderSettings", "default_device"]
