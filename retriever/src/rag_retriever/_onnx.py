"""The dense encoder exported to ONNX and run with onnxruntime: a dense server healthy in seconds.

Importing sentence-transformers (and with it transformers' model-loading machinery, scikit-learn and scipy) and torch
takes seconds, most of a dense server's start-up. So ``curriculum index --kind dense`` exports
the encoder's transformer once, with ``torch.onnx.export`` of the real ``transformers`` model (:func:`export`: at
index time, where torch is loaded anyway), into the index's ``dense/encoder/`` folder beside a copy of the model's
``tokenizer.json``; the manifest's ``dense.onnx`` records both files' SHA-256 (so the index's fingerprint covers
them), the pooling and the normalisation read from the model's sentence-transformers config (``modules.json``, the
Pooling module's ``config.json``, a Normalize module) and the truncation length. :class:`OnnxEncoder` serves it with
``onnxruntime`` and ``tokenizers`` alone (no torch): texts tokenized with the model's own tokenizer (special tokens,
truncation), batched as sentence-transformers batches them (sorted by length, each batch padded to its longest
text), the last hidden states pooled (mean over the attention mask, ``[CLS]``, max, last token) and normalised as
sentence-transformers does. The tests compare its vectors with ``SentenceTransformer.encode``'s.

:func:`plan` returns None for a folder this path does not cover exactly (a Dense or any other module, prompts,
lower-casing, a decoder, half-precision weights, no ``tokenizer.json``), and :func:`export` returns None when the export
fails or the exported graph does not give the transformer's own hidden states (checked on probe texts): that model is
then served by sentence-transformers, as is every index built before (no ``dense.onnx``) and every model when
``RAG_CURRICULUM_ENCODER_RUNTIME=sentence-transformers``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from rag_plumbing import file_sha256

log = logging.getLogger(__name__)

#: The runtime a manifest records for vectors made by :class:`OnnxEncoder`.
RUNTIME = "onnxruntime"
#: The folder inside the index's ``dense/`` folder, and its files.
FOLDER, MODEL, TOKENIZER = "encoder", "encoder.onnx", "tokenizer.json"
#: sentence-transformers' pooling modes this path applies.
POOLINGS = ("mean", "cls", "max", "lasttoken")
#: The ONNX opset of the export.
OPSET = 17
#: The largest difference allowed between the exported graph's hidden states and the transformer's on the probes.
TOLERANCE = 1e-4
#: The environment variable that sends every model through sentence-transformers.
ENV = "RAG_CURRICULUM_ENCODER_RUNTIME"


def wanted() -> bool:
    """Whether the ONNX path may be used (``RAG_CURRICULUM_ENCODER_RUNTIME=sentence-transformers`` says no)."""
    return os.environ.get(ENV, "") != "sentence-transformers"


def _json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _pooling(cfg: dict[str, Any]) -> str | None:
    """The single pooling mode of a Pooling module's config (sentence-transformers 6's ``pooling_mode``, or the
    older ``pooling_mode_*_tokens`` flags), None when it is anything else."""
    if cfg.get("include_prompt", True) is not True:
        return None
    mode = cfg.get("pooling_mode")
    if isinstance(mode, str):
        mode = mode.replace("_tokens", "").replace("_token", "")
        return mode if mode in POOLINGS else None
    flags = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens", "max": "pooling_mode_max_tokens",
             "lasttoken": "pooling_mode_lasttoken"}
    on = [m for m, key in flags.items() if cfg.get(key)]
    others = [k for k, v in cfg.items() if k.startswith("pooling_mode_") and v and k not in flags.values()]
    return on[0] if len(on) == 1 and not others else None


def plan(folder: str, pooling: str, normalize: bool) -> dict[str, Any] | None:
    """What the export would run for ``folder``: the transformer's subfolder, its config, the pooling and the
    normalisation; None when this path does not cover the folder exactly. A sentence-transformers folder's own
    modules decide the pooling and the normalisation (``modules.json``, the Pooling module's ``config.json``, a
    Normalize module); ``pooling`` / ``normalize`` (the settings) apply to a plain transformers folder, as the
    sentence-transformers path wraps one."""
    if not os.path.isdir(folder):
        return None
    modules = _json(os.path.join(folder, "modules.json"))
    if modules is None:
        sub, mode, norm = "", pooling, normalize
    else:
        if not isinstance(modules, list) or not modules or not all(isinstance(m, dict) for m in modules):
            return None
        kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
        if kinds[0] != "Transformer" or any(k not in ("Pooling", "Normalize") for k in kinds[1:]) or \
                kinds.count("Pooling") != 1 or kinds.count("Normalize") > 1:
            return None
        sub = str(modules[0].get("path") or "")
        pool = _json(os.path.join(folder, str(modules[kinds.index("Pooling")].get("path") or ""), "config.json"))
        mode = _pooling(pool) if isinstance(pool, dict) else None
        norm = "Normalize" in kinds or normalize
        st = _json(os.path.join(folder, "config_sentence_transformers.json")) or {}
        if st.get("prompts") and any(st["prompts"].values()) or st.get("default_prompt_name"):
            return None  # prompts added by sentence-transformers: left to it
        sb = _json(os.path.join(folder, sub, "sentence_bert_config.json")) or {}
        if sb.get("do_lower_case") or sb.get("transformer_task", "feature-extraction") != "feature-extraction":
            return None
    if mode not in POOLINGS:
        return None
    root = os.path.join(folder, sub)
    config = _json(os.path.join(root, "config.json"))
    if not isinstance(config, dict) or config.get("is_decoder") or config.get("is_encoder_decoder") or \
            any(str(a).endswith("ForCausalLM") for a in config.get("architectures") or []):
        return None  # decoders pad and pool differently (left padding, last token): left to sentence-transformers
    tok_cfg = _json(os.path.join(root, "tokenizer_config.json")) or {}
    if not os.path.isfile(os.path.join(root, TOKENIZER)) or tok_cfg.get("padding_side", "right") != "right" or \
            tok_cfg.get("do_lower_case") and not _lowercases(os.path.join(root, TOKENIZER)):
        return None
    weights = os.path.join(root, "model.safetensors")
    if not os.path.isfile(weights) or {d for d in _dtypes(weights) if d.startswith(("F", "BF"))} != {"F32"}:
        return None  # half-precision (or sharded, or .bin) weights: sentence-transformers decides how they run
    return {"root": root, "config": config, "pooling": mode, "normalize": bool(norm)}


def _lowercases(path: str) -> bool:
    return '"lowercase":true' in Path(path).read_text(encoding="utf-8").replace(" ", "")


def _dtypes(path: str) -> set[str]:
    """The tensor dtypes a safetensors file holds, from its header (nothing else is read)."""
    try:
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            if not 0 < size < 1 << 26:
                return set()
            header = json.loads(f.read(size))
    except (OSError, ValueError):
        return set()
    return {str(v.get("dtype")) for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)}


def max_length_of(config: dict[str, Any], max_length: int) -> int:
    """``max_length`` capped at the positions the model has (RoBERTa and XLM-R count positions from
    ``pad_token_id + 1``), as sentence-transformers' truncation would need."""
    positions = int(config.get("max_position_embeddings") or max_length)
    if config.get("model_type") in ("roberta", "xlm-roberta", "camembert"):
        positions -= int(config.get("pad_token_id") or 0) + 1
    return max(1, min(int(max_length), positions))


