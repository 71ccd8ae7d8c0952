"""The toolkit's retriever as a search tool of verl's multi-turn agent loop (``ToolAgentLoop``, verl >= 0.9).

Two pieces, both loaded by verl from its own configuration (this module imports verl: it is meant for a verl node):

* :class:`SearchTool`, a verl ``BaseTool``: a search call ``{"query": "..."}`` (or Search-R1's
  ``{"query_list": [...]}``) goes to ``curriculum serve`` (an ``http(s)://`` URL) or to an index directory read in
  the worker (``curriculum index``), and comes back as the passages in Search-R1's ``Doc i(Title: t) text`` layout.
  When the row carries its curriculum row in ``extra_info.tools_kwargs.search.create_kwargs.row`` (what
  ``python -m rag_curriculum.verl agent-data`` writes), the row's search difficulty applies (hard negatives above
  its gold passages at its level, or gold withheld with probability ``p``; :class:`~rag_curriculum.agents.
  SearchDifficulty`) and the tool's metrics say whether a gold passage came back.
  ``recipes/verl/search_tool.yaml`` declares it; ``recipes/verl/run_search_r1.sh`` points verl at it.
* :class:`SearchR1ToolParser`, registered in verl as the tool-call format ``search-r1``
  (``actor_rollout_ref.rollout.multi_turn.format=search-r1``): the Search-R1 tag protocol instead of a chat
  template's native tool calls. The turn is read up to its first ``</search>`` or ``</answer>`` and classified by
  the toolkit's turn parser (:func:`~rag_curriculum.grammar.parse_turn`): only a well-formed, non-empty
  ``<search>`` becomes a call; a malformed or unclosed tag, or an ``<information>`` block the model wrote itself,
  is no call (and is logged with its error type), never a silent search.

**Coming from verl's search tool.** verl removed its in-tree ``verl.tools.search_tool.SearchTool`` and its
Search-R1 example (verl PR #7731); this tool replaces it. A tool config written for verl's tool works with its
``class_name`` changed to ``rag_curriculum.verl.tool.SearchTool``: ``retrieval_service_url`` is read as
``retriever``, ``default_timeout`` as ``timeout``, the schema's ``query_list`` is searched query by query, and
``num_workers``, ``rate_limit`` and ``enable_global_rate_limit`` (verl's Ray pool and rate limiter) are accepted
and not needed (``curriculum serve`` batches concurrent requests itself). ``result_format: verl`` returns the text
verl's tool returned (a JSON object ``{"result": "Doc 1 (Title: t)\\ntext\\n\\n..."}``, queries separated by
``\\n---\\n``), for a model trained on it; the default is Search-R1's ``Doc i(Title: t) text`` lines.

verl differs from the toolkit's own loop (:func:`~rag_curriculum.agents.run_rollouts`) in two ways a user should
know: it stops a turn on token ids only (a multi-token ``</search>`` does not stop generation, so text after it
stays in the trajectory; the parser ignores it), and it renders the tool's answer as a ``tool`` message through the
chat template rather than an inline ``<information>`` block.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from .._plumbing import derive_seed
from ..agents import (
    NO_RESULTS,
    Hit,
    Retriever,
    RowView,
    SearchDifficulty,
    doc_lines,
    open_retriever,
)
from ..errors import ConfigError, CurriculumError
from ..generation import cut_at_stop
from ..grammar import STOP, parse_turn

__all__ = ["SEARCH_SCHEMA", "SearchR1ToolParser", "SearchTool", "format_passages", "verl_result"]

logger = logging.getLogger(__name__)

#: The tool's OpenAI function schema (verl's ``tool_schema``; a config may give its own with the same parameter).
SEARCH_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the passage collection; returns the top passages for the query, best first.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to search for."}},
            "required": ["query"],
        },
    },
}

_KEYS = ("type", "retriever", "topk", "difficulty", "timeout", "retries", "result_format")
#: verl's removed search tool's config keys: the same settings under its names, or what it needed and this does not.
VERL_ALIASES = {"retrieval_service_url": "retriever", "default_timeout": "timeout"}
VERL_UNUSED = ("num_workers", "rate_limit", "enable_global_rate_limit")
#: ``result_format``: Search-R1's ``Doc i(Title: t) text`` lines, or the JSON text verl's removed tool returned.
RESULT_FORMATS = ("search-r1", "verl")


def format_passages(hits: list[Hit]) -> str:
    """Search-R1's passage layout without the ``<information>`` tags (verl's chat template wraps a tool's answer):
    ``Doc 1(Title: t) text`` per line."""
    return doc_lines(hits)


def verl_result(results: list[list[Hit]]) -> str:
    r"""The text verl's removed search tool returned for a call's queries (its ``perform_single_search_batch``):
    per query ``Doc i (Title: t)\ntext`` blocks separated by a blank line, queries by ``\n---\n``, as the
    ``result`` of a JSON object.

    >>> print(verl_result([[Hit("1", "Paris", "The capital.", contents="Paris\nThe capital.")], []]))
    {"result": "Doc 1 (Title: Paris)\nThe capital.\n---\n"}
    """
    def one(hits: list[Hit]) -> str:
        return "".join(f"Doc {i} (Title: {t})\n{x}\n\n" for i, (t, x) in enumerate((h.shown() for h in hits), 1)).strip()

    return json.dumps({"result": "\n---\n".join(one(h) for h in results)}, ensure_ascii=False)


class SearchTool(BaseTool):
    """verl ``BaseTool`` over the toolkit's retriever. ``config`` (the ``config`` block of verl's tool YAML):
    ``retriever`` (a ``curriculum serve`` URL or an index directory; required), ``topk`` (3, Search-R1's),
    ``difficulty`` (``{mode: none|hard-negatives|withhold, p, seed}``; applied to rows that carry their curriculum
    row), ``timeout`` (seconds per HTTP request), ``retries`` (times a request is sent again after a connection
    error or a 502/503/504; 5)."""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None = None):
        config = dict(config or {})
        for old, new in VERL_ALIASES.items():  # a config written for verl's removed search tool
            if old in config:
                value = config.pop(old)
                if config.get(new) not in (None, value):
                    raise ConfigError(f"search tool config: `{old}` ({value!r}) and `{new}` ({config[new]!r}) "
                                      "disagree", hint=f"give one of them (`{old}` is verl's name for `{new}`)")
                config[new] = value
        unused = [k for k in VERL_UNUSED if k in config]
        for k in unused:
            config.pop(k)
        if unused:
            logger.info("search tool: %s (verl's search tool's Ray pool and rate limit) not needed: the calls go "
                        "straight to the retriever, and curriculum serve batches concurrent requests", ", ".join(unused))
        unknown = sorted(set(config) - set(_KEYS))
        if unknown:
            raise ConfigError(f"search tool config: unknown key(s) {', '.join(unknown)}",
                              hint=f"the keys are {', '.join(_KEYS)} (verl's search tool's "
                                   f"{', '.join([*VERL_ALIASES, *VERL_UNUSED])} are read too)")
        self.result_format = config.get("result_format", "search-r1")
        if self.result_format not in RESULT_FORMATS:
            raise ConfigError(f"search tool config: result_format={self.result_format!r}",
                              hint=f"give one of {', '.join(RESULT_FORMATS)}")
        if not config.get("retriever"):
            raise ConfigError("search tool config: `retriever` is required (a curriculum serve URL or an index "
                              "directory)", hint="set config.retriever in the tool YAML (recipes/verl/search_tool.yaml)")
        topk = config.get("topk", 3)
        if not isinstance(topk, int) or isinstance(topk, bool) or topk < 1:
            raise ConfigError(f"search tool config: topk={topk!r} is not a positive integer")
        super().__init__(config, tool_schema or OpenAIFunctionToolSchema.model_validate(SEARCH_SCHEMA))
        self.topk = topk
        self.difficulty = SearchDifficulty(**dict(config.get("difficulty") or {}))
        where = config["retriever"]
        retries = config.get("retries")
        if retries is not None and (not isinstance(retries, int) or isinstance(retries, bool) or retries < 0):
            raise ConfigError(f"search tool config: retries={retries!r} is not a whole number of 0 or more")
        timeout = float(config["timeout"]) if config.get("timeout") else None
        self.retriever: Retriever = open_retriever(where, timeout=timeout, retries=retries)
        self._rows: dict[str, RowView | None] = {}

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        instance_id = instance_id or uuid4().hex
        create_kwargs = kwargs.get("create_kwargs") or {}
        row = create_kwargs.get("row")
        self._rows[instance_id] = RowView(row) if isinstance(row, dict) else None
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
                      ) -> tuple[ToolResponse, float, dict[str, Any]]:
        queries = parameters.get("query_list")
        if queries is None:
            queries = [parameters.get("query")]
        if not isinstance(queries, list) or not queries or not all(isinstance(q, str) and q.strip()
                                                                   for q in queries):
            return ToolResponse(text="Error: the search needs a non-empty `query` string."), 0.0, {
                "searched": 0, "bad_arguments": 1}
        view = self._rows.get(instance_id)
        k = self.topk
        extra = self.difficulty.extra(k, view) if view is not None else 0
        try:
            results = await asyncio.to_thread(self.retriever.search, [q.strip() for q in queries], k + extra)
        except CurriculumError as e:
            # verl turns an exception into a message to the model and a warning; say what failed, once, loudly
            logger.error("search tool: %s", e)
            raise
        texts, gold, short, shaped_all, shown_all = [], 0, 0, [], []
        agent_data = kwargs.get("agent_data")
        turn = getattr(agent_data, "assistant_turns", 0)
        for q, hits in zip(queries, results, strict=True):
            if view is not None:
                rng = random.Random(derive_seed(self.difficulty.seed, view.id, q, turn, "search"))
                shown, shaped = self.difficulty.apply(list(hits), k, view, rng)
                gold += any(view.is_gold(h) for h in shown)
                shaped_all.append(shaped)
            else:
                shown = list(hits)[:k]
            short += len(shown) < k
            shown_all.append(shown)
            texts.append(format_passages(shown) or NO_RESULTS)
        metrics: dict[str, Any] = {"searched": len(queries), "short": short}
        if view is not None:
            metrics["gold_found"] = gold
            for shaped in shaped_all:
                for key, value in shaped.items():
                    if key != "p":
                        metrics[key] = metrics.get(key, 0) + value
        if self.result_format == "verl":
            return ToolResponse(text=verl_result(shown_all)), 0.0, metrics
        return ToolResponse(text="\n\n".join(texts)), 0.0, metrics

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._rows.pop(instance_id, None)


@ToolParser.register("search-r1")
class SearchR1ToolParser(ToolParser):
    """verl tool-call format ``search-r1``: a turn's first well-formed ``<search>query</search>`` is a call of the
    ``search`` tool; see the module docstring."""

    async def extract_tool_calls(self, responses_ids: list[int], tools: Any = None
                                 ) -> tuple[str, list[FunctionCall]]:
        loop = asyncio.get_running_loop()
        text = await loop.run_in_executor(None, lambda: self.tokenizer.decode(responses_ids,
                                                                               skip_special_tokens=True))
        turn = parse_turn(cut_at_stop(text, STOP))
        if turn.action != "search":
            if turn.error is not None and turn.error != "no_action":
                logger.info("search-r1 tool parser: no call (%s)", turn.error)
            return text, []
        return text, [FunctionCall(name="search", arguments=json.dumps({"query": turn.content}, ensure_ascii=False))]
