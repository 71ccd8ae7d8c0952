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
