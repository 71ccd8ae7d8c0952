"""The search environment's rollout loop on the real MuSiQue curriculum rows and a real BM25 index of the same file:
what the model sees after a search is exactly the index's ranking in Search-R1's layout, gold flags are right, format
errors are typed and never answered, budgets end trajectories visibly; difficulty shapes the results as documented;
the HTTP retriever's failures are one clear error."""

from __future__ import annotations

import http.server
import json
import threading

import pytest
from conftest import MUSIQUE_TRAIN

from rag_curriculum.agents import (
    INVALID_ACTION,
    Hit,
    HttpRetriever,
    IndexRetriever,
    RetrieverError,
    RolloutConfig,
    RowView,
    SearchDifficulty,
    run_rollouts,
    summarize,
)
from rag_curriculum.generation import SamplingConfig
from rag_curriculum.generation._scripted import ScriptedBackend
from rag_curriculum.grammar import information_block

pytest.importorskip("bm25s", reason="the retrieval extra is needed for the index")

SAMPLING = SamplingConfig(n=1, temperature=1.0, max_tokens=64, seed=0)


@pytest.fixture(scope="module")
def index(tmp_path_factory, shared_data):
    from rag_retriever import IndexConfig, build_index, load_index

    out = tmp_path_factory.mktemp("agent-index") / "musique"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), depth=20))
    return load_index(out)


def _question(messages):
    return messages[0]["content"].rsplit("Question: ", 1)[1].strip()


def search_then_answer(messages, n, seed):
    """A policy: search the question, then answer with the first retrieved title."""
    if messages[-1]["role"] == "user":
        return f"<think>I need to look this up.</think>\n<search> {_question(messages)} </search> overshoot"
    info = messages[-1]["content"].rsplit("<information>", 1)[1]
    title = info.split("(Title: ", 1)[1].split(")", 1)[0]
    return f"<think>Doc 1 says so.</think>\n<answer> {title} </answer>"


@pytest.mark.slow
def test_search_results_are_the_index_ranking_in_search_r1_layout(index, min_max_rows):
    rows = min_max_rows[:6]
    trajs = run_rollouts(ScriptedBackend(script=search_then_answer), rows, IndexRetriever(index), SAMPLING, n=2,
                         config=RolloutConfig(top_k=3))
    assert len(trajs) == 12 and [t.row_id for t in trajs] == [r["id"] for r in rows for _ in range(2)]
    for t, row in zip(trajs, [r for r in rows for _ in range(2)], strict=True):
        assert t.status == "answer" and t.turns == 2 and t.errors == []
        assert [s.source for s in t.segments] == ["model", "env", "model"]
        assert t.segments[0].text.endswith("</search>")  # cut at the stop string
        (call,) = t.searches
        assert call.query == row["question"].strip()
        want = index.retrieve(row["question"].strip(), 3)
        assert call.ids == [str(pid) for pid, _ in want]
        # the block is the index's passages, in rank order, in Search-R1's layout
        assert t.segments[1].text == information_block([index.passage(pid) for pid, _ in want])
        gold = {(p["title"], p["text"]) for p in row["passages"] if p["is_gold"]}
        assert call.gold == [index.passage(pid) in gold for pid, _ in want]
        assert t.answer == index.passage(want[0][0])[0]
        assert t.text == "".join(s.text for s in t.segments)
    s = summarize(trajs)
    assert s["status"] == {"answer": 12} and s["searches_per_trajectory"] == 1.0 and s["format_errors"] == {}
    assert s["gold_found"] == sum(any(c.gold) for t in trajs for c in t.searches) / 12
    assert 0 < s["gold_found"]  # BM25 on the question finds a gold paragraph of some MuSiQue questions


