"""A toy method in one folder: a completion ends in ``Final: ANSWER``, and the reward ``toy-final-em`` is 1.0 when
that answer is one of the row's gold answers (SQuAD-normalised); in the search-agent evaluation (``curriculum eval
--agent search-r1 --reward toy-final-em``) it scores every trajectory's answer the same way. Importing the folder
registers them by name."""

import re

from rag_curriculum.agents import TRAJECTORY_REWARDS, AgentEvalPart
from rag_curriculum.rewards import (
    MISSING_TAG,
    OutputFormat,
    ParsedCompletion,
    batch_answers,
    completion_texts,
    exact_match,
    register_format,
    register_reward,
)

FINAL = re.compile(r"Final:\s*(.+?)\s*$")


def parse_final(text, labels=None, *, max_chars=None):
    """The answer after the last ``Final:``; a completion without one breaks the format."""
    m = FINAL.search(text or "")
    if m is None:
        return ParsedCompletion("", (), False, MISSING_TAG, "no Final: line")
    return ParsedCompletion(m.group(1), (), True)


class FinalExact:
    """The reward: 1.0 when the final answer is one of the row's gold answers, else 0.0."""

    def __call__(self, completions, answers=None, reward_model=None, golden_answers=None, **columns):
        texts = completion_texts(completions)
        gold = batch_answers(len(texts), answers, reward_model, golden_answers)
        return [exact_match(parse_final(t).answer, g) for t, g in zip(texts, gold, strict=True)]


class FinalExactOfTrajectories(AgentEvalPart):
    """Its part of the search-agent evaluation: each trajectory's answer (None: 0.0) against the row's answers,
    in each trajectory and the aggregates under ``toy_final_em``."""

    key = "toy_final_em"
    label = "toy EM"

    def trajectory_scores(self, cfg, run):
        return [exact_match(t.answer or "", run.rows[i // run.m]["answers"]) if t.answer is not None else 0.0
                for i, t in enumerate(run.trajs)]


register_format(OutputFormat("toy-final", parse_final))
register_reward("toy-final-em", FinalExact)
TRAJECTORY_REWARDS.register("toy-final-em", FinalExactOfTrajectories())
