"""Training a search agent with TRL: a ``rollout_func`` for ``GRPOTrainer`` that runs the toolkit's rollout loop
(:func:`~rag_curriculum.agents.run_rollouts`) with the policy being trained, and hands TRL token ids and a loss
mask in which the environment's tokens weigh nothing.

TRL 1.16's contract (``GRPOTrainer(rollout_func=...)``, experimental there): ``rollout_func(prompts, trainer)``
gets this process's slice of the generation batch, each prompt already repeated ``num_generations`` times by TRL's
sampler (consecutively), and returns one completion per prompt: ``prompt_ids``, ``completion_ids``, ``logprobs``
and any other keys, which reach the reward functions as columns; ``env_mask`` (1: a token the model sampled, 0: a
token the environment wrote) becomes TRL's tool mask, multiplied into the loss mask.

**Tokens.** A trajectory is tokenized once, as it is generated: the prompt is the chat template's rendering of the
search prompt (generation prompt included), each model turn is the token ids the model sampled (cut after the
token that completes ``</search>`` / ``</answer>``, or at the end-of-sequence token), each ``<information>`` block
or invalid-action feedback is the tokenizer's encoding of that text alone. The next turn is generated from exactly
these ids, and ``completion_ids`` are exactly these ids, so the loss is computed on what the model was conditioned
on and sampled, never on a re-tokenization of the text. (The rollout loop hands the backend text; the backend maps
it back to its ids through what it generated. Two samples of a prompt that wrote the very same text share the ids
of the first.) An answered trajectory ends with the end-of-sequence token (mask 0: not sampled), so TRL counts it
as terminated; a trajectory stopped by a budget does not, so ``grpo.mask_truncated_completions=true`` drops those
from the loss.

**Rows.** The reward and the search environment need the row (question, answers, gold passages, level), not only
the prompt. The toolkit's trainer records the rows of each generation batch (``trainer.current_inputs``, in the
order of the prompts), which is exact; with another trainer the rows are found by the prompt's text among the rows
the rollout was built with (:meth:`SearchRollout.from_rows`), refused when two rows share a prompt.

**Sampling** is explicit, from ``trainer.args``: temperature, top-p, top-k, min-p and repetition penalty, and
``max_turn_tokens`` tokens per turn (Search-R1: 500); nothing is taken from the model's ``generation_config``.
Generation runs in the trainer's process with ``model.generate`` on the unwrapped policy (TRL's
``unwrap_model_for_generation``), so ``grpo.use_vllm`` must be false, and ``logprobs`` are None (TRL uses them
only to correct vLLM's sampling).

torch and transformers are imported inside the functions only.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .._plumbing import derive_seed
from ..agents import (
    Retriever,
    RolloutConfig,
    SearchDifficulty,
    Trajectory,
    get_agent_template,
    open_retriever,
    run_rollouts,
    summarize,
)
from ..errors import ConfigError
from ..generation import stop_kwargs
from ..grammar import STOP
from ..shards import PROMPT_TOKENS

log = logging.getLogger(__name__)

__all__ = ["PolicyBackend", "SearchRollout", "TurnSampling", "search_prompts"]


@dataclass(frozen=True)
class TurnSampling:
    """The sampling settings of one turn (``run_rollouts`` takes them as its ``sampling``)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    n: int = 1
    seed: int = 0

    @classmethod
    def from_args(cls, args: Any, max_tokens: int | None = None) -> TurnSampling:
        """From TRL's ``GRPOConfig``; ``max_tokens`` (a turn's budget) defaults to ``max_completion_length``."""
        budget = int(max_tokens or getattr(args, "max_completion_length", 0) or 0)
        if budget < 1:
            raise ConfigError("no per-turn token budget: set agent.max_turn_tokens or grpo.max_completion_length")
        return cls(max_tokens=budget, temperature=float(args.temperature), top_p=float(args.top_p or 1.0),
                   top_k=int(args.top_k or 0), min_p=float(args.min_p or 0.0),
                   repetition_penalty=float(args.repetition_penalty or 1.0), seed=int(args.seed))


