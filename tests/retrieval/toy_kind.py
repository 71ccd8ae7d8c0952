"""A retriever kind in one file: ``toy`` ranks passages by how many distinct words of the query they hold (words of
at least ``--toy-min-chars`` characters, case folded; ties by the lower passage id). Everything the toolkit needs
from a kind is declared here, once, in ``KIND``: how an index of it is built and searched, its option
(``--toy-min-chars``) and its check, what ``serve`` and a data card say of it; ``--distractors toy`` draws a
question's best-ranked passages from its ranking (``distractors=None``: the toolkit's ranked source).

Registered by an entry point, as an installed package would (``pyproject.toml``)::

    [project.entry-points."rag_curriculum.retriever_kinds"]
    toy = "toy_kind:KIND"

tests/retrieval/test_toy_kind.py makes that entry point visible to the real ``curriculum`` command and runs
``index``, ``serve`` and ``build --distractors toy`` with it. docs/extending.md shows this file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag_plumbing._settings import rule
from rag_retriever import RetrieverKind
from rag_retriever.errors import ConfigError

FILE = "toy/words.json"  # the kind's one file inside the index directory


@dataclass
class ToyOptions:
    """The kind's settings: options of ``curriculum index`` (``--toy-min-chars``), refused with another kind."""

    toy_min_chars: int = rule(3, ge=1, le=20, help="toy: the shortest word that counts.")


def words(text: str, min_chars: int) -> set[str]:
    return {w for w in re.findall(r"\w+", text.casefold()) if len(w) >= min_chars}


class ToyBuilder:
    """Takes each block of passages, then writes the kind's file and says what the manifest records of it."""

    def __init__(self, cfg: Any, tmp: Path, **kw: Any) -> None:
        self.min_chars, self.path, self.passages = cfg.toy_min_chars, tmp / FILE, []
        self.progress = None  # set by the build: called with the passages done

    def add(self, block: Any) -> None:
        for title, text in zip(block.titles, block.texts, strict=True):
            self.passages.append(sorted(words(f"{title} {text}", self.min_chars)))
        if self.progress:
            self.progress(len(block))

    def finish(self, *, bar: Any = None, task: Any = None) -> dict[str, Any]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.passages))
        return {"toy": {"min_chars": self.min_chars, "words": sum(len(p) for p in self.passages)}}


class ToySearcher:
    def __init__(self, directory: Path, manifest: dict[str, Any], **options: Any) -> None:
        self.min_chars = manifest["toy"]["min_chars"]
        self.postings: dict[str, list[int]] = {}
        for pid, ws in enumerate(json.loads((Path(directory) / FILE).read_text())):
            for w in ws:
                self.postings.setdefault(w, []).append(pid)

    def describe(self) -> dict[str, Any]:
        return {"kind": "toy", "min_chars": self.min_chars}

    def warm(self) -> None:
        """Nothing to compile or load."""

    def search(self, queries: list[str], k: int, *, threads: int | None = None):
        import numpy as np

        ids = np.full((len(queries), k), -1, dtype=np.int32)
        scores = np.zeros((len(queries), k), dtype=np.float32)
        for row, query in enumerate(queries):
            counts: dict[int, int] = {}
            for w in words(query, self.min_chars):
                for pid in self.postings.get(w, ()):
                    counts[pid] = counts.get(pid, 0) + 1
            best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
            for j, (pid, score) in enumerate(best):
                ids[row, j], scores[row, j] = pid, score
        return ids, scores


def check_config(cfg: Any) -> None:
    """The kind's own check of a configuration (its option's type and range are checked by its rule)."""
    if cfg.corpus:
        raise ConfigError("--kind toy indexes a dataset file only, not --corpus", hint="drop --corpus")


def check(manifest: dict[str, Any], directory: Path) -> None:
    """An index this environment cannot read faithfully is refused before it is loaded."""
    if "toy" not in manifest or not (Path(directory) / FILE).is_file():
        raise ConfigError(f"{directory}: not a whole toy index", hint="build it again")


KIND = RetrieverKind(
    "toy", builder=ToyBuilder, open=ToySearcher, check=check, manifest_keys=("toy",),
    description="toy: distinct query words a passage holds", options=ToyOptions, check_config=check_config,
    label="toy", negatives="toy hard negatives (passages sharing the question's words)",
    summary=lambda m: f"words of {m['toy']['min_chars']}+ characters")