#: Texts the exported graph is checked on (several lengths in one padded batch, non-ASCII text).
PROBES = ["query: who wrote Hamlet?", "passage: The Eiffel Tower is a wrought-iron lattice tower in Paris, France.",
          "x", "Zürich café naïve 東京 " * 12]


def export(folder: str, out: Path, *, pooling: str, normalize: bool, max_length: int) -> dict[str, Any] | None:
    """Export ``folder``'s transformer to ``out/encoder.onnx`` (and copy its ``tokenizer.json`` there); return what
    the manifest's ``dense.onnx`` records, or None (nothing left in ``out``) when this path does not cover the
    folder, the export fails, or the graph's hidden states differ from the transformer's on :data:`PROBES`."""
    if not wanted():
        return None
    p = plan(folder, pooling, normalize)
    if p is None:
        log.info("%s: not exported to ONNX (a model sentence-transformers serves)", folder)
        return None
    try:
        record = _export(p, Path(out), max_length)
    except Exception as e:  # noqa: BLE001 - any exporter failure: the sentence-transformers path serves the model
        log.info("%s: the ONNX export failed (%s: %s); the model is served by sentence-transformers", folder,
                 type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")
        record = None
    if record is None:
        shutil.rmtree(out, ignore_errors=True)
    return record


def _export(p: dict[str, Any], out: Path, max_length: int) -> dict[str, Any] | None:
    import inspect
    import warnings

    import numpy as np
    import torch
    import transformers
    from transformers import AutoModel

    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(os.path.join(p["root"], TOKENIZER), out / TOKENIZER)
    length = max_length_of(p["config"], max_length)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        except ImportError:  # pragma: no cover
            pass
        model = AutoModel.from_pretrained(p["root"], dtype=torch.float32, attn_implementation="eager")
    names = ["input_ids", "attention_mask"]
    if "token_type_ids" in inspect.signature(model.forward).parameters:
        names.append("token_type_ids")

    class Hidden(torch.nn.Module):  # the transformer's last hidden states, from named tensors
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, *args: Any) -> Any:
            return self.m(**dict(zip(names, args, strict=True))).last_hidden_state

    wrapped = Hidden(model).eval()  # (the exporter restores the wrapper's mode, and so the model's, afterwards)
    enc = OnnxEncoder.tokenize(_tokenizer(out / TOKENIZER, length), PROBES)
    feeds = OnnxEncoder.batch(enc, int(p["config"].get("pad_token_id") or 0), names)
    args = tuple(torch.from_numpy(feeds[n]) for n in names)
    axes = {n: {0: "batch", 1: "tokens"} for n in [*names, "last_hidden_state"]}
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")
        torch.onnx.export(wrapped, args, str(out / MODEL), input_names=names, output_names=["last_hidden_state"],
                          dynamic_axes=axes, opset_version=OPSET, do_constant_folding=True, dynamo=False)
        want = wrapped(*args).numpy()
    got = _session(out / MODEL).run(None, feeds)[0]
    mask = feeds["attention_mask"].astype(bool)
    diff = float(np.abs(got[mask] - want[mask]).max())
    if not diff <= TOLERANCE:
        log.info("%s: the exported graph's hidden states differ from the transformer's by %.2g; the model is "
                 "served by sentence-transformers", p["root"], diff)
        return None
    return {"folder": FOLDER, "model": MODEL, "sha256": file_sha256(out / MODEL), "tokenizer": TOKENIZER,
            "tokenizer_sha256": file_sha256(out / TOKENIZER), "inputs": names, "pooling": p["pooling"],
            "normalize": p["normalize"], "max_length": length, "pad_id": int(p["config"].get("pad_token_id") or 0),
            "dim": int(want.shape[-1]), "opset": OPSET, "torch_version": torch.__version__,
            "transformers_version": transformers.__version__}


