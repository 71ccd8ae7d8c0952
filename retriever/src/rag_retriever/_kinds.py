"""Retriever kinds: how an index ranks passages. A kind is one module (``_bm25.py``, ``_dense.py``, ``_hybrid.py``,
or a user's) that declares one :class:`RetrieverKind` and is registered once, in :data:`KINDS`; everything else
derives from the registry: ``curriculum index --kind`` (and the options and checks of each kind),
``curriculum build --distractors`` (each kind is a distractor source), the index (its passage store, manifest,
stored rankings, atomic writing) and everything that uses one (builds' distractors, the retrieved setting,
``serve``, the agents), which never branch on the kind.

A kind declares:

* ``builder(cfg, tmp, progress=..., out=...)``: an object whose ``add(block)`` takes each block of passages
  (:class:`~rag_retriever._corpus.Passages`, in the index's order) and whose ``finish(bar=None,
  task=None)`` writes the kind's files into ``tmp`` and returns the manifest's facts about it (a dict merged into
  the manifest); its ``verb`` (optional) says what the build is doing to the passages ("encoding");
* ``open(directory, manifest, backend="auto", threads=0, device=None, encoder=None)``: a searcher whose
  ``search(queries, k, threads=None)`` returns ``(ids, scores)`` arrays, one row per query, best first, ties by
  the lower passage id, ids -1 past what it found; ``warm()`` readies it (compiles, loads a model, maps files);
  ``describe()`` says what it is (the kind's settings);
* ``check(manifest, directory)``: refuses an index this environment cannot read faithfully (another library
  version, a missing file), before anything is loaded;
* ``manifest_keys``: the manifest keys the kind writes (what ``/manifest`` and a build's manifest show of it);
* ``options``: a dataclass of the kind's settings, each a :func:`~rag_plumbing._settings.rule` field: they
  become fields of :class:`~rag_retriever.IndexConfig`, so options of ``curriculum index``, recipe
  keys and rows of the reference table, refused with any other kind ("--encoder is for --kind dense or hybrid");
  ``uses`` names the other kinds whose options it reads too (hybrid: bm25 and dense);
* ``check_config(cfg)``: the kind's checks of an ``IndexConfig`` whose ``kind`` is it (or uses it), beyond
  each option's own type and range;
* ``label`` (``BM25``), ``negatives`` (what its distractors are, for a data card) and ``summary(manifest)`` (one
  line on an index's settings: ``curriculum index``, ``serve``, ``validate`` and data cards print it);
* ``distractors``: the build's distractor source for ``--distractors NAME``: None, the question's ranking by the
  index (rag-curriculum's ``BM25Source``: best first, gold copies and passages holding
  an answer skipped), or a factory ``(index, seed) -> DistractorSource`` (or its dotted path) of the kind's own;
* ``warm_on_build``: ``curriculum index`` warms the new index before it returns (BM25: the search compiled and
  cached for the machine, so ``serve`` starts fast);
* ``verify(directory, manifest)``: what ``curriculum validate`` checks of the kind's files beyond what loading
  checks (it may read them whole: a dense index's vectors, for NaN or infinity);
* ``placement``: the options (of its ``options``) that say where the build's work runs, not what it makes (the
  dense kind's ``--engine ray`` and its workers): never recorded in the manifest, left out of its command;
* ``native``: its files (paths inside the index; a trailing ``/``: a folder) that compiled code reads without
  bounds checks: every open hashes them whole against the manifest, whatever their size (BM25: ``bm25/``), where
  other large files get a sampled check (:mod:`._integrity`).

Every file a kind writes is recorded in the manifest with its SHA-256 (:mod:`._integrity`): a builder that hashed
a file as it wrote it says so in its ``digests`` (``{path inside the index: SHA-256}``, optional); the others are
read once after the build. A searcher whose answers are not the index's own (the dense kind served with another
encoder, allowed) says so with its ``fingerprint_salt`` (optional): the index then announces another fingerprint.

Outside the toolkit, a kind is registered by an entry point in the group ``rag_retriever.kinds`` (or, for one release, ``rag_curriculum.retriever_kinds``)
(``toy = "my_pkg.toy:KIND"``), read when :mod:`rag_retriever` is first imported: then its options are
options of ``curriculum index`` and every process (``serve``'s workers, Ray replicas) knows it. ``KINDS.register``
from Python works too, for a kind without options of its own, in the process that registers it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rag_plumbing._registry import Registry

from .errors import ConfigError, UnknownNameError

log = logging.getLogger(__name__)

#: The entry-point group through which installed packages add retriever kinds.
ENTRY_POINTS = "rag_retriever.kinds"
#: The group rag-curriculum declared kinds in before the retriever was its own package, read too for one release.
LEGACY_ENTRY_POINTS = "rag_curriculum.retriever_kinds"
#: Names no kind may take: the build's other distractor sources (``--distractors provided|mixed``, and the
#: retrieved setting's source).
RESERVED = ("provided", "mixed", "retrieved")


@dataclass(frozen=True)
class RetrieverKind:
    name: str
    builder: Callable[..., Any]
    open: Callable[..., Any]
    check: Callable[[dict[str, Any], Any], None]
    manifest_keys: tuple[str, ...]
    description: str = ""
    options: type | None = None
    uses: tuple[str, ...] = ()
    check_config: Callable[[Any], None] | None = None
    label: str = ""
    negatives: str = ""
    summary: Callable[[dict[str, Any]], str] | None = None
    distractors: Any = None
    warm_on_build: bool = False
    verify: Callable[[Any, dict[str, Any]], None] | None = None
    placement: tuple[str, ...] = ()
    native: tuple[str, ...] = ()

    def option_names(self) -> tuple[str, ...]:
        """The settings this kind declares itself (its ``options`` dataclass's fields)."""
        return tuple(f.name for f in dataclasses.fields(self.options)) if self.options is not None else ()

    def title(self) -> str:
        """What the kind is called in a sentence (its ``label``, else its name)."""
        return self.label or self.name

    def settings_line(self, manifest: dict[str, Any]) -> str:
        """One line on an index of this kind (its ``summary``; its name without one)."""
        return self.summary(manifest) if self.summary is not None else self.name


class KindRegistry(Registry[RetrieverKind]):
    """:class:`~rag_plumbing._registry.Registry` of retriever kinds, which also reads the kinds installed
    packages declare (entry points of :data:`ENTRY_POINTS`), once, on first use."""

    config_error = ConfigError
    unknown_error = UnknownNameError

    def __init__(self) -> None:
        super().__init__("retriever kind", group=ENTRY_POINTS)
        self._discovered = False

    def register(self, name: str, obj: Any = None, *, overwrite: bool = False) -> Any:
        if name in RESERVED:
            raise ConfigError(f"{name!r} cannot name a retriever kind: --distractors {name} is another source",
                              hint="register the kind under another name")
        return super().register(name, obj, overwrite=overwrite)

    def discover(self) -> None:
        """Register the kinds installed packages declare (once; a name already taken keeps its kind)."""
        if self._discovered:
            return
        self._discovered = True
        from importlib.metadata import entry_points

        eps = [*entry_points(group=ENTRY_POINTS), *entry_points(group=LEGACY_ENTRY_POINTS)]
        for ep in eps:
            if ep.name in RESERVED:
                log.warning("retriever kind %r (entry point of %s) left out: that name is taken by --distractors "
                            "%s", ep.name, ENTRY_POINTS, ep.name)
            elif ep.name not in self._entries:
                self._entries[ep.name] = ep.value

    def get(self, name: str) -> RetrieverKind:
        if name not in self._entries:
            self.discover()
        kind = super().get(name)
        if getattr(kind, "name", None) != name or not callable(getattr(kind, "builder", None)):
            raise TypeError(f"retriever kind {name!r} is registered as {kind!r}: it must be a RetrieverKind named "
                            f"{name!r}")
        return kind

    def names(self) -> list[str]:
        self.discover()
        return super().names()

    def __contains__(self, name: object) -> bool:
        self.discover()
        return super().__contains__(name)

    def drop(self, name: str) -> None:
        """Forget an installed package's kind that cannot be used (the toolkit's own cannot be dropped)."""
        if name in BUILTIN:
            raise ValueError(f"the toolkit's retriever kind {name!r} cannot be dropped")
        self._entries.pop(name, None)

    def loaded(self) -> list[RetrieverKind]:
        """Every registered kind, imported, in registration order (the toolkit's first). A kind an installed
        package declares that cannot be imported is dropped with a warning naming it (then ``--kind NAME`` is
        an unknown kind); the toolkit's own always load."""
        self.discover()
        kinds = []
        for name in list(self._entries):
            try:
                kinds.append(self.get(name))
            except Exception as e:  # noqa: BLE001  (a broken plug-in must not take the toolkit down)
                if name in BUILTIN:
                    raise
                self.drop(name)
                log.warning("retriever kind %r (entry point of %s) cannot be loaded, left out: %s: %s", name,
                            ENTRY_POINTS, type(e).__name__, e)
        return kinds


#: The toolkit's own kinds, each a module beside this one.
BUILTIN = {"bm25": "rag_retriever._bm25:KIND", "dense": "rag_retriever._dense:KIND",
           "hybrid": "rag_retriever._hybrid:KIND"}
KINDS = KindRegistry()
for _name, _path in BUILTIN.items():
    KINDS.register(_name, _path)


def get_kind(name: str) -> RetrieverKind:
    """The retriever kind registered under ``name``.

    Args:
        name: ``bm25``, ``dense``, ``hybrid``, or a kind registered since (``curriculum index --kind``).

    Returns:
        The kind: how its index is built, opened and checked.

    Raises:
        UnknownNameError: no kind of that name (with a "did you mean").

    Examples:
        >>> from rag_retriever import get_kind
        >>> get_kind("bm25").name
        'bm25'
    """
    return KINDS.get(name)


def kind_names() -> tuple[str, ...]:
    """Every registered kind's name (``curriculum index --kind``'s choices)."""
    return tuple(KINDS.names())


def loaded_kinds() -> list[RetrieverKind]:
    """Every registered kind, imported, in registration order (:meth:`KindRegistry.loaded`)."""
    return KINDS.loaded()


def kinds_using(owner: str) -> list[str]:
    """The kinds that read ``owner``'s options: ``owner`` itself and the kinds that use it (bm25: bm25, hybrid)."""
    return [k.name for k in loaded_kinds() if k.name == owner or owner in k.uses]


def kinds_table() -> str:
    """A Markdown table of the registered kinds: each one's name, what it is, its own options (flags) and the kinds
    whose options it reads too; the docs draw it from the registry (docs/hooks.py).

    >>> print(kinds_table().splitlines()[2])
    | `bm25` | BM25 (bm25s's scoring, or Lucene's as pyserini runs it): sparse lexical ranking | `--k1`, `--b`, `--method`, `--delta`, `--stopwords`, `--bm25` |  |
    """
    rows = ["| kind | what it is | its options | reads the options of |", "|---|---|---|---|"]
    for kind in loaded_kinds():
        flags = ", ".join(f"`--{n.replace('_', '-')}`" for n in kind.option_names())
        rows.append(f"| `{kind.name}` | {kind.description} | {flags} | {', '.join(f'`{u}`' for u in kind.uses)} |")
    return "\n".join(rows)


__all__ = ["ENTRY_POINTS", "KINDS", "KindRegistry", "RetrieverKind", "get_kind", "kind_names", "kinds_table",
           "kinds_using", "loaded_kinds"]
