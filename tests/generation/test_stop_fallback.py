"""A tokenizer whose vocabulary transformers' stop strings cannot read (a WordLevel one: "substring not found")
still stops at the protocol's stop strings, on the decoded text: in the transformers backend
(eval and partition) and in the training rollout's backend, on a real tiny model; and eval --agent runs on it."""

from __future__ import annotations

import logging

import pytest
from support.tiny_model import ForceAt
from typer.testing import CliRunner

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def wordlevel_dir(tmp_path_factory, shared_data):
    from support.tiny_model import build_wordlevel_model

    return build_wordlevel_model(tmp_path_factory.mktemp("wordlevel") / "m", shared_data)


def test_transformers_stop_strings_cannot_read_this_tokenizer(wordlevel_dir):
    """The premise: transformers' own criterion refuses the tokenizer."""
    from transformers import AutoTokenizer, StopStringCriteria

    with pytest.raises(ValueError, match="substring not found"):
        StopStringCriteria(AutoTokenizer.from_pretrained(str(wordlevel_dir)), ["</search>"])


def test_both_backends_stop_on_the_decoded_text(wordlevel_dir, caplog):
    from transformers import LogitsProcessorList

    from rag_curriculum.generation import SamplingConfig
    from rag_curriculum.generation._hf_backend import TransformersBackend
    from rag_curriculum.train import PolicyBackend, TurnSampling

    hf = TransformersBackend(str(wordlevel_dir), device="cpu")
    tok, model = hf.tokenizer, hf.model
    close = tok.convert_tokens_to_ids("</search>")
    messages = [{"role": "user", "content": "who founded the city"}]
    start = len(hf.render(messages))
    original = model.generate
    lengths = []

    def generate(**kw):  # the model writes </search> as its third token
        out = original(**kw, logits_processor=LogitsProcessorList([ForceAt(start, {2: close})]))
        lengths.append(out.shape[1] - start)
        return out

    model.generate = generate
    with caplog.at_level(logging.WARNING):
        text = hf.generate([messages], SamplingConfig(n=1, temperature=1.0, max_tokens=12, seed=0),
                           stop=["</search>"])[0][0]
    assert text.endswith("</search>") and lengths == [3]  # stopped right after it, not at the budget
    assert any("stopping on the decoded text" in r.getMessage() for r in caplog.records)
    policy = PolicyBackend(model, tok)
    assert len(policy.prompt_ids(messages)) == start
    text = policy.generate([messages], TurnSampling(max_tokens=12, seed=0), stop=["</search>"])[0][0]
    assert text.endswith("</search>") and lengths[-1] == 3


@pytest.mark.slow
def test_eval_agent_runs_on_it(wordlevel_dir, tmp_path, min_max_shards):
    pytest.importorskip("bm25s")
    from conftest import MUSIQUE_TRAIN
    from rag_retriever import IndexConfig, build_index

    from rag_curriculum.cli import app

    index = tmp_path / "ix"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(index), depth=5))
    r = CliRunner().invoke(app, ["eval", "--agent", "search-r1", "--retriever", str(index), "--backend",
                                 "transformers", "--model", f"w={wordlevel_dir}", "--data", str(min_max_shards),
                                 "--limit", "2", "--max-tokens", "8", "--max-turns", "2", "--out",
                                 str(tmp_path / "ev"), "--no-progress"])
    assert r.exit_code == 0, r.output
