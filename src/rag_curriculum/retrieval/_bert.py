"""A light runtime for the encoders dense retrieval uses: a BERT-family sentence-transformers folder (e5, MiniLM,
bge, multilingual-e5: ``bert``, ``roberta`` and ``xlm-roberta`` models with a Pooling and a Normalize module) run with
torch, ``tokenizers`` and ``safetensors`` alone.

Why: importing sentence-transformers (and with it transformers' model-loading machinery, scikit-learn and scipy)
takes 4 to 10 s on a small machine, most of a dense server's start-up; torch, a tokenizer and the weights take
about 1.5 s. The forward pass is BERT's, written out (embeddings, self-attention through torch's
``scaled_dot_product_attention``, the feed-forward blocks, each followed by its LayerNorm), the pooling and the
normalisation are sentence-transformers' (mean over the attention mask, ``[CLS]``, max, last token), and the
texts are tokenized with the folder's own ``tokenizer.json`` (padding, truncation to ``max_length``, special
tokens) and batched as sentence-transformers batches them (sorted by length). The tests compare its vectors with
``SentenceTransformer.encode``'s on the same folder.

:meth:`LightEncoder.load` returns None for a folder it does not cover exactly (another architecture, a Dense or any
other module, prompts, lower-casing, sharded, ``.bin`` or half-precision weights, a slow tokenizer without
``tokenizer.json``):
the caller then loads it with sentence-transformers, as before.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

log = logging.getLogger(__name__)

#: The transformers ``model_type`` values this runtime runs (they share BERT's layers and weight names).
MODEL_TYPES = ("bert", "roberta", "xlm-roberta")
#: sentence-transformers' pooling modes this runtime applies.
POOLINGS = ("mean", "cls", "max", "lasttoken")
#: ``hidden_act`` values and their functions (``gelu`` is the exact, erf-based GELU, BERT's).
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu")


def _json(path: str) -> dict[str, Any] | list[Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
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
    """What the runtime would run for ``folder``: the transformer's subfolder, pooling and normalisation; None when
    the folder is not one it covers exactly. ``pooling`` / ``normalize``: the settings, for a plain transformers
    folder (a sentence-transformers folder's own modules decide)."""
    modules = _json(os.path.join(folder, "modules.json"))
    if modules is None:
        sub, mode, norm = "", pooling, normalize
    else:
        if not isinstance(modules, list) or not modules:
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
    if not isinstance(config, dict) or config.get("model_type") not in MODEL_TYPES or config.get("is_decoder") or \
            config.get("position_embedding_type", "absolute") != "absolute" or \
            config.get("hidden_act", "gelu") not in ACTIVATIONS:
        return None
    if not all(os.path.isfile(os.path.join(root, f)) for f in ("tokenizer.json", "model.safetensors")):
        return None
    if {d for d in _dtypes(os.path.join(root, "model.safetensors")) if d.startswith(("F", "BF"))} != {"F32"}:
        return None  # half-precision weights: sentence-transformers decides how they run
    return {"root": root, "config": config, "pooling": mode, "normalize": bool(norm)}


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


class LightEncoder:
    """A planned folder (:func:`plan`) loaded: ``encode(texts, batch_size)`` gives float32 vectors as
    ``SentenceTransformer.encode`` would (pooled, normalised when the folder or the settings say so)."""

    runtime = "rag-curriculum (torch, tokenizers, safetensors)"

    def __init__(self, p: dict[str, Any], max_length: int, device: str) -> None:
        import torch
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        cfg = p["config"]
        self.cfg, self.pooling, self.normalize, self.device = cfg, p["pooling"], p["normalize"], device
        self.roberta = cfg["model_type"] != "bert"
        self.pad_id = int(cfg.get("pad_token_id") or 0)
        positions = int(cfg.get("max_position_embeddings", 512)) - (self.pad_id + 1 if self.roberta else 0)
        self.max_length = min(int(max_length), positions)
        tok = Tokenizer.from_file(os.path.join(p["root"], "tokenizer.json"))
        tok.no_padding()
        tok.enable_truncation(self.max_length)
        self.tok = tok
        raw = load_file(os.path.join(p["root"], "model.safetensors"), device="cpu")
        self.w = {self._name(k): v.to(device=device, dtype=torch.float32) for k, v in raw.items()
                  if v.is_floating_point()}  # (an old checkpoint's int64 position_ids buffer is not a weight)
        self.layers = int(cfg["num_hidden_layers"])
        self.heads = int(cfg["num_attention_heads"])
        self.dim = int(cfg["hidden_size"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        missing = [k for k in self._needed() if k not in self.w]
        if missing:
            raise KeyError(missing[0])

    @staticmethod
    def _name(key: str) -> str:
        for prefix in ("bert.", "roberta.", "model."):
            if key.startswith(prefix):
                return key[len(prefix):]
        return key

    def _needed(self) -> list[str]:
        names = [f"embeddings.{n}.weight" for n in ("word_embeddings", "position_embeddings",
                                                    "token_type_embeddings")]
        names += ["embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias"]
        for i in range(self.layers):
            at = f"encoder.layer.{i}."
            for n in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
                      "attention.output.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm"):
                names += [at + n + ".weight", at + n + ".bias"]
        return names

    def _act(self, x: Any) -> Any:
        import torch.nn.functional as F

        act = self.cfg.get("hidden_act", "gelu")
        if act == "gelu":
            return F.gelu(x)
        if act in ("gelu_new", "gelu_pytorch_tanh"):
            return F.gelu(x, approximate="tanh")
        return F.relu(x) if act == "relu" else F.silu(x)

    def forward(self, ids: Any, mask: Any, types: Any) -> Any:
        """The last hidden states of BERT (or RoBERTa: positions counted from ``pad_token_id + 1``)."""
        import torch
        import torch.nn.functional as F

        w, eps, h = self.w, self.eps, self.heads
        if self.roberta:
            pos = torch.cumsum(mask, dim=1) * mask + self.pad_id
        else:
            pos = torch.arange(ids.shape[1], device=ids.device)[None, :].expand_as(ids)
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][pos] + \
            w["embeddings.token_type_embeddings.weight"][types]
        x = F.layer_norm(x, (self.dim,), w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
        b, n, d = x.shape
        keep = mask[:, None, None, :].bool()

        def lin(t: Any, name: str) -> Any:
            return F.linear(t, w[name + ".weight"], w[name + ".bias"])

        for i in range(self.layers):
            at = f"encoder.layer.{i}."
            q, k, v = (lin(x, at + "attention.self." + part).view(b, n, h, d // h).transpose(1, 2)
                       for part in ("query", "key", "value"))
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=keep).transpose(1, 2).reshape(b, n, d)
            x = F.layer_norm(lin(ctx, at + "attention.output.dense") + x, (d,),
                             w[at + "attention.output.LayerNorm.weight"], w[at + "attention.output.LayerNorm.bias"], eps)
            y = lin(self._act(lin(x, at + "intermediate.dense")), at + "output.dense")
            x = F.layer_norm(y + x, (d,), w[at + "output.LayerNorm.weight"], w[at + "output.LayerNorm.bias"], eps)
        return x

    def _pool(self, x: Any, mask: Any) -> Any:
        import torch

        m = mask.unsqueeze(-1).to(x.dtype)
        if self.pooling == "cls":
            return x[:, 0]
        if self.pooling == "max":
            return x.masked_fill(m == 0, -1e9).max(dim=1).values
        if self.pooling == "lasttoken":
            return x[torch.arange(len(x), device=x.device), mask.sum(dim=1) - 1]
        return (x * m).sum(dim=1) / torch.clamp(m.sum(dim=1), min=1e-9)

    def encode(self, texts: list[str], batch_size: int = 64) -> Any:
        """float32 vectors of ``texts``, in their order: batches of ``batch_size`` after sorting by length (as
        sentence-transformers batches), each padded to its longest text."""
        import numpy as np
        import torch
        import torch.nn.functional as F

        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with torch.inference_mode():
            for a in range(0, len(texts), batch_size):
                take = order[a:a + batch_size]
                enc = self.tok.encode_batch([texts[i] for i in take])
                n = max(len(e.ids) for e in enc)
                ids = torch.full((len(enc), n), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(enc), n), dtype=torch.long)
                types = torch.zeros((len(enc), n), dtype=torch.long)
                for r, e in enumerate(enc):
                    ids[r, :len(e.ids)] = torch.tensor(e.ids)
                    mask[r, :len(e.ids)] = 1
                    types[r, :len(e.ids)] = torch.tensor(e.type_ids)
                ids, mask, types = ids.to(self.device), mask.to(self.device), types.to(self.device)
                v = self._pool(self.forward(ids, mask, types), mask)
                if self.normalize:
                    v = F.normalize(v, p=2, dim=1)
                out[take] = v.float().cpu().numpy()
        return out

    @classmethod
    def load(cls, folder: str, *, pooling: str, normalize: bool, max_length: int, device: str) -> LightEncoder | None:
        """The folder loaded by this runtime, or None when it does not cover it (see the module's docstring)."""
        if os.environ.get("RAG_CURRICULUM_ENCODER_RUNTIME", "") == "sentence-transformers" or \
                not os.path.isdir(folder):
            return None
        p = plan(folder, pooling, normalize)
        if p is None:
            return None
        try:
            return cls(p, max_length, device)
        except (KeyError, ValueError, RuntimeError, OSError) as e:  # weights or tokenizer not as planned
            log.info("%s: loading with sentence-transformers (%s: %s)", folder, type(e).__name__, e)
            return None


__all__ = ["MODEL_TYPES", "LightEncoder", "plan"]
