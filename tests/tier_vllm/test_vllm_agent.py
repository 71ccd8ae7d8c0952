"""The search environment on the real vLLM engine: a trajectory is continued exactly as ``LLM.chat`` continues a
final assistant message (same token ids, same samples), turns stop at the protocol's stop strings and keep them,
and the rollout loop runs multi-turn with per-trajectory seeds (the first turn's search forced by a script, as a
random model writes none)."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="the vLLM tier runs in .venv-vllm (bash scripts/test.sh makes it)")

from rag_curriculum.agents import Hit, RolloutConfig, run_rollouts, summarize  # noqa: E402
from rag_curriculum.generation import SamplingConfig  # noqa: E402
from rag_curriculum.grammar import STOP  # noqa: E402

CONVERSATIONS = [
    [{"role": "user", "content": f"Answer the given question. Question: who wrote book {i}?"},
     {"role": "assistant", "content": f"<think>search</think><search> book {i} </search>\n\n<information>Doc 1"
                                      f"(Title: Book {i}) Book {i} was written by someone.</information>\n\n"}]
    for i in range(6)
]


def test_a_trajectory_is_continued_exactly_as_llm_chat_continues_it(engine):
    s = SamplingConfig(n=2, temperature=1.0, max_tokens=12)
    seeds = [7 + i for i in range(len(CONVERSATIONS))]
    ours = engine.generate(CONVERSATIONS, s, seeds=seeds)
    ref = engine.llm.chat(CONVERSATIONS, [engine.sampling_params(s, sd) for sd in seeds], use_tqdm=False,
                          continue_final_message=True, add_generation_prompt=False)
    assert [list(o.prompt_token_ids) for o in ref] == engine.render(CONVERSATIONS)
    assert [[c.text for c in sorted(o.outputs, key=lambda c: c.index)] for o in ref] == ours
    tok = engine.tokenizer
    for conv, ids in zip(CONVERSATIONS, engine.render(CONVERSATIONS), strict=True):
        text = tok.decode(ids)
        assert text.endswith(conv[-1]["content"])  # nothing of the trajectory dropped, no new turn opened
        assert text.count("<|im_start|>assistant") == 1


def test_turns_stop_at_the_stop_strings_and_keep_them(engine):
    prompts = [[{"role": "user", "content": f"question {i}"}] for i in range(8)]
    out = engine.generate(prompts, SamplingConfig(n=1, temperature=1.0, max_tokens=40), seeds=list(range(8)),
                          stop=["e", "a"])  # common letters: most completions stop early
    texts = [o[0] for o in out]
    for t in texts:
        cut = [i for i in (t.find("e"), t.find("a")) if i >= 0]
        if cut:
            assert len(t) == min(cut) + 1, t  # kept, and nothing after it
    assert sum(t.endswith(("e", "a")) for t in texts) >= 4
    p = engine.sampling_params(SamplingConfig(), 1, STOP)
    assert list(p.stop) == list(STOP) and p.include_stop_str_in_output is True


class Passages:
    """A retriever over fixed passages (the vLLM tier has no BM25 index): the query's words against titles."""

    docs = [Hit(str(i), f"Book {i}", f"Book {i} was written by author {i}.") for i in range(10)]

    def search(self, queries, k):
        return [sorted(self.docs, key=lambda h: (h.title.lower() not in q.lower(), h.id))[:k] for q in queries]

    def describe(self):
        return {"kind": "fixed"}


class ForcedFirstTurn:
    name = "forced"

    def __init__(self, real):
        self.real = real
        self.tokenizer = real.tokenizer

    def generate(self, prompts, sampling, *, seeds=None, stop=None):
        out = [None] * len(prompts)
        later = [i for i, p in enumerate(prompts) if p[-1]["role"] == "assistant"]
        for i, p in enumerate(prompts):
            if p[-1]["role"] == "user":
                out[i] = ["<think>search first</think><search> Book 3 </search>"]
        if later:
            got = self.real.generate([prompts[i] for i in later], sampling, seeds=[seeds[i] for i in later],
                                     stop=stop)
            for i, g in zip(later, got, strict=True):
                out[i] = g
        return out


def test_the_rollout_loop_runs_multi_turn_on_the_real_engine(engine):
    rows = [{"id": f"r{i}", "question": f"Who wrote book {i}?", "answers": [f"author {i}"],
             "passages": [{"title": "Book 3", "text": "Book 3 was written by author 3.", "is_gold": True}]}
            for i in range(4)]
    sampling = SamplingConfig(temperature=1.0, max_tokens=16, seed=0)
    cfg = RolloutConfig(top_k=2, max_turns=3)
    a = run_rollouts(ForcedFirstTurn(engine), rows, Passages(), sampling, n=2, config=cfg)
    assert len(a) == 8
    for t in a:
        assert [s.source for s in t.segments][:3] == ["model", "env", "model"]
        assert t.searches[0].ids == ["3", "0"] and t.searches[0].gold == [True, False]
        assert t.status in ("answer", "turn_budget", "context_budget")
    assert len({t.segments[2].text for t in a}) > 1  # each trajectory samples with its own seed
    b = run_rollouts(ForcedFirstTurn(engine), rows, Passages(), sampling, n=2, config=cfg)
    assert [t.to_dict() for t in b] == [t.to_dict() for t in a]
    assert sum(summarize(a)["status"].values()) == 8
