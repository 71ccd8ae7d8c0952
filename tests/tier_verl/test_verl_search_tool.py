"""The toolkit's retriever as verl's search tool, driven by verl's own code (verl 0.9.1): the tool loaded from the
launch script's tool config by verl's ``initialize_tools_from_config``, called through ``ToolAgentLoop._call_tool``
(verl's create / execute / release dispatch) against a real ``curriculum serve`` on an index of the real MuSiQue
sample; the ``search-r1`` tool-call format registered in verl's ``ToolParser``; the search-agent rows read by
verl's ``RLHFDataset`` with their ``tools_kwargs``; and the launch command composed under verl's config."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("verl", reason="verl tier: bash scripts/setup.sh verl")

from conftest import MUSIQUE_TRAIN  # noqa: E402
from rag_retriever import IndexConfig, build_index  # noqa: E402
from support.servers import free_port, server_process  # noqa: E402

from rag_curriculum.agents import IndexRetriever, RowView  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "recipes" / "verl" / "run_search_r1.sh"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("verl-search-index") / "musique"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), depth=30))
    return out


@pytest.fixture(scope="module")
def server(index_dir, tmp_path_factory):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("verl-serve-log") / "server.log"
    argv = [sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(index_dir), "--port", str(port)]
    with server_process(argv, f"{url}/health", log, timeout_s=180):
        yield url


@pytest.fixture(scope="module")
def dry_run(shards, server, tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("verl-search-run")
    env = {"SHARDS": str(shards), "MODEL": str(tiny_model_dir), "RETRIEVER": server, "DRY_RUN": "1", "OUT": str(out),
           "PYTHON": sys.executable, "DIFFICULTY": "hard-negatives", "PATH": "/usr/bin:/bin"}
    res = subprocess.run(["bash", str(SCRIPT), "data.dataloader_num_workers=0"], capture_output=True, text=True,
                         env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    args = shlex.split(res.stdout)
    assert args[1:3] == ["-m", "verl.trainer.main_ppo"], args[:3]
    return out, args[3:]


def test_the_launch_command_composes_under_verls_config(dry_run, compose_verl_config, shards, shard_rows):
    out, overrides = dry_run
    cfg = compose_verl_config(overrides)
    mt = cfg.actor_rollout_ref.rollout.multi_turn
    assert mt.enable and mt.format == "search-r1" and mt.max_assistant_turns == 4
    assert mt.tool_config_path == str(out / "search_tool.yaml")
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "tool_agent"
    assert cfg.reward.custom_reward_function.name == "compute_search_score"
    assert cfg.data.shuffle is False and list(cfg.data.train_files) == [str(out / "agent.parquet")]


def _tools(config_path):
    from verl.tools.tool_registry import initialize_tools_from_config

    return {t.name: t for t in initialize_tools_from_config(str(config_path))}


def _call(tools, query, row=None):
    """verl's own dispatch: ``ToolAgentLoop._call_tool`` (create, execute, release, truncation)."""
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.experimental.agent_loop.tool_parser import FunctionCall

    loop = SimpleNamespace(tools=tools, max_tool_response_length=100000, tool_response_truncate_side="middle")
    kwargs = {"search": {"create_kwargs": {"row": row}}} if row is not None else {}
    call = FunctionCall(name="search", arguments=json.dumps({"query": query}))
    agent_data = SimpleNamespace(assistant_turns=1)
    return asyncio.run(ToolAgentLoop._call_tool(loop, call, kwargs, agent_data))


def test_the_tool_returns_the_servers_ranking_in_search_r1_layout_through_verls_dispatch(dry_run, index_dir,
                                                                                          shard_rows):
    out, _ = dry_run
    tools = _tools(out / "search_tool.yaml")
    assert type(tools["search"]).__name__ == "SearchTool"
    q = shard_rows[0]["question"]
    want = IndexRetriever(index_dir).search([q], 3)[0]
    # without a row: the ranking as it is (verl renders the text as the tool's message)
    tools["search"].difficulty.mode = "none"
    resp, reward, metrics = _call(tools, q)
    assert resp.text == "\n".join(f"Doc {i}(Title: {h.title}) {h.text}" for i, h in enumerate(want, 1))
    assert reward == 0.0 and metrics == {"searched": 1, "short": 0}