def _user_content(messages: Sequence[Mapping[str, Any]]) -> str:
    users = [m for m in messages if m.get("role") == "user"]
    if not users:
        raise ConfigError("a search-agent prompt has no user message", hint="map the dataset with search_prompts()")
    content = users[-1].get("content")
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content or [])


@dataclass
class _Piece:
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)


class PolicyBackend:
    """A generation backend of the rollout loop over a model object (the policy being trained): generates from
    token ids it keeps per trajectory (see the module docstring), explicit sampling, per-turn stop strings.

    ``first_turn``: a scripted first turn (``str.format`` with ``question``), written instead of the model's and
    masked out of the loss (mask 0); a warm start, and the way tests make a random model search."""

    name = "trl-policy"

    def __init__(self, model: Any, tokenizer: Any, *, eos_token_ids: Sequence[int] | None = None,
                 chat_template_kwargs: Mapping[str, Any] | None = None, first_turn: str | None = None,
                 questions: Mapping[str, str] | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        eos = list(eos_token_ids or [])
        if not eos and tokenizer.eos_token_id is not None:
            eos = [tokenizer.eos_token_id]
        if not eos:
            raise ConfigError("the tokenizer names no end-of-sequence token: a turn would never stop before its budget")
        self.eos_token_ids = eos
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.first_turn = first_turn
        self.questions = dict(questions or {})
        self._prompts: dict[str, list[int]] = {}
        self._memo: dict[str, dict[str, _Piece]] = {}

    # -- token bookkeeping -------------------------------------------------------------------------------------
    def prompt_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """The prompt's ids: the chat template with the generation prompt, as TRL renders a prompt."""
        key = _user_content(messages)
        if key not in self._prompts:
            text = self.tokenizer.apply_chat_template([dict(m) for m in messages if m.get("role") != "assistant"],
                                                      add_generation_prompt=True, tokenize=False,
                                                      **self.chat_template_kwargs)
            self._prompts[key] = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return self._prompts[key]

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    def completion(self, key: str, text: str) -> _Piece:
        """The ids and mask of ``text`` (the trajectory after the prompt ``key``): the longest prefix this backend
        generated, then the rest (what the environment appended since) encoded alone, mask 0."""
        known = self._memo.setdefault(key, {"": _Piece()})
        best = max((t for t in known if text.startswith(t)), key=len)
        piece = known[best]
        rest = self._encode(text[len(best):])
        return _Piece(piece.ids + rest, piece.mask + [0] * len(rest))

    def _remember(self, key: str, text: str, piece: _Piece) -> None:
        self._memo.setdefault(key, {"": _Piece()}).setdefault(text, piece)

    def _cut(self, ids: list[int], stop: Sequence[str]) -> tuple[list[int], str]:
        """The shortest prefix of ``ids`` whose text holds a stop string (else up to the first end-of-sequence
        token, included), and its text cut after the stop string."""
        decode = self.tokenizer.decode

        def text_of(n: int) -> str:
            return decode(ids[:n], skip_special_tokens=True)

        eos = next((i for i, t in enumerate(ids) if t in self.eos_token_ids), None)
        if eos is not None:
            ids = ids[:eos + 1]
        full = text_of(len(ids))
        if stop and any(s in full for s in stop):
            lo, hi = 1, len(ids)  # the shortest prefix holding a stop string (holding one is monotone in n)
            while lo < hi:
                mid = (lo + hi) // 2
                if any(s in text_of(mid) for s in stop):
                    hi = mid
                else:
                    lo = mid + 1
            ids = ids[:lo]
            full = text_of(lo)
            ends = [i + len(s) for s in stop if (i := full.find(s)) >= 0]
            full = full[:min(ends)]
        elif eos is None and self.pad_token_id not in self.eos_token_ids:
            # only trailing padding goes (a row of the batch that finished early); a pad id the model sampled
            # inside its turn is one of its tokens, kept
            n = len(ids)
            while n and ids[n - 1] == self.pad_token_id:
                n -= 1
            if n < len(ids):
                ids = ids[:n]
                full = text_of(n)
        return ids, full

    # -- the backend protocol ----------------------------------------------------------------------------------
    def generate(self, prompts: Sequence[Sequence[Mapping[str, Any]]], sampling: TurnSampling, *,
                 seeds: Sequence[int] | None = None, stop: Sequence[str] | None = None) -> list[list[str]]:
        import torch

        stop = list(stop or STOP)
        out: list[list[str]] = [[] for _ in prompts]
        todo: list[tuple[int, str, str, _Piece]] = []
        for i, messages in enumerate(prompts):
            key = _user_content(messages)
            done = messages[-1]["content"] if messages[-1].get("role") == "assistant" else ""
            if not done and self.first_turn is not None:
                text = self.first_turn.format(question=self.questions.get(key, ""))
                ids = self._encode(text)
                self._remember(key, text, _Piece(ids, [0] * len(ids)))
                out[i] = [text]
                continue
            todo.append((i, key, done, self.completion(key, done)))
        if not todo:
            return out
        rows = [self.prompt_ids(prompts[i]) + piece.ids for i, _, _, piece in todo]
        width = max(len(r) for r in rows)
        device = next(self.model.parameters()).device
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, ids in enumerate(rows):
            input_ids[r, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            mask[r, width - len(ids):] = 1
        kwargs: dict[str, Any] = {
            "max_new_tokens": sampling.max_tokens, "num_beams": 1, "top_k": sampling.top_k, "min_p": sampling.min_p,
            "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0,
            "repetition_penalty": sampling.repetition_penalty, "no_repeat_ngram_size": 0,
            "pad_token_id": self.pad_token_id, "eos_token_id": self.eos_token_ids,
            **stop_kwargs(self.tokenizer, stop, width),
        }
        if sampling.temperature > 0:
            kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p)
        else:
            kwargs.update(do_sample=False, temperature=1.0, top_p=1.0)
        seed = derive_seed(*(seeds or [sampling.seed]), sep=",", bits=63)
        devices = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.no_grad():  # the trainer's RNG stream is left alone
            torch.manual_seed(seed)
            gen = self.model.generate(input_ids=input_ids.to(device), attention_mask=mask.to(device), **kwargs)
        new = gen[:, width:].tolist()
        for (i, key, done, piece), ids in zip(todo, new, strict=True):
            ids, text = self._cut(ids, stop)
            self._remember(key, done + text, _Piece(piece.ids + ids, piece.mask + [1] * len(ids)))
            out[i] = [text]
        return out


def search_prompts(dataset: Any, template: str = "search-r1") -> Any:
    """A ``datasets.Dataset`` of curriculum rows with its ``prompt`` column replaced by the search agent's prompt
    (one user message made from ``question``), and the closed-context prompt's token counts dropped (the length
    check counts the new prompts)."""
    tmpl = get_agent_template(template)
    if "question" not in dataset.column_names:
        raise ConfigError("the rows have no 'question' column: a search agent needs the question",
                          hint="train on shards written by `curriculum build`")
    drop = [c for c in ("prompt", PROMPT_TOKENS) if c in dataset.column_names]
    dataset = dataset.remove_columns(drop)
    return dataset.map(lambda q: {"prompt": tmpl.render(q)}, input_columns="question")


@dataclass
class SearchRollout:
    """TRL's ``rollout_func`` for the Search-R1 protocol: ``rollout(prompts, trainer) -> dict`` (see the module
    docstring). Picklable; holds no model (it uses ``trainer.model`` at each call).

    Besides ``prompt_ids``, ``completion_ids``, ``env_mask`` and ``logprobs`` it returns, per completion, the
    columns the search rewards read: ``trajectory`` (:meth:`Trajectory.to_dict` without the prompt), ``searches``
    (the number of searches), ``gold_found``, ``format_errors`` (turns with a format error) and ``status``.
    """

    retriever: Retriever
    config: RolloutConfig = field(default_factory=RolloutConfig)
    difficulty: SearchDifficulty = field(default_factory=SearchDifficulty)
    max_turn_tokens: int | None = None
    first_turn: str | None = None
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Rows by their search prompt's text, for a trainer that does not record its inputs."""

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]], retriever: Retriever, **kwargs: Any) -> SearchRollout:
        """A rollout that can find its rows by the prompt's text (any ``GRPOTrainer``)."""
        self = cls(retriever, **kwargs)
        tmpl = get_agent_template(self.config.template)
        for row in rows:
            key = _user_content(tmpl.render(str(row["question"])))
            self.rows.setdefault(key, []).append(dict(row))
        return self

    def _rows_for(self, prompts: Sequence[Any], trainer: Any) -> list[Mapping[str, Any]]:
        inputs = getattr(trainer, "current_inputs", None)
        if inputs is not None and len(inputs) == len(prompts) and all(
                x.get("prompt") == p for x, p in zip(inputs, prompts, strict=True)):
            return list(inputs)
        out = []
        for p in prompts:
            key = _user_content(p)
            found = self.rows.get(key)
            if not found:
                raise ConfigError(f"no row for the prompt {key[-80:]!r}",
                                  hint="train with the toolkit's trainer (`curriculum train` with an agent section), "
                                       "or build the rollout with SearchRollout.from_rows(dataset rows, ...)")
            if len({str(r.get("id")) for r in found}) > 1:
                raise ConfigError(f"{len(found)} rows share the prompt {key[-80:]!r} (ids "
                                  f"{', '.join(str(r.get('id')) for r in found[:5])}): cannot tell which is trained",
                                  hint="train with the toolkit's trainer, which records the rows of each batch")
            out.append(found[0])
        return out

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        from trl.models import unwrap_model_for_generation

        args = trainer.args
        if getattr(args, "use_vllm", False):
            raise ConfigError("the search rollout generates with the policy in the trainer's process; "
                              "grpo.use_vllm must be false")
        rows = self._rows_for(prompts, trainer)
        step = int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0)
        config = replace(self.config, seed=derive_seed(self.config.seed, "step", step, bits=31))
        difficulty = replace(self.difficulty, seed=derive_seed(self.difficulty.seed, "step", step, bits=31))
        sampling = TurnSampling.from_args(args, self.max_turn_tokens)
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        tmpl = get_agent_template(config.template)
        questions = {_user_content(tmpl.render(str(r["question"]))): str(r["question"]) for r in rows}
        unwrap = {"gather_deepspeed3_params": getattr(args, "ds3_gather_for_generation", True),
                  "generation_kwargs": getattr(trainer, "generation_kwargs", None)}
        if "gradient_checkpointing_kwargs" in inspect.signature(unwrap_model_for_generation).parameters:
            # (newer TRL turns gradient checkpointing off while generating and back on with these; TRL 1.0 has no
            # such argument: its trainer generates the same way without it)
            unwrap["gradient_checkpointing_kwargs"] = getattr(args, "gradient_checkpointing_kwargs", None)
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator, **unwrap) as model:
            backend = PolicyBackend(model, tokenizer, eos_token_ids=getattr(trainer, "eos_token_ids", None),
                                    chat_template_kwargs=getattr(args, "chat_template_kwargs", None),
                                    first_turn=self.first_turn, questions=questions)
            trajs = self.rollouts(backend, rows, sampling, config, difficulty)
        prompt_ids, completion_ids, env_mask = [], [], []
        for t in trajs:
            key = _user_content(t.prompt)
            piece = backend.completion(key, t.text)
            ids, mask = list(piece.ids), list(piece.mask)
            if t.status == "answer" and (not ids or ids[-1] not in backend.eos_token_ids):
                ids.append(backend.eos_token_ids[0])  # ends the sequence (TRL: terminated); not sampled: mask 0
                mask.append(0)
            prompt_ids.append(backend.prompt_ids(t.prompt))
            completion_ids.append(ids)
            env_mask.append(mask)
        self._log(trainer, trajs)
        return {
            "prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None, "env_mask": env_mask,
            "trajectory": [{k: v for k, v in t.to_dict().items() if k != "prompt"} for t in trajs],
            "searches": [len(t.searches) for t in trajs], "gold_found": [float(t.gold_found) for t in trajs],
            "format_errors": [len(t.errors) for t in trajs], "status": [t.status for t in trajs],
        }

    def rollouts(self, backend: Any, rows: Sequence[Mapping[str, Any]], sampling: TurnSampling,
                 config: RolloutConfig, difficulty: SearchDifficulty) -> list[Trajectory]:
        """One trajectory per entry of ``rows``, in order. TRL repeats each row ``num_generations`` times in a
        row: a run of ``n`` copies is one row sampled ``n`` times (samples 0..n-1, distinct seeds)."""
        runs: list[tuple[Mapping[str, Any], int]] = []
        for row in rows:
            if runs and runs[-1][0] is row or (runs and str(runs[-1][0].get("id")) == str(row.get("id"))
                                               and runs[-1][0].get("question") == row.get("question")):
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((row, 1))
        by_n: dict[int, list[int]] = {}
        for j, (_, n) in enumerate(runs):
            by_n.setdefault(n, []).append(j)
        out: list[list[Trajectory]] = [[] for _ in runs]
        for n, js in by_n.items():
            got = run_rollouts(backend, [dict(runs[j][0]) for j in js], self.retriever, sampling, n=n,
                               config=config, difficulty=difficulty)
            for k, j in enumerate(js):
                out[j] = got[k * n:(k + 1) * n]
        return [t for group in out for t in group]

    @staticmethod
    def _log(trainer: Any, trajs: Sequence[Trajectory]) -> None:
        """``search/*`` metrics of the batch (TRL's metric buffers, averaged over the logging interval)."""
        metrics = getattr(trainer, "_metrics", None)
        if metrics is None or not trajs:
            return
        mode = "train" if getattr(trainer.model, "training", True) else "eval"
        s = summarize(trajs)
        n = len(trajs)
        values = {"rollout/searches": s["searches_per_trajectory"], "rollout/gold_found": s["gold_found"],
                  "rollout/turns": sum(t.turns for t in trajs) / n,
                  "rollout/format_errors": sum(len(t.errors) for t in trajs) / n}
        for status in ("answer", "turn_budget", "context_budget", "format_error"):
            values[f"rollout/status_{status}"] = s["status"].get(status, 0) / n
        for k, v in values.items():
            metrics[mode][k].append(float(v))


