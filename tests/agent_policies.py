"""Scripted search agents for tests, importable by dotted path (``--backend scripted --model agent_policies:NAME``)
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
