"""The VERITAS judge on the real vLLM engine (the paper's setting: its reward model served by vLLM), in process:
the prompts are the paper's, k-vote samples k replies per pair in one batched call, each verdict is the vote of
what the replies read as, and the cache keeps the engine from being asked twice."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="the vLLM tier runs in .venv-vllm (bash scripts/test.sh makes it)")

from rag_curriculum._plumbing import derive_seed  # noqa: E402
from rag_curriculum.generation import SamplingConfig  # noqa: E402
from rag_curriculum.methods.veritas._reward import VeritasJudge, VeritasReward, read_label, trajectory_pairs  # noqa: E402

TRAJ = (
    "<think>Who directed Jaws?</think><search>Jaws director</search>\n\n<information>Doc 1(Title: Jaws) Jaws "
    "was directed by Steven Spielberg.</information>\n\n<think>So it is Spielberg.</think><search>Spielberg "
    "birthplace</search>\n\n<information>Doc 1(Title: Spielberg) Born in Cincinnati.</information>\n\n<think>"
    "Cincinnati.</think><answer>Cincinnati</answer>"
)


def test_the_judge_on_the_vllm_engine(engine, tmp_path):
    class Counting:  # the engine, counting the prompts it is sent
        def __init__(self):
            self.sent = []

        def generate(self, prompts, sampling, **kw):
            self.sent.append((prompts, sampling))
            return engine.generate(prompts, sampling, **kw)

    backend = Counting()
    judge = VeritasJudge(
        backend=backend, votes=3, temperature=1.0, max_tokens=4, seed=5, cache_dir=str(tmp_path / "cache")
    )
    pairs = trajectory_pairs(TRAJ)
    verdicts = judge.judge(pairs)
    ((prompts, sampling),) = backend.sent  # one batched call for the four pairs
    assert len(prompts) == 4 and sampling.n == 3 and sampling.temperature == 1.0
    assert [p[0]["content"] for p in prompts] == [judge.messages(p)[0]["content"] for p in pairs]
    seeds = [derive_seed(5, judge.key(p), bits=63) for p in prompts]  # per pair, from its content
    again = engine.generate(prompts, SamplingConfig(n=3, temperature=1.0, max_tokens=4, seed=5), seeds=seeds)
    for v, replies in zip(verdicts, again, strict=True):
        assert list(v.replies) == replies  # the engine's own samples for those seeds
        readable = [read_label(r) for r in replies if read_label(r) is not None]
        want = None if not readable else (1.0 if 2 * sum(readable) > len(readable) else 0.0)
        assert v.score == want
    reward = VeritasReward(
        judge=VeritasJudge(
            backend=backend, votes=3, temperature=1.0, max_tokens=4, seed=5, cache_dir=str(tmp_path / "cache")
        ),
        think_search=True,
    )
    b = reward.score(TRAJ, ["Cincinnati"])
    assert len(backend.sent) == 1  # every verdict from the cache
    it = [
        0.0 if v.score is None else v.score
        for v, p in zip(verdicts, pairs, strict=True)
        if p.kind == "info_think"
    ]
    assert b.info_think == pytest.approx(sum(it) / len(it)) and b.em == 1.0 and b.think_answer == 1.0