def test_a_malformed_search_is_an_error_type_never_a_silent_answer(index, min_max_rows):
    def planted(messages, n, seed):
        return "<think>x</think><search> who directed Alien </answer>"

    trajs = run_rollouts(ScriptedBackend(script=planted), min_max_rows[:2], IndexRetriever(index), SAMPLING,
                         config=RolloutConfig(max_turns=3))
    for t in trajs:
        assert t.answer is None and t.searches == [] and t.status == "turn_budget"
        assert t.errors == ["malformed_tag"] * 3
        assert [s.text for s in t.segments if s.source == "env"] == [INVALID_ACTION] * 2
    stopped = run_rollouts(ScriptedBackend(script=planted), min_max_rows[:2], IndexRetriever(index), SAMPLING,
                           config=RolloutConfig(on_invalid="stop"))
    assert [(t.status, t.turns, t.answer) for t in stopped] == [("format_error", 1, None)] * 2


def test_turn_and_context_budgets_end_trajectories_visibly(index, min_max_rows):
    def always_search(messages, n, seed):
        return "<search> Green </search>"

    rows = min_max_rows[:2]
    trajs = run_rollouts(ScriptedBackend(script=always_search), rows, IndexRetriever(index), SAMPLING,
                         config=RolloutConfig(max_turns=3))
    # two searches executed, the third turn's search is not (the budget), and that is recorded
    assert [(t.status, len(t.searches), t.turns) for t in trajs] == [("turn_budget", 2, 3)] * 2
    small = run_rollouts(ScriptedBackend(script=always_search), rows, IndexRetriever(index), SAMPLING,
                         config=RolloutConfig(max_turns=10, max_context_tokens=200))
    for t in small:
        assert t.status == "context_budget" and t.answer is None and len(t.searches) < 9
    assert summarize(small)["status"] == {"context_budget": 2}


def test_the_same_seed_gives_the_same_trajectories(index, min_max_rows):
    import random

    def noisy(messages, n, seed):
        r = random.Random(seed)
        if messages[-1]["role"] == "user" and r.random() < 0.7:
            return f"<search> {r.choice(['Green', 'river', 'county', 'album'])} </search>"
        return f"<answer> {r.randint(0, 9)} </answer>"

    rows = min_max_rows[:5]
    a = run_rollouts(ScriptedBackend(script=noisy), rows, IndexRetriever(index), SAMPLING, n=3)
    b = run_rollouts(ScriptedBackend(script=noisy), rows, IndexRetriever(index), SAMPLING, n=3)
    assert [x.to_dict() for x in a] == [x.to_dict() for x in b]
    assert len({x.text for x in a}) > 3  # samples differ: each trajectory has its own seed


def test_a_backend_without_stop_is_refused(index, min_max_rows):
    class Plain:
        name = "plain"

        def generate(self, prompts, sampling):
            return [["<answer>x</answer>"] for _ in prompts]

    from rag_curriculum.errors import ConfigError

    with pytest.raises(ConfigError, match="cannot stop at </search>"):
        run_rollouts(Plain(), min_max_rows[:1], IndexRetriever(index), SAMPLING)


# -- difficulty -------------------------------------------------------------------------------------------------
def _row(level, gold=2, negatives=6):
    passages = [{"title": f"G{i}", "text": f"gold {i}", "is_gold": True} for i in range(gold)]
    passages += [{"title": f"N{i}", "text": f"negative {i}", "is_gold": False} for i in range(negatives)]
    return RowView({"id": "r", "question": "q?", "answers": ["a"], "level": level, "passages": passages})


def _hits(*names):
    return [Hit(n, n, ("gold " if n.startswith("G") else "negative " if n.startswith("N") else "other ") + n[1:])
            for n in names]


