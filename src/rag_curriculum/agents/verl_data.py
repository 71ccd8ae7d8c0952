"""A curriculum's rows as verl training data for a search agent (verl's ``ToolAgentLoop`` with the toolkit's
:class:`~rag_curriculum.agents.verl_tool.SearchTool`): one Parquet file, rows in curriculum order.

    python -m rag_curriculum.agents.verl_data outputs/musique-min-max agent.parquet [--template search-r1] [--overwrite]

Each row keeps the curriculum row's columns, with:

* ``prompt``: the search agent's prompt (the Search-R1 template rendered with the question; no passages: the
  model finds them by searching);
* ``agent_name``: ``tool_agent`` (verl's multi-turn agent loop);
* ``extra_info.tools_kwargs.search.create_kwargs.row``: what the search tool needs of the row to apply its search
  difficulty and to say whether a gold passage came back (id, question, level, answers, passages with ``is_gold``);
  ``extra_info.need_tools_kwargs``: true (verl warns about a row without them).

The file is written atomically (a crash leaves no half-written file under the name), and the same shards give a
byte-identical file.

>>> row = {"id": "r1", "question": "Who?", "answers": ["A"], "level": 2, "extra_info": {"index": 0},
...        "passages": [{"label": "x", "title": "T", "text": "t", "is_gold": True}], "prompt": []}
>>> out = agent_row(row, get_agent_template("search-r1"))
>>> out["agent_name"], out["prompt"][0]["content"].endswith("Question: Who?")
('tool_agent', True)
>>> out["extra_info"]["tools_kwargs"]["search"]["create_kwargs"]["row"]["passages"]
[{'title': 'T', 'text': 't', 'is_gold': True}]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .._plumbing import atomic_write_with
from ..errors import ConfigError, CurriculumError
from ..shards import shard_files, validate_shards
from ._searchr1 import SearchTemplate, get_agent_template

__all__ = ["agent_row", "agent_table", "write_agent_data"]

#: The verl tool name the rows' ``tools_kwargs`` are keyed by (the tool schema's function name).
TOOL_NAME = "search"


def agent_row(row: dict[str, Any], template: SearchTemplate, *, tool: str = TOOL_NAME) -> dict[str, Any]:
    """One curriculum row as a verl search-agent row (see the module docstring)."""
    passages = [{"title": p["title"], "text": p["text"], "is_gold": bool(p.get("is_gold"))}
                for p in row.get("passages") or []]
    view = {"id": str(row["id"]), "question": row["question"], "level": int(row.get("level") or 1),
            "answers": list(row.get("answers") or []), "answerable": bool(row.get("answerable", True)),
            "passages": passages}
    extra = dict(row.get("extra_info") or {})
    extra["tools_kwargs"] = {tool: {"create_kwargs": {"row": view}}}
    extra["need_tools_kwargs"] = True
    return {**row, "prompt": template.render(row["question"]), "agent_name": "tool_agent", "extra_info": extra}


def agent_table(shards: str | Path, template: str = "search-r1") -> pa.Table:
    """The curriculum at ``shards`` (checked first) as verl search-agent rows, in curriculum order."""
    validate_shards(shards)
    tmpl = get_agent_template(template)
    rows: list[dict[str, Any]] = []
    for f in shard_files(shards):
        for i, r in enumerate(pq.read_table(f).to_pylist()):
            if not r.get("question"):
                raise ConfigError(f"{f}: row {i} has no `question`", hint="build the curriculum again")
            rows.append(agent_row(r, tmpl))
    if not rows:
        raise ConfigError(f"{shards}: the curriculum has no rows", hint="nothing to train on")
    return pa.Table.from_pylist(rows)


def write_agent_data(shards: str | Path, out: str | Path, *, template: str = "search-r1",
                     overwrite: bool = False) -> int:
    """Write :func:`agent_table` to ``out`` (one Parquet file) atomically; the number of rows."""
    out = Path(out)
    if out.exists() and not overwrite:
        raise ConfigError(f"{out} exists", hint="pass --overwrite to replace it, or choose another file")
    if out.is_dir():
        raise ConfigError(f"{out} is a directory", hint="give a file name, e.g. agent.parquet")
    table = agent_table(shards, template)
    atomic_write_with(out, lambda tmp: pq.write_table(table, tmp))
    return table.num_rows


USAGE = "usage: python -m rag_curriculum.agents.verl_data SHARD_DIR OUT.parquet [--template NAME] [--overwrite]"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    overwrite = "--overwrite" in args
    args = [a for a in args if a != "--overwrite"]
    template = "search-r1"
    if "--template" in args:
        i = args.index("--template")
        if i + 1 >= len(args):
            sys.stderr.write(USAGE + "\n")
            return 2
        template = args[i + 1]
        del args[i:i + 2]
    if len(args) != 2 or any(a.startswith("-") for a in args):
        sys.stderr.write(USAGE + "\n")
        return 2
    try:
        n = write_agent_data(args[0], args[1], template=template, overwrite=overwrite)
    except CurriculumError as e:
        sys.stderr.write(f"error: {e}" + (f"\n  hint: {e.hint}" if getattr(e, "hint", None) else "") + "\n")
        return 2 if isinstance(e, ConfigError) else 1
    sys.stderr.write(f"{args[1]}: {n} rows in curriculum order\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
