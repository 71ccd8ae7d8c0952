"""Loaders for HotpotQA, MuSiQue and 2WikiMultihopQA: every layout users have, mapped into :class:`Example`; and
FlashRAG's question files (:func:`load_flashrag`: NQ, TriviaQA, PopQA, Bamboogle and the multi-hop sets as FlashRAG
ships them), evaluation only.

>>> from rag_curriculum.loaders import DATASETS
>>> DATASETS.names()
['2wikimultihopqa', 'hotpotqa', 'musique', 'search-r1']
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from ..errors import ConfigError, DataError, SkipReport, UsageError, WrongDatasetError
from ..records import Example
from ..registry import Registry
from ._base import DatasetLoader, RecordContext
from ._io import guess_split, iter_records
from .flashrag import FLASHRAG_SETS, FlashRAGLoader, FlashRAGSet, load_flashrag
from .hotpotqa import HotpotQALoader
from .musique import MuSiQueLoader
from .search_r1 import SEARCH_R1_SOURCES, SearchR1Loader, is_search_r1_file
from .twowiki import TwoWikiLoader

log = logging.getLogger(__name__)

DATASETS: Registry[type[DatasetLoader]] = Registry(
    "dataset", check=lambda o: isinstance(o, type) and issubclass(o, DatasetLoader),
    must_be="a subclass of rag_curriculum.loaders.DatasetLoader")
DATASETS.register("hotpotqa", HotpotQALoader)
DATASETS.register("musique", MuSiQueLoader)
DATASETS.register("2wikimultihopqa", TwoWikiLoader)
DATASETS.register("search-r1", SearchR1Loader)  # questions without passages, for search agents

ALIASES = {"2wiki": "2wikimultihopqa", "hotpot": "hotpotqa", "hotpot_qa": "hotpotqa", "2wikimqa": "2wikimultihopqa",
           "searchr1": "search-r1", "search_r1": "search-r1"}

OnError = Literal["raise", "skip"]


def questions_only(dataset: str) -> bool:
    """Whether ``dataset``'s records are questions without passages (Search-R1's data files): rows for search
    agents, which find their passages themselves."""
    return bool(getattr(get_loader(dataset), "questions_only", False))


def get_loader(dataset: str) -> type[DatasetLoader]:
    """The loader class registered for a dataset name (case ignored; aliases such as ``2wiki`` accepted).

    Args:
        dataset: a dataset name (``hotpotqa``, ``musique``, ``2wikimultihopqa``, ``search-r1``, or one registered in
            ``DATASETS``).

    Returns:
        The :class:`DatasetLoader` subclass.

    Raises:
        UnknownNameError: a name no loader is registered under (the message lists the known ones).
        UsageError: a FlashRAG question set (``nq``, ``flashrag``, ...): questions without passages, for a search
            agent's evaluation only.

    Examples:
        >>> from rag_curriculum.loaders import get_loader
        >>> get_loader("MuSiQue").name, get_loader("musique").license
        ('musique', 'cc-by-4.0')
    """
    name = ALIASES.get(dataset.lower(), dataset.lower())
    if name == "flashrag" or (name in FLASHRAG_SETS and name not in DATASETS.names()):
        raise UsageError(f"{dataset!r} is read in FlashRAG's question layout, which has no passages: evaluation "
                         "only, not a closed-context build", hint=EVAL_ONLY_HINT)
    return DATASETS.get(name)


#: What to do with a FlashRAG file where a closed-context dataset is needed.
EVAL_ONLY_HINT = ("evaluate a search agent on it: curriculum eval --agent search-r1|react --retriever DIR|URL "
                  "--data FILE.jsonl")


def flashrag_refusal(path: Any) -> WrongDatasetError:
    """The error for a FlashRAG question file given where a closed-context dataset's file is needed."""
    return WrongDatasetError(f"{path}: this file is in FlashRAG's question layout (id, question, golden_answers): "
                             "questions without passages, for evaluation only; a closed-context build needs the "
                             f"dataset's release file with its paragraphs. Instead, {EVAL_ONLY_HINT}")


def classify(rec: Any) -> str | None:
    """The dataset a raw record looks like, or None."""
    for name in DATASETS.names():
        if DATASETS.get(name).looks_like(rec):
            return name
    return None


def sniff_dataset(path: str | Path, on_error: OnError = "raise") -> str:
    """Name the dataset a file holds, from its first record that some dataset recognises (looking at up to
    ``SNIFF_RECORDS`` records, so one damaged record at the top does not hide the dataset).

    Args:
        path: a data file (JSON list, JSONL or Parquet).
        on_error: ``"skip"`` passes over unreadable records too; ``"raise"`` stops at the first.

    Returns:
        The dataset's name (``hotpotqa``, ``musique``, ``2wikimultihopqa``, ``search-r1``, ...).

    Raises:
        WrongDatasetError: no record matches a known dataset, the file holds no records, or it is a FlashRAG
            question file (no passages: evaluation only).
        DataError: an unreadable record (``on_error="raise"``).

    Examples:
        ```python
        from rag_curriculum import sniff_dataset

        sniff_dataset("musique_ans_v1.0_train.jsonl")   # 'musique'
        ```
    """
    first = None
    for k, (_, rec) in enumerate(iter_records(path, (lambda err: None) if on_error == "skip" else None)):
        name = classify(rec)
        if name is not None:
            return name
        if first is None:
            first = rec
        if k + 1 >= SNIFF_RECORDS:
            break
    if first is None:
        raise WrongDatasetError(f"{path}: no records")
    if FlashRAGLoader.looks_like(first):
        raise flashrag_refusal(path)
    keys = sorted(first)[:12] if isinstance(first, dict) else type(first).__name__
    raise WrongDatasetError(f"{path}: the first record (keys {keys}) matches no known dataset "
                            f"({', '.join(DATASETS.names())}); pass --dataset NAME if it is one of them")


