"""A scripted model whose correct samples per question and level are planted (the level profile's tests and the
calibrated build's): question q at level l answers right in its first ``PLANTED[q][LEVELS.index(l)]`` samples."""

from __future__ import annotations

from pathlib import Path

from rag_curriculum.curricula.adaptive import LevelRenderer
from rag_curriculum.shards import read_manifest, read_rows

SAMPLES = 4
LEVELS = [1, 2, 4, 8]
#: Correct samples of question q at each level of LEVELS (of SAMPLES): mostly falling with the level, one question
#: always right, one never. At target 0.5 each has one calibrated level (see CALIBRATED).
PLANTED = [[4, 3, 2, 0], [4, 4, 4, 4], [2, 2, 1, 1], [3, 2, 0, 0], [0, 0, 0, 0], [4, 2, 2, 1]]
#: The level a calibrated build (target 0.5) places each planted question at: its pass rate nearest 0.5; ties to
#: the lowest such level (the highest when every tied rate is above the target: question 1, always right).
CALIBRATED = [4, 8, 1, 2, 1, 2]


def right(answer: str) -> str:
    return f"<reasoning>\nr\n</reasoning>\n<answer>\nFinal answer: {answer}\nSupporting passages: x\n</answer>"


class LevelOracle:
    """Answers question q of an adaptive build at level l right in its first PLANTED[q][LEVELS.index(l)] samples,
    wrong (``zzzq``) after."""

    def __init__(self, shards: Path) -> None:
        rows = read_rows(shards)
        renderer = LevelRenderer(read_manifest(shards))
        self.by_prompt = {}
        for q, row in enumerate(rows):
            for lv, r in zip(LEVELS, renderer.render([row] * len(LEVELS), LEVELS), strict=True):
                self.by_prompt[r["prompt"][-1]["content"]] = (PLANTED[q][LEVELS.index(lv)], row["answers"][0])
        assert len(self.by_prompt) == len(rows) * len(LEVELS), "each level shows a different prompt"

    def __call__(self, messages, n, seed):
        c, answer = self.by_prompt[messages[-1]["content"]]
        return [right(answer) if j < c else right("zzzq") for j in range(n)]