def rollout_from_config(agent: Any, *, seed: int = 0, rows: Iterable[Mapping[str, Any]] | None = None,
                        retriever: Any = None) -> SearchRollout:
    """The rollout of a training config's ``agent`` section (:class:`~rag_curriculum.train._config.AgentConfig`):
    its retriever opened (an index directory or a server URL), its settings bound; ``seed`` when the section sets
    none. ``rows``: to find rows by prompt under a trainer that does not record them; ``retriever``: one already
    opened (else ``agent.retriever`` is opened)."""
    s = seed if agent.seed is None else int(agent.seed)
    kwargs = dict(config=RolloutConfig(template=agent.template, top_k=agent.top_k, max_turns=agent.max_turns,
                                       max_context_tokens=agent.max_context_tokens, on_invalid=agent.on_invalid,
                                       seed=s),
                  difficulty=SearchDifficulty(mode=agent.difficulty, p=agent.p, seed=s),
                  max_turn_tokens=agent.max_turn_tokens, first_turn=agent.first_turn)
    retriever = retriever if retriever is not None else open_retriever(
        agent.retriever, timeout=getattr(agent, "retriever_timeout", None),
        retries=getattr(agent, "retriever_retries", None))
    if rows is not None:
        return SearchRollout.from_rows(rows, retriever, **kwargs)
    return SearchRollout(retriever, **kwargs)