SNIFF_RECORDS = 20


class ExampleStream(Iterator[Example]):
    """A lazy iterator of :class:`Example`; ``report`` counts what ``on_error="skip"`` skipped, by kind, and is
    logged as a warning when the stream ends."""

    def __init__(self, dataset: str, path: str | Path | None, split: str | None, on_error: OnError,
                 report: SkipReport | None = None) -> None:
        if on_error not in ("raise", "skip"):
            raise ConfigError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        self.loader = get_loader(dataset)
        self.dataset = self.loader.name
        self.hub: tuple[str, str | None] | None = None
        if path is None:
            self.hub = (self.loader.hub_path, self.loader.hub_name)
        elif isinstance(path, str) and path.startswith("hf://"):
            repo, _, config = path[len("hf://"):].partition(":")
            self.hub = (repo, config or None)
            path = None
        self.path = Path(path) if path is not None else None
        self.on_error = on_error
        self.report = report if report is not None else SkipReport()
        self.split = split if split is not None else (guess_split(self.path) if self.path else "train")
        self.count = 0
        self.duplicates = 0  # records that repeat an earlier one exactly (same id, same question): yielded
        self._it = self._generate()

    def __next__(self) -> Example:
        return next(self._it)

    def _skip(self, err: DataError) -> None:
        self.report.add(err)

    def _raw(self) -> Iterator[tuple[str, Any]]:
        if self.hub is not None:
            yield from hub_records(self.loader, self.split, *self.hub)
            return
        yield from iter_records(self.path, self._skip if self.on_error == "skip" else None)

    def _generate(self) -> Iterator[Example]:
        loader = self.loader
        path = str(self.path) if self.path else f"hf://{self.hub[0] if self.hub else loader.hub_path}"
        split = self.split
        checked = False
        seen: dict[str, tuple[int, str]] = {}  # id -> (what the record says, where it is)
        notes: dict[str, list[Any]] = {}  # kind -> [count, the first one's message]
        for where, rec in self._raw():
            if not checked:
                checked = True
                if not loader.looks_like(rec):
                    if FlashRAGLoader.looks_like(rec):
                        raise flashrag_refusal(path)
                    other = classify(rec)
                    if other is not None and other != loader.name:
                        raise WrongDatasetError(
                            f"{path}: this file looks like a {other!r} file, not {loader.name!r}; "
                            f"load it with dataset={other!r} (curriculum ... --dataset {other})")
            ctx = RecordContext(path, where, notes)
            try:
                ex = loader.convert(rec, ctx, split)
                key = hash((ex.question, ex.answers[0], len(ex.documents)))
                prev = seen.get(ex.id)
                if prev is None:
                    seen[ex.id] = (key, where)
                elif prev[0] == key:
                    self.duplicates += 1
                else:
                    raise conflicting_id(ctx, ex, prev[1], "_id" if isinstance(rec, dict) and "_id" in rec else "id")
            except DataError as err:
                if self.on_error == "raise":
                    raise
                self._skip(err)
                continue
            self.count += 1
            yield ex
        for count, first in notes.values():  # each kind told once per file
            log.warning("%s: %d record(s) like %s", path, count, first)
        if self.report.total:
            log.warning("%s: %s; loaded %d", path, self.report.summary(), self.count)


def conflicting_id(ctx: RecordContext, ex: Example, first: str, field: str = "id") -> DataError:
    """The error for an id that an earlier record, a different question, already has."""
    ctx.id = ex.id
    return ctx.error(f"this id is already used by {first}, a different question or answer; ids must be unique "
                     "(give one of the two records another id, or remove it)", kind="conflicting_id", field=field)


