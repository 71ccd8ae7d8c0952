"""Search-R1's own reward in the search-agent evaluation (``curriculum eval --agent search-r1 --reward search-r1
[--reward-arg format_score=X --reward-arg score=Y]``): the ``search-r1`` trajectory reward
(:data:`rag_curriculum.agents.TRAJECTORY_REWARDS`). Every trajectory is scored with Search-R1's ``qa_em`` on the
decoded prompt plus trajectory, bit for bit (:func:`reward_scores`); the score is each trajectory's ``search_r1``,
its mean the aggregates' ``search_r1``, and ``table.md`` gets a section beside EM."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...agents import AgentEvalPart, AgentSetRun
from ...errors import ConfigError, UsageError
from ._reward import SearchR1Reward, search_r1_breakdown, search_r1_sequence, search_r1_target

__all__ = ["REWARD", "SearchR1RewardPart", "reward_scores"]


def reward_scores(reward: Any, rows: Sequence[Mapping[str, Any]], trajs: Sequence[Any], m: int,
                  backend: Any = None) -> list[float]:
    """``--reward search-r1``: each trajectory's Search-R1 score (row order, then sample order), on its prompt
    rendered by the backend's chat template where the backend has a tokenizer (vLLM, transformers) and its text, as
    Search-R1's reward manager decodes them; else on the prompt's text and the trajectory's."""
    tok = getattr(backend, "tokenizer", None)
    tok = tok if callable(getattr(tok, "apply_chat_template", None)) else None
    out = []
    for qi, row in enumerate(rows):
        for t in trajs[qi * m:(qi + 1) * m]:
            target = search_r1_target(row.get("reward_model"), row.get("answers"), where=f"row id {row['id']!r}")
            seq, start = search_r1_sequence(t.prompt, t.text, tokenizer=tok)
            out.append(search_r1_breakdown(seq, target, response_start=start, format_score=reward.format_score,
                                           score=reward.score).score)
    return out


class SearchR1RewardPart(AgentEvalPart):
    """``--reward search-r1``: Search-R1's own reward of every trajectory, with its options (``--reward-arg``:
    ``format_score``, default 0.0, and ``score``, 1.0)."""

    key = "search_r1"
    label = "Search-R1's reward"
    column = "Search-R1 reward"
    name = "search-r1"

    def check(self, cfg: Any) -> None:
        if cfg.reward != self.name:
            return
        if cfg.agent != "search-r1":
            raise UsageError(f"--reward {cfg.reward} scores Search-R1's <answer> tags: pass --agent search-r1")
        unknown = sorted(set(cfg.reward_args) - {"format_score", "score"})
        if unknown:
            raise UsageError(f"--reward-arg {unknown[0]}: search-r1 takes format_score and score")
        try:
            self.reward(cfg)
        except ConfigError as e:
            raise UsageError(f"--reward-arg: {e}") from None

    @staticmethod
    def reward(cfg: Any) -> SearchR1Reward:
        """The reward, built with the run's ``--reward-arg`` options."""
        return SearchR1Reward(**{k: v for k, v in cfg.reward_args.items()}, log_components=False)

    def trajectory_scores(self, cfg: Any, run: AgentSetRun) -> list[float]:
        return reward_scores(self.reward(cfg), run.rows, run.trajs, run.m, run.backend)

    def report_section(self, summary: Mapping[str, Any]) -> list[str] | None:
        """``table.md``'s section: the toolkit's EM beside Search-R1's reward, per model and set."""
        if not any(self.key in (e.get("overall") or {}) for e in summary["evals"]):
            return None
        lines = ["", "## Search-R1's own reward (--reward search-r1)", "",
                 "| model | set | EM (the toolkit's reading) | Search-R1's reward |", "|---|---|---|---|"]
        for e in summary["evals"]:
            o = e.get("overall") or {}
            if self.key in o:
                lines.append(f"| {e['model']} | {e['set']} | {o.get('em', 0):.1f} | {o[self.key]:.1f} |")
        return lines


#: The object registered as the ``search-r1`` trajectory reward.
REWARD = SearchR1RewardPart()
