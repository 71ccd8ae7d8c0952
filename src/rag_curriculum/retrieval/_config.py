"""The index configuration: what ``curriculum index`` reads, how it tokenizes and scores, and where it writes."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .._settings import check_settings, rule
from ..config import bind
from ..errors import ConfigError

#: bm25s's scoring variants the index accepts (``BM25(method=...)``; the IDF uses the same variant).
METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
#: The token pattern (bm25s's default splitter): runs of two or more word characters.
SPLITTER = r"(?u)\b\w\w+\b"


@dataclass
class IndexConfig:
    """Everything that determines an index. Recorded in the index's manifest."""

    dataset: str = rule(flag="--dataset", empty=False, help="hotpotqa | musique | 2wikimultihopqa.")
    input: str = rule(flag="--input", empty=False, help=(
        "The dataset file whose paragraphs are indexed (every distinct title + text once) and whose questions "
        "get their rankings stored, read by the toolkit's loader."))
    corpus: str | None = rule(None, flag="--corpus", empty=False, help=(
        'Extra passages to index: a JSONL file of {"title", "text"} lines, or {"id", "contents"} lines with the '
        "title on the first line of contents (FlashRAG's and Search-R1's Wikipedia layout); a passage already in the "
        "dataset is indexed once."))
    out: str = rule("outputs/index", flag="--out", empty=False, help="Index directory to write.")
    k1: float = rule(1.5, ge=0, le=100, help="BM25 k1 (term-frequency saturation); bm25s's default.")
    b: float = rule(0.75, ge=0, le=1, help="BM25 b (length normalisation); bm25s's default.")
    method: str = rule("lucene", choices=METHODS, help=(
        "BM25 variant (bm25s method): lucene (default) | robertson | atire | bm25l | bm25+."))
    delta: float = rule(0.5, ge=0, le=100, help="delta of the bm25l and bm25+ variants (ignored by the others).")
    stopwords: str = rule("en", choices=("en", "none"), help=(
        "Stop words dropped by the tokenizer: en (bm25s's English list) | none."))
    depth: int = rule(100, ge=1, le=10_000, help=(
        "Passages ranked and stored per question of --input (what builds draw BM25 distractors and retrieved "
        "passages from without retrieving again)."))
    threads: int = rule(0, ge=0, le=1024, help="Retrieval threads (bm25s n_threads); 0: one per CPU.")
    backend: str = rule("auto", choices=("auto", "numpy", "numba"), help=(
        "bm25s retrieval backend: auto (numba when installed and there are 20,000 questions or more, since its "
        "compilation takes about 30 s; else numpy) | numpy | numba. The scores are the same."))
    on_error: str = rule("raise", choices=("raise", "skip"), help=(
        "raise | skip bad source records (skips are counted and reported)."))
    overwrite: bool = rule(False, help="Replace an existing index of this toolkit.")

    def __post_init__(self) -> None:
        check_settings(self)

    def validate(self) -> None:
        check_settings(self)
        if not self.input:
            raise ConfigError("no --input given", hint="pass --dataset NAME --input FILE (the dataset file to index)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> IndexConfig:
        return bind(cls, d)

    def tokenizer_info(self) -> dict[str, Any]:
        """The tokenizer, as the manifest records it (queries are tokenized the same way)."""
        return {"library": "bm25s", "class": "bm25s.tokenization.Tokenizer", "lower": True,
                "splitter": SPLITTER, "stopwords": None if self.stopwords == "none" else self.stopwords,
                "stemmer": None, "fields": "title + ' ' + text"}

    def bm25_params(self) -> dict[str, Any]:
        return {"k1": self.k1, "b": self.b, "method": self.method, "idf_method": self.method, "delta": self.delta,
                "dtype": "float32"}
