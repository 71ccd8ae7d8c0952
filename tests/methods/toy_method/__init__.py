"""A toy method in one folder: a completion ends in ``Final: ANSWER``, and the reward ``toy-final-em`` is 1.0 when
that answer is one of the row's gold answers (SQuAD-normalised). Importing the folder registers both by name."""

import re

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


register_format(OutputFormat("toy-final", parse_final))
register_reward("toy-final-em", FinalExact)