def load_examples(dataset: str, path: str | Path | None = None, *, split: str | None = None,
                  on_error: OnError = "raise", report: SkipReport | None = None) -> ExampleStream:
    """Lazily load ``dataset`` (``hotpotqa``, ``musique`` or ``2wikimultihopqa``) as :class:`Example` records.

    ``path`` is a local file in any layout the loaders accept (official release JSON list or JSONL, Hub-layout
    JSONL or Parquet; the layout is sniffed), or None to download ``split`` from the Hugging Face Hub through
    ``datasets`` (``"hf://owner/name[:config]"`` picks another Hub copy). ``split`` defaults to what the file name says (``train``/``dev``/``test``), else ``train``.
    With ``on_error="raise"`` the first bad record raises :class:`DataError` naming the file, the record and the
    field; with ``"skip"`` bad records are counted by kind in ``stream.report`` and logged at the end.

    Args:
        dataset: the dataset's name (``get_loader`` resolves it).
        path: a local file, ``"hf://owner/name[:config]"``, or None for the dataset's Hub copy.
        split: the split to read; default: from the file name, else ``train``.
        on_error: ``"raise"`` or ``"skip"`` bad records.
        report: a :class:`SkipReport` to count skipped records into (default: a new one, ``stream.report``).

    Returns:
        A lazy iterator of :class:`Example`; nothing is read until it is iterated.

    Raises:
        ConfigError: ``on_error`` other than ``"raise"`` or ``"skip"``.
        UnknownNameError: an unknown dataset name.
        WrongDatasetError: (while iterating) a file of another dataset, or a FlashRAG question file.
        DataError: (while iterating, ``on_error="raise"``) a record that cannot be read faithfully, naming the
            file, the record and the field.
        FileNotFoundError: (while iterating) no such file; an :class:`InputIsADirectoryError` for a folder.

    Examples:
        >>> import json, tempfile
        >>> from pathlib import Path
        >>> from rag_curriculum import load_examples
        >>> record = {"id": "2hop__1_2", "question": "Who founded the city where Ada was born?", "answer": "Romulus",
        ...           "answer_aliases": [], "answerable": True, "paragraphs": [
        ...     {"idx": 0, "title": "Ada", "paragraph_text": "Ada was born in Rome.", "is_supporting": True},
        ...     {"idx": 1, "title": "Rome", "paragraph_text": "Rome was founded by Romulus.", "is_supporting": True},
        ...     {"idx": 2, "title": "Paris", "paragraph_text": "Paris is in France.", "is_supporting": False}]}
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = Path(tmp) / "musique_ans_v1.0_train.jsonl"
        ...     _ = path.write_text(json.dumps(record) + "\\n")
        ...     examples = list(load_examples("musique", path))
        >>> ex = examples[0]
        >>> ex.id, ex.split, ex.hops, ex.answers
        ('2hop__1_2', 'train', 2, ['Romulus'])
        >>> [(d.title, d.is_gold) for d in ex.documents]
        [('Ada', True), ('Rome', True), ('Paris', False)]
    """
    return ExampleStream(dataset, path, split, on_error, report)


def load_search_r1(path: str | Path, *, on_error: str = "raise") -> list[FlashRAGSet]:
    """The questions of a Search-R1 data file as question sets, one per ``data_source`` in order of first
    appearance (a merged file holds several): rows ``id`` (``{data_source}-{id}``), ``data_source``, ``question``,
    ``answers``, ``passages`` (empty), ``hops`` (None), as :func:`load_flashrag` gives them, and the file's own
    ``reward_model.ground_truth.target`` (what Search-R1's reward reads) where it has one."""
    stream = load_examples("search-r1", path, on_error=on_error)  # type: ignore[arg-type]
    sets: dict[str, FlashRAGSet] = {}
    for ex in stream:
        name = ex.extra["data_source"]
        got = sets.get(name)
        if got is None:
            got = sets[name] = FlashRAGSet(name, ex.split, str(path), report=stream.report)
        row = {"id": ex.id, "data_source": name, "question": ex.question, "answers": list(ex.answers),
               "passages": [], "hops": None, "qtype": None}
        if ex.extra.get("target") is not None:
            row["reward_model"] = {"style": "rule", "ground_truth": {"target": list(ex.extra["target"])}}
        got.rows.append(row)
    if not sets:
        raise DataError("no records", kind="invalid_json", path=str(path))
    return list(sets.values())


def hub_records(loader: type[DatasetLoader], split: str | None, repo: str | None = None,
                config: str | None = None) -> Iterator[tuple[str, Any]]:
    """Rows of the Hub copy of a dataset, through ``datasets`` (streamed, so nothing is held whole)."""
    hub_split = loader.hub_splits.get(split or "train", split or "train")
    repo = repo or loader.hub_path
    config = config if repo != loader.hub_path else (config or loader.hub_name)
    try:
        import datasets

        args = (repo, config) if config else (repo,)
        ds = datasets.load_dataset(*args, split=hub_split, streaming=True)
        it = iter(ds)
        first = next(it)
    except Exception as e:  # no network, gated repo, renamed dataset: all end the same way for the user
        raise RuntimeError(
            f"could not load {loader.name} ({repo}, split {hub_split!r}) from the Hugging Face Hub: "
            f"{type(e).__name__}: {e}. Without network access, download the release file "
            f"({loader.release_files}) and pass it as path=... (CLI: --input PATH)."
        ) from e
    yield "row 0", first
    for i, row in enumerate(it, 1):
        yield f"row {i}", row


__all__ = ["DATASETS", "FLASHRAG_SETS", "SEARCH_R1_SOURCES", "ExampleStream", "FlashRAGLoader", "FlashRAGSet",
           "SearchR1Loader", "get_loader", "guess_split", "is_search_r1_file", "load_search_r1", "questions_only",
           "load_examples", "load_flashrag", "sniff_dataset"]