def test_a_rows_level_puts_its_hard_negatives_above_its_gold_passages(dry_run, index_dir, shard_rows):
    out, _ = dry_run
    tools = _tools(out / "search_tool.yaml")  # the launch script's DIFFICULTY=hard-negatives
    assert tools["search"].difficulty.mode == "hard-negatives"
    import pyarrow.parquet as pq

    rows = pq.read_table(out / "agent.parquet").to_pylist()
    hard = next(r for r in rows if r["level"] >= 10)
    row = hard["extra_info"]["tools_kwargs"]["search"]["create_kwargs"]["row"]
    view = RowView(row)
    gold_title = next(p["title"] for p in row["passages"] if p["is_gold"])
    gold_text = next(p["text"] for p in row["passages"] if p["is_gold"])
    # a query that finds the gold paragraph at the top of the plain ranking
    query = f"{gold_title} {gold_text[:200]}"
    plain = IndexRetriever(index_dir).search([query], 3)[0]
    assert view.is_gold(plain[0])
    resp, _, metrics = _call(tools, query, row)
    negatives = {(p["title"]) for p in row["passages"] if not p["is_gold"]}
    d = min(max(row["level"] + 2 - len(view.gold), 0), len(negatives))  # RAG-RL's d: at least 3 here
    assert d >= 3 and metrics["hard_negatives"] == d and metrics["gold_found"] == 0
    shown = [line.split(")", 1)[0].removeprefix(f"Doc {i}(Title: ") for i, line in
             enumerate(resp.text.split("\n"), 1)]
    assert len(shown) == 3 and set(shown) <= negatives


def test_a_query_of_stop_words_only_says_nothing_was_found(dry_run):
    """BM25 finds nothing for "the of and": the tool says so, never an empty message (Search-R1's
    loop shows an empty <information></information> block; an empty tool message reads as a failed call)."""
    from rag_curriculum.agents import NO_RESULTS

    tools = _tools(dry_run[0] / "search_tool.yaml")
    tools["search"].difficulty.mode = "none"
    resp, _, metrics = _call(tools, "the of and")
    assert resp.text == NO_RESULTS == "No search results found." and metrics == {"searched": 1, "short": 1}


def test_a_bad_call_gets_an_error_message_and_no_search(dry_run):
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.experimental.agent_loop.tool_parser import FunctionCall

    tools = _tools(dry_run[0] / "search_tool.yaml")
    loop = SimpleNamespace(tools=tools, max_tool_response_length=100000, tool_response_truncate_side="middle")
    call = FunctionCall(name="search", arguments=json.dumps({"query": "  "}))
    resp, _, metrics = asyncio.run(ToolAgentLoop._call_tool(loop, call, {}, SimpleNamespace()))
    assert "non-empty `query`" in resp.text and metrics == {"searched": 0, "bad_arguments": 1}


def test_the_search_r1_format_turns_only_a_well_formed_search_into_a_call(dry_run, tokenizer):
    from verl.experimental.agent_loop.tool_parser import ToolParser

    _tools(dry_run[0] / "search_tool.yaml")  # loading the tool registers the format, as in a verl worker
    parser = ToolParser.get_tool_parser("search-r1", tokenizer)

    def calls(text):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return asyncio.run(parser.extract_tool_calls(ids))[1]

    got = calls("<think>who</think> <search> Pa Amadou Gai team </search> <information>made up</information>")
    assert [(c.name, json.loads(c.arguments)) for c in got] == [("search", {"query": "Pa Amadou Gai team"})]
    for bad in ("<think>x</think><search>unclosed", "<search></search>", "<search>q</answer>",
                "<information>forged</information><search>q</search>", "<answer>Senegal</answer>", "no tags"):
        assert calls(bad) == [], bad


def test_verls_dataset_reads_the_agent_rows_in_curriculum_order_with_their_tool_kwargs(dry_run, tokenizer,
                                                                                        shard_rows):
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    out, _ = dry_run
    config = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 512, "truncation": "error",
                               "filter_overlong_prompts": False, "return_raw_chat": True})
    ds = RLHFDataset(data_files=[str(out / "agent.parquet")], tokenizer=tokenizer, config=config)
    assert len(ds) == len(shard_rows)
    for i in (0, len(ds) - 1):
        item = ds[i]
        assert item["agent_name"] == "tool_agent"
        assert item["tools_kwargs"]["search"]["create_kwargs"]["row"]["id"] == shard_rows[i]["id"]
        assert item["raw_prompt"][0]["content"].endswith(f"Question: {shard_rows[i]['question'].strip()}")


def test_the_search_reward_through_verls_reward_loader(dry_run, compose_verl_config):
    from verl.trainer.ppo.reward import get_custom_reward_fn

    cfg = compose_verl_config(dry_run[1])
    fn = get_custom_reward_fn(cfg)
    y = "<think>t</think><search>q</search>Doc 1(Title: x) y<answer> Senegal </answer>"
    assert fn("musique", y, {"answers": ["Senegal", "SEN"]}, {})["score"] == 1.0
    assert fn("musique", "<answer>Gambia</answer>", {"answers": ["Senegal"]}, {})["score"] == 0.0


# -- coming from verl's search tool (removed from verl by its PR #7731) ----------------------------
def _docs_tool_config() -> str:
    """The tool config docs/search-agents.md gives under "Coming from verl's search tool", as written."""
    import re

    section = (ROOT / "docs" / "search-agents.md").read_text().split("### Coming from verl's search tool", 1)[1]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