def test_hard_negatives_sit_above_the_first_gold_passage_by_the_paper_formula():
    import random

    hits = _hits("X1", "G0", "N3", "X2", "G1", "X3", "X4", "X5")
    rng = random.Random(0)
    # level 1, j = 2: d = 1; the negative the query ranks highest (N3) goes above the first gold passage
    shown, info = SearchDifficulty("hard-negatives").apply(hits, 3, _row(1), rng)
    assert [h.title for h in shown] == ["X1", "N3", "G0"] and info == {"hard_negatives": 1}
    # level 3: d = 3: N3, then the row's order (N0, N1)
    shown, info = SearchDifficulty("hard-negatives").apply(hits, 5, _row(3), rng)
    assert [h.title for h in shown] == ["X1", "N3", "N0", "N1", "G0"] and info == {"hard_negatives": 3}
    # level 20: d = min(20, 6) = 6: the gold is pushed out of a top-3 list
    shown, _ = SearchDifficulty("hard-negatives").apply(hits, 3, _row(20), rng)
    assert not any(h.title.startswith("G") for h in shown)
    # no gold in the ranking: nothing to push down
    shown, info = SearchDifficulty("hard-negatives").apply(_hits("X1", "X2", "X3"), 3, _row(5), rng)
    assert [h.title for h in shown] == ["X1", "X2", "X3"] and info == {"hard_negatives": 0}


def test_withholding_gold_with_probability_p():
    import random

    hits = _hits("G0", "X1", "G1", "X2", "X3")
    shown, info = SearchDifficulty("withhold", p=1.0).apply(hits, 3, _row(1), random.Random(0))
    assert [h.title for h in shown] == ["X1", "X2", "X3"] and info == {"withheld": 2, "p": 1.0}
    shown, info = SearchDifficulty("withhold", p=0.0).apply(hits, 3, _row(1), random.Random(0))
    assert [h.title for h in shown] == ["G0", "X1", "G1"] and info["withheld"] == 0
    rates = [SearchDifficulty("withhold", p=0.3).apply(hits, 3, _row(1), random.Random(s))[1]["withheld"] > 0
             for s in range(2000)]
    assert 0.26 < sum(rates) / len(rates) < 0.34


def test_difficulty_in_the_loop_is_recorded_per_search(index, min_max_rows):
    rows = [r for r in min_max_rows if r["level"] > 1][:4]
    trajs = run_rollouts(ScriptedBackend(script=search_then_answer), rows, IndexRetriever(index), SAMPLING,
                         difficulty=SearchDifficulty("withhold", p=1.0))
    for t in trajs:
        assert t.searches[0].gold == [False] * len(t.searches[0].gold)
        assert t.searches[0].shaped["p"] == 1.0


# -- the HTTP retriever's failures ------------------------------------------------------------------------------
def test_unreachable_server_is_one_error_naming_the_url():
    from support.servers import free_port

    url = f"http://user:secret@127.0.0.1:{free_port()}/retrieve"
    r = HttpRetriever(url, retries=2, backoff=0.01, timeout=2)
    with pytest.raises(RetrieverError, match=r"127\.0\.0\.1:\d+/retrieve unreachable") as e:
        r.search(["q"], 3)
    assert "secret" not in str(e.value)


@pytest.mark.parametrize("body,match", [
    (b"not json", "not Search-R1's"),
    (json.dumps({"results": []}).encode(), "not Search-R1's"),
    (json.dumps({"result": [[]]}).encode(), "1 result list"),  # two queries asked
    (json.dumps({"result": [[{"document": {"id": 1}}], []]}).encode(), "no document.contents"),
])
def test_malformed_server_responses_are_refused(body, match):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        r = HttpRetriever(f"http://127.0.0.1:{server.server_address[1]}", retries=0)
        with pytest.raises(RetrieverError, match=match):
            r.search(["q1", "q2"], 3)
    finally:
        server.shutdown()
        server.server_close()


def test_fewer_passages_than_asked_are_counted_as_short(min_max_rows):
    class Two:
        def search(self, queries, k):
            return [[Hit("1", "A", "a"), Hit("2", "B", "b")] for _ in queries]

        def describe(self):
            return {"kind": "two"}

    def once(messages, n, seed):
        return "<search>q</search>" if messages[-1]["role"] == "user" else "<answer>A</answer>"

    trajs = run_rollouts(ScriptedBackend(script=once), min_max_rows[:3], Two(), SAMPLING)
    assert all(t.searches[0].short and t.status == "answer" for t in trajs)
    assert summarize(trajs)["short_results"] == 3