def _tokenizer(path: Path, max_length: int) -> Any:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    tok.no_padding()
    tok.enable_truncation(max_length)
    return tok


def _session(path: Path) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # warnings about unused initializers: not for a server's log
    # threads: as torch takes them (OMP_NUM_THREADS, which Ray sets to a worker's CPUs), else onnxruntime's own
    threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0) if os.environ.get("OMP_NUM_THREADS", "").isdigit() else 0
    if threads > 0:
        opts.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


class ExportFileError(Exception):
    """A file of the exported encoder (``name``, inside its folder) that its library cannot load (``error``)."""

    def __init__(self, name: str, error: BaseException) -> None:
        text = str(error).splitlines()[0][:160] if str(error) else ""
        super().__init__(f"{name}: {type(error).__name__}: {text}")
        self.name = name


class OnnxEncoder:
    """An exported encoder (``directory`` holds ``encoder.onnx`` and ``tokenizer.json``; ``record`` is the
    manifest's ``dense.onnx``) served with onnxruntime and tokenizers: ``encode(texts, batch_size)`` gives float32
    vectors as ``SentenceTransformer.encode`` gives them."""

    runtime = RUNTIME

    def __init__(self, directory: Path, record: dict[str, Any]) -> None:
        directory = Path(directory)
        self.record = record
        self.pooling, self.normalize = str(record["pooling"]), bool(record["normalize"])
        self.max_length, self.pad_id = int(record["max_length"]), int(record["pad_id"])
        self.inputs, self.dim = list(record["inputs"]), int(record["dim"])
        for key in ("tokenizer", "model"):  # each file's own error names it
            try:
                loaded = (_tokenizer(directory / record[key], self.max_length) if key == "tokenizer" else
                          _session(directory / record[key]))
            except Exception as e:  # noqa: BLE001  (tokenizers' and onnxruntime's own errors)
                raise ExportFileError(str(record[key]), e) from None
            if key == "tokenizer":
                self.tok = loaded
            else:
                self.session = loaded

    @staticmethod
    def tokenize(tok: Any, texts: list[str]) -> list[Any]:
        return tok.encode_batch(texts)

    @staticmethod
    def batch(enc: list[Any], pad_id: int, names: list[str]) -> dict[str, Any]:
        """The model's inputs for one batch, padded on the right to its longest text."""
        import numpy as np

        n = max(len(e.ids) for e in enc)
        ids = np.full((len(enc), n), pad_id, dtype=np.int64)
        mask = np.zeros((len(enc), n), dtype=np.int64)
        types = np.zeros((len(enc), n), dtype=np.int64)
        for r, e in enumerate(enc):
            ids[r, :len(e.ids)] = e.ids
            mask[r, :len(e.ids)] = 1
            types[r, :len(e.ids)] = e.type_ids
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        return {k: feeds[k] for k in names}

    def _pool(self, x: Any, mask: Any) -> Any:
        import numpy as np

        if self.pooling == "cls":
            return x[:, 0]
        if self.pooling == "max":
            return np.where(mask[:, :, None] > 0, x, -1e9).max(axis=1)
        if self.pooling == "lasttoken":
            return x[np.arange(len(x)), mask.sum(axis=1) - 1]
        m = mask[:, :, None].astype(x.dtype)
        return (x * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)

    def encode(self, texts: list[str], batch_size: int = 64) -> Any:
        """float32 vectors of ``texts``, in their order: batches of ``batch_size`` after sorting by length (as
        sentence-transformers batches), each padded to its longest text."""
        import numpy as np

        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for a in range(0, len(texts), max(1, batch_size)):
            take = order[a:a + max(1, batch_size)]
            feeds = self.batch(self.tokenize(self.tok, [texts[i] for i in take]), self.pad_id, self.inputs)
            hidden = self.session.run(None, feeds)[0]
            v = self._pool(hidden, feeds["attention_mask"])
            if self.normalize:
                v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
            out[take] = v
        return out


__all__ = ["ENV", "FOLDER", "RUNTIME", "OnnxEncoder", "export", "plan", "wanted"]