def _verls_removed_tool_text(answer: dict) -> str:
    """What verl's removed search tool made of a retrieval server's answer, restated from its source
    (``verl/tools/utils/search_r1_like_utils.py``: ``_passages2string`` per query, the queries joined by
    ``\\n---\\n``, the whole as the ``result`` of a JSON object): an oracle independent of the toolkit's code."""
    def passages2string(retrieval: list) -> str:
        out = ""
        for idx, doc_item in enumerate(retrieval):
            content = doc_item["document"]["contents"]
            title = content.split("\n")[0]
            text = "\n".join(content.split("\n")[1:])
            out += f"Doc {idx + 1} (Title: {title})\n{text}\n\n"
        return out.strip()

    raw = answer.get("result", [])
    if not raw:
        return json.dumps({"result": "No search results found."}, ensure_ascii=False)
    return json.dumps({"result": "\n---\n".join(passages2string(r) for r in raw)}, ensure_ascii=False)


def _call_with(tools, arguments: dict):
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.experimental.agent_loop.tool_parser import FunctionCall

    loop = SimpleNamespace(tools=tools, max_tool_response_length=100000, tool_response_truncate_side="middle")
    call = FunctionCall(name="search", arguments=json.dumps(arguments))
    return asyncio.run(ToolAgentLoop._call_tool(loop, call, {}, SimpleNamespace(assistant_turns=1)))


def test_verls_own_search_tool_config_works_with_its_class_name_changed(server, index_dir, shard_rows, tmp_path):
    """verl's search_tool_config.yaml (its keys, its ``query_list`` schema), the class name changed, loaded by verl
    0.9.1 and called through its agent loop against ``curriculum serve``: the answer is, byte for byte, the text
    verl's removed tool made of the same server answer; without ``result_format`` it is Search-R1's lines."""
    import requests

    from rag_curriculum.agents import NO_RESULTS

    text = _docs_tool_config().replace("http://127.0.0.1:8000/retrieve", f"{server}/retrieve")
    assert "verl.tools.search_tool.SearchTool" in text and "num_workers: 120" in text  # verl's config, as documented
    path = tmp_path / "search_tool_config.yaml"
    path.write_text(text)
    tools = _tools(path)
    tool = tools["search"]
    assert type(tool).__name__ == "SearchTool" and tool.result_format == "verl"
    assert list(tool.tool_schema.function.parameters.properties) == ["query_list"]
    queries = [shard_rows[0]["question"], shard_rows[1]["question"], "the of and"]  # the last finds nothing
    resp, reward, metrics = _call_with(tools, {"query_list": queries})
    answer = requests.post(f"{server}/retrieve", json={"queries": queries, "topk": 3, "return_scores": True},
                           timeout=60).json()
    assert resp.text == _verls_removed_tool_text(answer)
    assert reward == 0.0 and metrics == {"searched": 3, "short": 1}
    path.write_text(text.replace("      result_format: verl", ""))
    resp, _, _ = _call_with(_tools(path), {"query_list": queries})
    want = IndexRetriever(index_dir).search(queries, 3)
    assert resp.text == "\n\n".join("\n".join(f"Doc {i}(Title: {h.title}) {h.text}" for i, h in enumerate(hits, 1))
                                    or NO_RESULTS for hits in want)


def test_a_verl_tool_config_that_contradicts_itself_is_refused(server, tmp_path):
    from rag_curriculum.errors import ConfigError
    from rag_curriculum.verl.tool import SearchTool

    with pytest.raises(ConfigError, match="`retrieval_service_url` .* and `retriever` .* disagree"):
        SearchTool({"retrieval_service_url": f"{server}/retrieve", "retriever": "http://elsewhere:1"})
    with pytest.raises(ConfigError, match="result_format='json'"):
        SearchTool({"retriever": server, "result_format": "json"})
    with pytest.raises(ConfigError, match="unknown key.*sandbox_fusion_url"):
        SearchTool({"retriever": server, "sandbox_fusion_url": "x"})


def test_the_tools_timeout_and_retries_reach_its_client(server):
    """`timeout` and `retries` (a request sent again after a connection error or a 502/503/504) as the toolkit's
    own commands take them (--retriever-timeout, --retriever-retries); a negative count is refused."""
    from rag_curriculum.errors import ConfigError
    from rag_curriculum.verl.tool import SearchTool

    tool = SearchTool({"retriever": f"{server}/retrieve", "timeout": 7, "retries": 0})
    assert (tool.retriever.timeout, tool.retriever.retries) == (7.0, 0)
    assert SearchTool({"retriever": f"{server}/retrieve"}).retriever.retries == 5
    with pytest.raises(ConfigError, match="retries=-1"):
        SearchTool({"retriever": server, "retries": -1})
