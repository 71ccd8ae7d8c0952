"""Prompt lengths in tokens, counted as the trainers count them: the ``prompt`` messages with the tokenizer's chat
template applied (``add_generation_prompt=True``) and tokenized without adding special tokens, which is what
``tokenizer.apply_chat_template(prompts, add_generation_prompt=True, tokenize=True)`` does and what TRL's
``GRPOTrainer`` and verl's ``RLHFDataset`` feed the model.

``curriculum build --tokenizer NAME_OR_PATH`` writes these counts as the ``prompt_tokens`` column and the longest
prompt into the manifest, so that a trainer can refuse, before loading any model, a curriculum whose prompts do
not fit its limits (``rag_curriculum.train._lengths``): an engine that truncates a prompt cuts the system prompt
and the first passages, and the hardest levels, with the most passages, are hit first.

transformers is imported only when a tokenizer is loaded.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import TokenizerError  # noqa: F401  (re-exported)

TRAIN_EXTRA = "pip install 'rag-curriculum[train]'"
#: Prompts per ``apply_chat_template`` call: large enough for the fast tokenizer's batch encoder to pay off.
BATCH = 256
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")


def load_tokenizer(name_or_path: str, *, revision: str | None = None, trust_remote_code: bool = False,
                   option: str = "--tokenizer") -> Any:
    """``AutoTokenizer.from_pretrained(name_or_path)``, with one-line errors: transformers missing, a path that is
    not a tokenizer, a Hub id that cannot be reached, a tokenizer without a chat template."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise TokenizerError(f"{option} needs transformers, which is not installed: {TRAIN_EXTRA}") from None
    path = Path(str(name_or_path)).expanduser()
    if path.is_file():
        raise TokenizerError(f"{option} {name_or_path}: a file, not a tokenizer; give a tokenizer (or model) "
                             "directory, or a Hugging Face Hub model id")
    if path.is_dir() and not any((path / f).is_file() for f in _TOKENIZER_FILES):
        raise TokenizerError(f"{option} {name_or_path}: not a tokenizer directory (none of "
                             f"{', '.join(_TOKENIZER_FILES)} in it)")
    looks_like_path = str(name_or_path).startswith(("/", "./", "../", "~")) or str(name_or_path).count("/") > 1
    if looks_like_path and not path.exists():
        raise TokenizerError(f"{option} {name_or_path}: no such directory")
    kwargs: dict[str, Any] = {}
    if revision:
        kwargs["revision"] = revision
    if trust_remote_code:
        kwargs["trust_remote_code"] = True
    try:
        tok = AutoTokenizer.from_pretrained(str(name_or_path), **kwargs)
    except Exception as e:  # OSError (not found, offline), ValueError (no backend), ...
        raise TokenizerError(f"{option} {name_or_path}: could not load a tokenizer ({_first_line(e)})") from None
    if not getattr(tok, "chat_template", None):
        raise TokenizerError(f"{option} {name_or_path}: the tokenizer has no chat template, and the trainers apply "
                             "one to every prompt; use the tokenizer of the (instruct) model you will train")
    return tok


def template_fingerprint(tok: Any) -> str:
    """SHA-256 of the tokenizer's chat template (a change of template changes every prompt's length)."""
    template = getattr(tok, "chat_template", None)
    if not isinstance(template, str):
        template = json.dumps(template, sort_keys=True)
    return hashlib.sha256(template.encode("utf-8")).hexdigest()


def tokenizer_info(name: str, tok: Any) -> dict[str, Any]:
    """What the manifest records about the tokenizer that counted the prompts."""
    return {"tokenizer": str(name), "tokenizer_class": type(tok).__name__, "vocab_size": len(tok),
            "chat_template_sha256": template_fingerprint(tok), "add_generation_prompt": True}


def count_prompt_tokens(tok: Any, prompts: Iterable[Sequence[Mapping[str, str]]], *, batch_size: int = BATCH,
                        chat_template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """The length in tokens of each prompt (a list of chat messages), as
    ``len(tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True))``, in batches."""
    kw = dict(chat_template_kwargs or {})
    out: list[int] = []
    batch: list[list[dict[str, str]]] = []

    def flush() -> None:
        if batch:
            enc = tok.apply_chat_template(batch, add_generation_prompt=True, tokenize=True, return_dict=True, **kw)
            out.extend(len(ids) for ids in enc["input_ids"])
            batch.clear()

    for p in prompts:
        batch.append([{"role": m["role"], "content": m["content"]} for m in p])
        if len(batch) >= batch_size:
            flush()
    flush()
    return out


@dataclass
class LengthStats:
    """Prompt lengths of a run of rows: the longest (first in curriculum order on ties), the longest per level,
    and the total (for the mean). Stats of consecutive runs combine with :meth:`merge`."""

    rows: int = 0
    total: int = 0
    longest: int = -1
    longest_index: int | None = None
    longest_id: str | None = None
    longest_level: int | None = None
    max_by_level: dict[int, int] | None = None

    @classmethod
    def of(cls, tokens: Sequence[int], ids: Sequence[str], levels: Sequence[int], indices: Sequence[int]
           ) -> LengthStats:
        s = cls(max_by_level={})
        for t, i, lv, ix in zip(tokens, ids, levels, indices, strict=True):
            s.rows += 1
            s.total += t
            if t > s.longest:
                s.longest, s.longest_index, s.longest_id, s.longest_level = t, ix, i, lv
            if t > s.max_by_level.get(lv, -1):
                s.max_by_level[lv] = t
        return s

    def merge(self, other: LengthStats) -> LengthStats:
        """Combine with the stats of rows that come after these in the curriculum."""
        out = LengthStats(rows=self.rows + other.rows, total=self.total + other.total,
                          max_by_level=dict(self.max_by_level or {}))
        best = self if self.longest >= other.longest else other  # ties: the earlier row
        out.longest, out.longest_index, out.longest_id, out.longest_level = (
            best.longest, best.longest_index, best.longest_id, best.longest_level)
        for lv, t in (other.max_by_level or {}).items():
            out.max_by_level[lv] = max(out.max_by_level.get(lv, -1), t)  # type: ignore[index]
        return out

    def to_manifest(self, info: Mapping[str, Any]) -> dict[str, Any]:
        """The manifest's ``prompt_tokens`` record: the tokenizer, the longest prompt, the longest per level."""
        return {
            **info,
            "longest": {"tokens": self.longest, "id": self.longest_id, "curriculum_index": self.longest_index,
                        "level": self.longest_level},
            "mean": round(self.total / self.rows, 1) if self.rows else 0,
            "max_by_level": {str(lv): t for lv, t in sorted((self.max_by_level or {}).items())},
        }


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0].strip() if text else type(e).__name__
