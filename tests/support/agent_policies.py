"""Scripted search agents for tests, importable by dotted path (``--backend scripted --model support.agent_policies:NAME``)
as users name their own scripts."""

from __future__ import annotations


def _question(messages):
    return messages[0]["content"].rsplit("Question: ", 1)[1].strip()


def search_then_answer(messages, n, seed):
    """Search the question; then answer with the first retrieved title. Every question whose length is a
    multiple of 3 gets an unclosed search instead (a format error)."""
    q = _question(messages)
    if messages[-1]["role"] == "user":
        if len(q) % 3 == 0:
            return "<think>hmm</think><search> " + q
        return f"<think>look up</think><search> {q} </search>"
    last = messages[-1]["content"]
    title = last.rsplit("(Title: ", 1)[1].split(")", 1)[0] if "(Title: " in last else "nothing"
    return f"<answer> {title} </answer>"


_GOLD: dict[str, str] = {}


def _gold(question):
    """The gold answer of a question of the shared MuSiQue training sample (what an agent that knows it writes)."""
    if not _GOLD:
        import json
        from pathlib import Path

        path = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "musique" / (
            "musique_ans_v1.0_train.sample100.jsonl")
        for line in path.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            _GOLD[r["question"].strip()] = r["answer"]
    return _GOLD[question]


def knows_some(messages, n, seed):
    """An agent whose behaviour depends on ``len(question) % 4`` (the partition test's buckets):

    0: answers right at once, without a search;
    1: searches the question, then answers right;
    2: searches, then answers right when the answering turn's seed is even, else wrong;
    3: answers right at once when the first turn's seed is even, else searches, then answers right."""
    q = _question(messages)
    kind = len(q) % 4
    if messages[-1]["role"] == "user":
        if kind == 0 or (kind == 3 and seed % 2 == 0):
            return f"<think>I know this.</think><answer> {_gold(q)} </answer>"
        return f"<think>look up</think><search> {q} </search>"
    right = kind != 2 or seed % 2 == 0
    return f"<think>found it</think><answer> {_gold(q) if right else 'no idea'} </answer>"


def react_search_then_finish(messages, n, seed):
    """ReAct: Search the question, then Finish with the title the observation starts with. By seed, half of the
    samples are consistent ("The answer is T." then Finish[T]) and half contradict their thought (Finish[something
    else]), so the CRAG-inspired ranking has a choice. Every question whose length is a multiple of 3 first gets a
    malformed action (Search[ unclosed), answered "Invalid action", then searches properly."""
    q = _question(messages)
    if messages[-1]["role"] == "user":
        if len(q) % 3 == 0:
            return f"Thought 1: I search.\nAction 1: Search[{q}\nObservation 1: made up"
        return f"Thought 1: I need to search {q}.\nAction 1: Search[{q}]\nObservation 1: made up"
    text = messages[-1]["content"]
    k = text.count("\nObservation") + 1
    obs = text.rsplit("\nObservation", 1)[1].split(": ", 1)[1]
    if obs.startswith("Invalid action"):
        return f"Thought {k}: I need to search {q} again.\nAction {k}: Search[{q}]\nObservation"
    title = obs.split(": ", 1)[0].strip() if ": " in obs else "nothing"
    answer = title if seed % 2 == 0 else "something else"
    return f"Thought {k}: The answer is {title}.\nAction {k}: Finish[{answer}]"


def closed_book_x(messages, n, seed):
    """Not a search agent: a closed-context (RAG-RL format) completion answering "x" to everything."""
    return ["<reasoning>r</reasoning><answer>Final answer: x\nSupporting passages: 1</answer>"] * n


_ANSWERS: dict[str, str] = {}


def _any_gold(question):
    """The gold answer of a question of the shared HotpotQA or MuSiQue training sample, matched without a trailing
    "?" (Search-R1's data script appends one)."""
    if not _ANSWERS:
        import json
        from pathlib import Path

        data = Path(__file__).resolve().parents[2].parent / "shared" / "data"
        for r in json.loads((data / "hotpotqa" / "hotpot_train_v1.1.sample100.json").read_text(encoding="utf-8")):
            _ANSWERS[r["question"].strip().rstrip("?")] = r["answer"]
        for line in (data / "musique" / "musique_ans_v1.0_train.sample100.jsonl").read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            _ANSWERS[r["question"].strip().rstrip("?")] = r["answer"]
    return _ANSWERS.get(question.strip().rstrip("?"), "no idea")


def search_then_gold(messages, n, seed):
    """Search the question, then answer it right (from the shared samples), except questions of even length,
    answered "no idea"."""
    q = _question(messages)
    if messages[-1]["role"] == "user":
        return f"<think>look up</think><search> {q} </search>"
    return f"<think>found</think><answer> {_any_gold(q) if len(q) % 2 else 'no idea'} </answer>"
