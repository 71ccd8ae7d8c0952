"""The methods' parts of the search-agent evaluation (``curriculum eval --agent``), found by name, so the evaluation
names no method. Three options of the evaluation each name an entry of a registry:

* ``--agent NAME``: an agent protocol in :data:`AGENT_PROTOCOLS` (its prompt template, the rollout loop's turn
  format, the scores only it has); ``search-r1``, the search environment's own tags, is the toolkit's;
* ``--reward NAME``: a reward in :data:`TRAJECTORY_REWARDS` that also scores every trajectory, beside EM / F1;
* ``--faithfulness NAME``: a measure in :data:`FAITHFULNESS_MEASURES` (its scores of a set, its own files).

Each entry is an :class:`AgentEvalPart`: every hook has a default that does nothing, so a part overrides only what
it adds. A method registers its parts when its folder is imported (``AGENT_PROTOCOLS.register("react",
"my_pkg.my_method._evaluation:PROTOCOL")``), as its rewards and templates.

>>> agent_protocol_names()[0]
'search-r1'
>>> AGENT_PROTOCOLS.get("search-r1").turn_format(None) is None
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .registry import Registry

__all__ = ["AGENT_PROTOCOLS", "DEFAULT_AGENT", "FAITHFULNESS_MEASURES", "TRAJECTORY_REWARDS", "AgentEvalPart",
           "AgentSetRun", "agent_protocol_names"]


@dataclass
class AgentSetRun:
    """One model's trajectories on one question set, as a part scores them: ``m`` trajectories per row (row order,
    then sample order), ``dicts`` the records written to ``trajectories/MODEL/SET.jsonl`` (a part adds its
    per-trajectory fields to them), the run's ``out`` folder and the model's ``backend``."""

    out: Path
    model: str
    key: str
    rows: Sequence[Mapping[str, Any]]
    trajs: Sequence[Any]
    dicts: list[dict[str, Any]]
    m: int
    backend: Any = None


class AgentEvalPart:
    """A method's part of the search-agent evaluation (see the module docstring). ``cfg`` is the run's
    :class:`~rag_curriculum.evaluation.AgentEvalConfig`.

    Attributes:
        key: where its scores go: the entry's section (``score_set``), or, for a reward, each trajectory's field
            and the aggregates' metric (``trajectory_scores``).
        label: its scores' name in the log line of a set (a reward's).
        column: a reward's column heading in the command's table of scores (``""``: its ``label``).
        files: what it writes into the run's folder, as the command's closing line names it (``""``: nothing).
        settings: the evaluation settings that are its own: in a result's fingerprint only when it is chosen, so
            results made without it are reused.
    """

    key: str = ""
    label: str = ""
    column: str = ""
    files: str = ""
    settings: tuple[str, ...] = ()

    def check(self, cfg: Any) -> None:
        """Refuse settings that cannot be used (a :class:`~rag_curriculum.errors.UsageError`). Called on every
        validation, whether the part is chosen or not: a part refuses its own settings given without it."""

    def template(self, cfg: Any) -> str:
        """An agent protocol's prompt template (a name in :data:`rag_curriculum.prompts.AGENT_TEMPLATES`)."""
        return cfg.template

    def turn_format(self, cfg: Any) -> Any:
        """An agent protocol's turn format for :func:`rag_curriculum.agents.run_rollouts` (None: Search-R1's tags)."""
        return None

    def score_set(self, cfg: Any, run: AgentSetRun) -> dict[str, Any] | None:
        """Its scores of one set (the entry's ``key`` section; None: none), adding per-trajectory fields to
        ``run.dicts``."""
        return None

    def trajectory_scores(self, cfg: Any, run: AgentSetRun) -> list[float] | None:
        """A reward's score of every trajectory (``run.trajs``' order), reported beside EM / F1 under ``key``."""
        return None

    def table_rows(self, model: str, entries: Sequence[Mapping[str, Any] | None]
                   ) -> list[tuple[str, list[dict[str, Any]]]] | None:
        """An agent protocol's rows of one model in the main table, each a label and its scores per set (an
        entry's ``overall`` or a section of its own; ``entries`` in the table's set order, None where the model has
        none), or None: the model's ``overall`` per set, one row."""
        return None

    def report_section(self, summary: Mapping[str, Any]) -> list[str] | None:
        """Its lines of ``table.md`` (after the main table), or None."""
        return None

    def finish(self, cfg: Any, out: Path, summary: Mapping[str, Any]) -> None:
        """Write its own files into ``out`` once every set is scored (``summary`` is ``summary.json``'s)."""

    def console_table(self, summary: Mapping[str, Any]) -> tuple[str, list[str], list[list[str]]] | None:
        """Its own table on the command's console, after the scores: a title, the header and the rows (a row whose
        cells after the first are all empty opens a block, its first cell the block's title), or None."""
        return None

    def label_agreement(self, labels: Path, reference: Path, *, field: str = "label",
                        reference_field: str = "label") -> dict[str, Any] | None:
        """A faithfulness measure's reading of ``curriculum eval agreement``: the agreement of the judge labels in
        ``labels`` (its judge pairs, labelled; JSONL, the label under ``field``) with ``reference``'s, matched by
        id: ``n``, ``consistency``, ``kappa``, ``unlabelled``, ``only_labels``, ``only_reference``. None: it has no
        judge labels to check."""
        return None


class _SearchR1Tags(AgentEvalPart):
    """The search environment's own protocol: Search-R1's ``<search>`` / ``<information>`` / ``<answer>`` tags."""


#: ``--agent NAME``: agent protocols; ``search-r1`` (:data:`DEFAULT_AGENT`) is the search environment's own.
AGENT_PROTOCOLS: Registry[AgentEvalPart] = Registry("agent protocol", check=AgentEvalPart,
                                                    must_be="an AgentEvalPart")
#: ``--reward NAME``: rewards that also score every trajectory of a search-agent evaluation.
TRAJECTORY_REWARDS: Registry[AgentEvalPart] = Registry("trajectory reward", check=AgentEvalPart,
                                                       must_be="an AgentEvalPart")
#: ``--faithfulness NAME``: faithfulness measures of a search-agent evaluation.
FAITHFULNESS_MEASURES: Registry[AgentEvalPart] = Registry("faithfulness measure", check=AgentEvalPart,
                                                          must_be="an AgentEvalPart")

DEFAULT_AGENT = "search-r1"
AGENT_PROTOCOLS.register(DEFAULT_AGENT, _SearchR1Tags())


def agent_protocol_names() -> tuple[str, ...]:
    """The ``--agent`` choices: the toolkit's own protocol first, then the registered ones by name."""
    return (DEFAULT_AGENT, *(n for n in AGENT_PROTOCOLS.names() if n != DEFAULT_AGENT))
