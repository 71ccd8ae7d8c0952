"""The rollout loop on a real model (the tiny random Qwen2-style one, transformers backend): the first turn's search
is forced by a scripted prefix, then the real model continues the conversation *after* the ``<information>`` block
(the chat template's ``continue_final_message``: no new turn opened, nothing of the trajectory dropped), stopping at
the protocol's stop strings or its token budget; whatever it writes is classified, never silently answered."""

from __future__ import annotations

import pytest
from conftest import MUSIQUE_TRAIN

from rag_curriculum.agents import IndexRetriever, RolloutConfig, run_rollouts, summarize
from rag_curriculum.generation import SamplingConfig

pytestmark = pytest.mark.slow
pytest.importorskip("transformers")
pytest.importorskip("bm25s")


class ForcedFirstTurn:
    """Turn 0 scripted (a search for the question), later turns the real model."""

    name = "forced"

    def __init__(self, real):
        self.real = real
        self.tokenizer = real.tokenizer
        self.continued: list[list[dict]] = []

    def generate(self, prompts, sampling, *, seeds=None, stop=None):
        out: list = [None] * len(prompts)
        later = [i for i, p in enumerate(prompts) if p[-1]["role"] == "assistant"]
        for i, p in enumerate(prompts):
            if p[-1]["role"] == "user":
                q = p[0]["content"].rsplit("Question: ", 1)[1]
                out[i] = [f"<think>search first</think><search> {q} </search>"]
        if later:
            self.continued += [prompts[i] for i in later]
            got = self.real.generate([prompts[i] for i in later], sampling, seeds=[seeds[i] for i in later],
                                     stop=stop)
            for i, g in zip(later, got, strict=True):
                out[i] = g
        return out


def test_real_model_continues_after_the_information_block(tiny_model_dir, tmp_path, min_max_rows):
    from rag_retriever import IndexConfig, build_index, load_index

    from rag_curriculum.generation._hf_backend import TransformersBackend

    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(tmp_path / "ix"), depth=10))
    index = load_index(tmp_path / "ix")
    real = TransformersBackend(str(tiny_model_dir), device="cpu", batch_size=4)
    backend = ForcedFirstTurn(real)
    rows = min_max_rows[:3]
    sampling = SamplingConfig(n=1, temperature=1.0, max_tokens=24, seed=0)
    trajs = run_rollouts(backend, rows, IndexRetriever(index), sampling, n=2,
                         config=RolloutConfig(top_k=2, max_turns=3))
    assert len(trajs) == 6
    for t in trajs:
        assert t.segments[0].source == "model" and t.segments[1].source == "env"
        assert len(t.searches) >= 1 and t.turns >= 2
        assert t.status in ("answer", "turn_budget", "context_budget")
        if t.status != "answer":
            assert t.answer is None
    # what the real model was given: the whole trajectory, continued in the assistant's open turn
    tok = real.tokenizer
    for conv in backend.continued:
        # the text the model is given (string level: a decode of byte-level tokens need not round-trip the
        # random model's broken UTF-8)
        rendered = tok.apply_chat_template(conv, continue_final_message=True, tokenize=False)
        assert rendered.endswith(conv[-1]["content"])
        assert rendered.count("<|im_start|>assistant") == 1  # no second turn was opened
        assert real.render(conv) == tok(rendered, add_special_tokens=False)["input_ids"]
        assert "<information>" in conv[-1]["content"]
    # the random model's turns are parsed like any other: the summary counts every trajectory
    s = summarize(trajs)
    assert sum(s["status"].values()) == 6
    # with the same seeds, the same trajectories
    again = run_rollouts(ForcedFirstTurn(real), rows, IndexRetriever(index), sampling, n=2,
                         config=RolloutConfig(top_k=2, max_turns=3))
    assert [t.text for t in again] == [t.text for t in trajs]


def test_stop_strings_end_a_real_models_turn(tiny_model_dir):
    """The transformers backend stops at a stop string and keeps it (stop strings that a random model hits often:
    common letters), with nothing after the first one."""
    from rag_curriculum.generation._hf_backend import TransformersBackend

    real = TransformersBackend(str(tiny_model_dir), device="cpu", batch_size=8)
    prompts = [[{"role": "user", "content": f"question {i}"}] for i in range(8)]
    out = real.generate(prompts, SamplingConfig(n=1, temperature=1.0, max_tokens=40, seed=1),
                        seeds=list(range(8)), stop=["e", "a"])  # common letters: most completions stop early
    texts = [o[0] for o in out]
    for t in texts:
        cut = [i for i in (t.find("e"), t.find("a")) if i >= 0]
        if cut:
            assert len(t) == min(cut) + 1, t
    assert sum(t.endswith(("e", "a")) for t in texts) >= 4
