"""The dense kind's text encoder: a sentence-transformers model with the e5 conventions Search-R1 and FlashRAG use by
default (``query: `` / ``passage: `` prefixes, mean pooling, normalised vectors), each setting explicit, recorded in
the index's manifest and applied the same way when the index is built and when it is queried.

A model that cannot be loaded is one error line saying what to do: a path that looks local (``/x``, ``./x``, ``../x``,
``~/x``, ``a/b/c``) and is not there is "no such folder" (never a Hub download hint); a folder with a broken JSON file
names the file; a Hub name with no copy on this machine, offline, says how to download it.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from typing import Any

from ._onnx import ExportFileError, OnnxEncoder, wanted
from .errors import RetrieverError, UsageError

log = logging.getLogger(__name__)


class EncoderError(RetrieverError):
    """A dense encoder that cannot be loaded or used as asked."""


class ExportError(EncoderError):
    """The index's own ONNX export of its encoder cannot be loaded (damaged: the index is rebuilt, not the encoder
    folder looked for)."""


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


#: What a Hugging Face Hub model id looks like: ``name`` or ``owner/name`` (letters, digits, ``-``, ``_``, ``.``).
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?")
#: Devices an encoder may run on: torch's device types, with an optional index (``cuda:1``).
DEVICE = re.compile(r"(cpu|cuda|mps|xpu|npu|hpu|xla|meta|mtia|privateuseone)(:\d+)?")


def looks_local(name: str) -> bool:
    """Whether ``name`` is a path rather than a Hub model id: absolute, ``./`` ``../`` ``~``, a Windows drive, or
    more than one ``/`` (a Hub id has at most one).

    >>> [looks_local(x) for x in ("intfloat/e5-base-v2", "bert-base-uncased", "./e5", "../models/e5", "/m/e5",
    ...                           "~/e5", "models/e5/v2", "..")]
    [False, False, True, True, True, True, True, True]
    """
    name = str(name)
    return (os.path.isabs(name) or name.startswith(("./", "../", "~", ".\\", "..\\")) or name in (".", "..")
            or re.match(r"[A-Za-z]:[\\/]", name) is not None or not _HUB_ID.fullmatch(name))


def check_device(device: str | None, flag: str = "--device") -> None:
    """Refuse a device torch does not know (``bogus``), in one line, before any model loads."""
    if device is not None and not DEVICE.fullmatch(str(device).strip()):
        raise UsageError(f"{flag} {device!r}: not a device", hint="give cpu, cuda, cuda:N or mps")


def check_device_here(device: str, flag: str = "--device") -> None:
    """Refuse, in one line, a device this process's torch cannot use (``cuda`` on a CPU-only build or a machine
    without a GPU, ``cuda:N`` past its last GPU, ``mps`` off a Mac) before the model loads: torch would fail with a
    traceback at the first batch. Checked where the model loads (a Ray replica checks its own node)."""
    kind, _, index = str(device).strip().partition(":")
    if kind not in ("cuda", "mps"):
        return
    import torch

    if kind == "mps":
        if not torch.backends.mps.is_available():
            raise UsageError(f"{flag} {device}: torch sees no Apple GPU (mps) on this machine",
                             hint="give --device cpu (or cuda where there is an NVIDIA GPU)")
        return
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        why = ("this torch is a CPU-only build" if torch.version.cuda is None else "torch sees no CUDA GPU on this "
               "machine")
        raise UsageError(f"{flag} {device}: {why} (torch {torch.__version__})",
                         hint="give --device cpu, or run where there is a GPU with a CUDA build of torch")
    if index and int(index) >= count:
        raise UsageError(f"{flag} {device}: this machine has {count} CUDA GPU(s), cuda:0 to cuda:{count - 1}",
                         hint=f"give --device cuda:0 .. cuda:{count - 1}")


def check_source(name: str, flag: str = "--encoder") -> None:
    """Refuse, in one line naming ``flag``, an encoder that cannot be a model before anything loads it: a path
    that looks local and is not there ("no such folder"), a file where a folder is needed, a folder holding neither
    ``modules.json`` (sentence-transformers) nor ``config.json`` (transformers), or a folder whose JSON files do not
    parse (the file named). A Hub id is left to the loader."""
    path = os.path.expanduser(str(name))
    if not os.path.exists(path):
        if looks_local(str(name)):
            raise EncoderError(f"{flag} {name}: no such folder",
                               hint="give the folder of a sentence-transformers model (or a Hub name such as "
                                    "intfloat/e5-base-v2)")
        return
    if not os.path.isdir(path):
        raise EncoderError(f"{flag} {name}: a file, not a model folder",
                           hint="give the folder of a sentence-transformers model")
    if not any(os.path.isfile(os.path.join(path, f)) for f in ("modules.json", "config.json")):
        raise EncoderError(f"{flag} {name}: not a sentence-transformers or transformers model folder (no "
                           "modules.json, no config.json)", hint="give the folder of a sentence-transformers model")
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if root == path else []  # modules: one level
        for f in sorted(files):
            if not f.endswith(".json"):
                continue
            p = os.path.join(root, f)
            try:
                with open(p, encoding="utf-8") as fh:
                    json.load(fh)
            except (ValueError, UnicodeDecodeError) as e:
                raise EncoderError(f"{flag} {name}: {os.path.relpath(p, path)} is not valid JSON "
                                   f"({str(e).splitlines()[0][:120]})",
                                   hint="the model folder is damaged: copy or download it again") from None
            except OSError as e:
                raise EncoderError(f"{flag} {name}: cannot read {os.path.relpath(p, path)} ({e.strerror or e})",
                                   hint="check the folder's permissions") from None


class Encoder:
    """A loaded encoder applying :class:`EncoderSettings`: ``encode(texts, kind)`` gives float32 vectors (``kind``
    ``"query"`` or ``"passage"`` picks the prefix).

    ``exported``: the encoder exported to ONNX at index time (``(folder, record)``: the index's ``dense/encoder``
    folder and the manifest's ``dense.onnx``, see :mod:`._onnx`): it runs on onnxruntime and tokenizers, without
    importing torch or sentence-transformers (a server is healthy seconds sooner), on the CPU (``device`` None or
    ``cpu``). Anything else (no export, another device, ``RAG_CURRICULUM_ENCODER_RUNTIME=sentence-transformers``)
    loads the model with sentence-transformers. ``runtime`` says which."""

    def __init__(self, settings: EncoderSettings, *, device: str | None = None,
                 exported: tuple[Any, dict[str, Any]] | None = None) -> None:
        self.settings = settings
        if exported is not None and wanted() and (device or "cpu") == "cpu":
            folder, record = exported
            self.device = "cpu"
            try:
                self.model = OnnxEncoder(folder, record)
            except ExportFileError as e:  # a damaged file (onnxruntime's InvalidProtobuf, tokenizers' errors), named
                raise ExportError(f"{os.path.join(folder, e.name)}: the index's exported encoder cannot be loaded ({e})",
                                  hint="curriculum validate names a changed file; build the index again with "
                                       "curriculum index ... --overwrite") from None
            except Exception as e:  # onnxruntime's own errors (a damaged file: InvalidProtobuf, Fail), a bad record
                raise ExportError(f"{folder}: the index's exported encoder cannot be loaded ({type(e).__name__}: "
                                   f"{str(e).splitlines()[0][:160] if str(e) else ''})",
                                   hint="curriculum validate names a changed file; build the index again with "
                                        "curriculum index ... --overwrite") from None
            self.dim, self.runtime = self.model.dim, self.model.runtime
            self.pooling = {"lasttoken": "last"}.get(self.model.pooling, self.model.pooling)
            return
        self.device = device or default_device()
        check_source(settings.name)
        check_device_here(self.device)
        self.model = _load(settings, self.device)
        self.dim = int(_dimension(self.model))
        self.pooling = _pooling_of(self.model) or settings.pooling
        self.runtime = "sentence-transformers"

    def encode(self, texts: list[str], kind: str, *, batch_size: int = 64) -> Any:
        import numpy as np

        s = self.settings
        prefix = s.query_prefix if kind == "query" else s.passage_prefix
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if isinstance(self.model, OnnxEncoder):
            vecs = self.model.encode([prefix + t for t in texts], batch_size=batch_size)
        else:
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
    check_source(name)
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


__all__ = ["DEVICE", "Encoder", "EncoderError", "EncoderSettings", "check_device", "check_device_here", "check_source",
           "default_device", "looks_local"]
