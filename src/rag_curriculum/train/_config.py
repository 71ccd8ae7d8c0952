"""The training configuration: typed dataclasses are the schema; Hydra recipes (YAML) and command-line overrides
fill them in (:func:`rag_curriculum.config.resolve`). Every field says what it is for (its ``help``).

The ``grpo`` section is handed to TRL's ``GRPOConfig`` as it is (any of its fields), after the toolkit has set
what a curriculum needs (``shuffle_dataset=False``, the batch sizes derived from ``batch``, the reward weights);
its keys are checked against ``GRPOConfig``'s fields before anything heavy is built.

>>> cfg = TrainConfig.from_dict({"curriculum": "min-max", "data": {"shards": "outputs/musique-min-max"}})
>>> cfg.batch.prompts_per_step, cfg.rewards[0].name, cfg.data.order_policy
(42, 'rag-rl', 'refuse')
>>> TrainConfig.from_dict({"curriculum": "max", "data": {"shard": "x"}})
Traceback (most recent call last):
...
rag_curriculum.errors.UsageError: unknown option 'shard' in data; did you mean 'shards'? Known: longest_rows, max_rows, order_policy, outside_band, pass_max, pass_min, pass_rates, profile, profile_drift_decay, profile_prior_weight, profile_refresh, shards, verify
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .._plumbing import renamed_keywords
from .._settings import (
    MAX_COUNT,
    check_model_ref,
    check_settings,
    retriever_retries_rule,
    retriever_timeout_rule,
    rule,
)
from ..agents import first_search_query
from ..config import DATA_CHECKS, bind
from ..errors import ConfigError, UsageError
from ..rewards import REWARDS, reward_entries
from ._pass_rates import stats_path
from .controllers import resolve_controller

ORDER_POLICIES = ("refuse", "warn")
DTYPES = ("float32", "bfloat16", "float16", "auto")


@dataclass
class ModelConfig:
    """The policy to train (and the reference model when ``grpo.beta > 0``)."""

    name_or_path: str = rule("Qwen/Qwen2.5-7B-Instruct", help=(
        "Hub id, local directory or .gguf file of a causal LM (RAG-RL 4.2: Qwen2.5-7B-Instruct). A model without a "
        "chat template (a pretrained base model) is trained on the completion-style rendering of the prompts "
        "(docs/base-models.md)."))
    dtype: str = rule("float32", choices=DTYPES, help=(
        "Dtype the weights are loaded in: float32 keeps full-precision master weights (``grpo.bf16`` then runs "
        "the maths in bf16); bfloat16 halves memory, but a plain (non-DeepSpeed) optimizer then rounds away most "
        "1e-6 updates. One of float32, bfloat16, float16, auto."))
    attn_implementation: str | None = rule(None, help=(
        "Attention kernel for training, e.g. ``sdpa`` or ``flash_attention_2``; null lets transformers choose."))
    revision: str | None = rule(None, help=(
        "Hub revision (branch, tag or commit) to pin the weights to."))
    trust_remote_code: bool = rule(False, help=(
        "Allow model code from the Hub (not needed for Qwen2.5)."))
    freeze_embeddings: bool = rule(False, help=(
        "Train every weight but the token embeddings (and an output layer tied to them). For a small model with a "
        "large vocabulary on a CPU (Gemma 3 270M: 168M of its 268M weights are its 262k-token embeddings) the "
        "optimiser's work and memory shrink by that share; the paper trains every weight."))


@dataclass
class DataConfig:
    """The curriculum to train on: a shard directory written by ``curriculum build`` (or ``partition``)."""

    shards: str = rule("???", help=(
        "Shard directory (``part-*.parquet`` + ``manifest.json``); rows are trained in ``curriculum_index`` "
        "order."))
    verify: bool = rule(True, help=(
        "Check the shards against their manifest (files, row counts, content hashes) before training."))
    max_rows: int | None = rule(None, ge=1, le=MAX_COUNT, help=(
        "Train on the first N rows only (a prefix keeps the curriculum order); for smoke tests."))
    longest_rows: int | None = rule(None, ge=1, le=MAX_COUNT, help=(
        "Train on the N rows whose prompts are longest in the model's tokenizer only, in curriculum order among "
        "themselves: the run's worst steps for memory first (the GPU pre-flight, scripts/gpu_paper_run.sh)."))
    order_policy: str = rule("refuse", choices=ORDER_POLICIES, help=(
        "What to do when a setting would reorder the curriculum (a dataset shuffle, a restart of the data on "
        "resume): ``refuse`` (stop with an error) or ``warn`` (log a loud warning and go on)."))
    pass_rates: str | None = rule(None, help=(
        "The ``stats.parquet`` of a ``curriculum partition`` run (or its folder): the base model's pass rate per "
        "question, joined on the rows' id; it seeds the order (pass_min / pass_max) and the adaptive controller "
        "(adaptive.from_pass_rates)."))
    pass_min: float | None = rule(None, ge=0.0, le=1.0, help=(
        "Lower end of the learnable band: questions measured below it (the model never solves them) are deferred "
        "or skipped (outside_band); null: 0."))
    pass_max: float | None = rule(None, ge=0.0, le=1.0, help=(
        "Upper end of the learnable band: questions measured above it (always solved) are deferred or skipped; "
        "null: 1."))
    outside_band: str = rule("defer", choices=("defer", "skip"), help=(
        "Questions outside [pass_min, pass_max]: defer (trained after the others, both in curriculum order) or "
        "skip (left out, listed in train_plan.json); unmeasured rows keep their place."))
    profile: str | None = rule(None, help=(
        "A level profile (``curriculum profile --out``) to check the run against: every step logs the informative "
        "fraction it predicts for the step's rows beside the measured one (step_metrics.jsonl, informative.json). "
        "Null: the profile the shards were built with (``build --profile``), if it is still beside them."))
    profile_refresh: bool = rule(True, help=(
        "With a profile: also forecast each step from the profile refreshed by the run's own groups (a Dirichlet "
        "posterior over each question's reward values), logged as ``refreshed`` beside ``predicted``."))
    profile_prior_weight: float = rule(1.0, ge=0.0, le=1e6, help=(
        "With profile_refresh: what each of the profile's samples counts in the refreshed posterior against one "
        "rollout (1: alike; 0: the run's own groups alone, from a question's first group on)."))
    profile_drift_decay: float | None = rule(0.9, ge=0.0, le=1.0, help=(
        "With profile_refresh: the discount per step of the factor that follows the whole model's drift (pooled "
        "over every question: the informative groups seen over their forecasts, a Gamma-Poisson posterior mean "
        "worth 2 groups a priori); null: no factor, each question's posterior alone."))


@dataclass
class RewardSpec:
    """One reward function from the toolkit's registry (``rag_curriculum.rewards.REWARDS``)."""

    name: str = rule("rag-rl", help=(
        "Registered reward name: rag-rl (the paper's total), rag-rl-answer, rag-rl-citation, rag-rl-format, ..."))
    weight: float = rule(1.0, ge=-1e6, le=1e6, help=(
        "Weight in TRL's ``reward_weights`` (the total reward is the weighted sum)."))
    kwargs: dict[str, Any] = rule(default_factory=dict, help=(
        "Constructor arguments, e.g. the RAG-RL constants gamma_answer, gamma_correct, gamma_incorrect, ..."))

    @classmethod
    def parse(cls, name: str) -> RewardSpec:
        """A reward given by its name alone (``rewards: [rag-rl]``), weight 1."""
        return cls(name=name)


@dataclass
class BatchConfig:
    """The paper's batch in prompts, mapped onto TRL's per-device batch of completions.

    TRL counts completions: one optimiser step takes ``per_device_train_batch_size x num_processes x
    gradient_accumulation_steps`` completions, ``num_generations`` per prompt. With ``prompts_per_step`` set, the
    toolkit derives ``gradient_accumulation_steps`` (and ``steps_per_generation``) from it, the number of training
    processes and ``per_device_completions``, so a recipe keeps its batch at any scale.
    """

    prompts_per_step: int | None = rule(42, ge=1, le=MAX_COUNT, help=(
        "Distinct prompts per optimiser step (RAG-RL: 42, x 7 generations = 294 completions); null uses the "
        "``grpo`` batch settings as they are."))
    per_device_completions: int | None = rule(7, ge=1, le=MAX_COUNT, help=(
        "Completions one process holds per forward/backward pass (TRL's ``per_device_train_batch_size``): the "
        "memory knob. Null keeps ``grpo.per_device_train_batch_size``."))
    num_processes: int | None = rule(None, ge=1, le=MAX_COUNT, help=(
        "Training processes; null reads ``WORLD_SIZE`` (set by accelerate / torchrun), else 1. Set it to plan a "
        "multi-GPU run from a single process (``--dry-run``)."))


@dataclass
class RunConfig:
    """Where the run writes, how it resumes and what it records."""

    name: str = rule("rag-rl", help=(
        "Run name (the output folder and the tracker's run name)."))
    output_dir: str = rule("outputs/train/${run.name}", help=(
        "Checkpoints, the resolved config (``train_config.yaml``), the batch plan and ``curriculum_steps.jsonl``."))
    resume: str | None = rule("auto", help=(
        "``auto``: continue from the newest checkpoint in ``output_dir`` if there is one; ``last``: the same but "
        "required; a path: that checkpoint; null: start fresh (refused when ``output_dir`` holds checkpoints)."))
    log_rows: bool = rule(True, help=(
        "Write ``curriculum_steps.jsonl``: per optimiser step, the curriculum indices, levels and hops trained."))
    save_final: bool = rule(True, help=(
        "Save the final model (and tokenizer) into ``output_dir`` when training ends."))
    check_free_disk: bool = rule(True, help=(
        "Refuse to start when ``output_dir``'s disk has less free space than the run's checkpoints need at once "
        "(``grpo.save_total_limit`` + 1 of them, each sized from the model and the launcher's ZeRO stage, and the "
        "final model); ``--dry-run`` prints the sizes."))


SUCCESS = ("exact_match", "reward")


@dataclass
class AdaptiveConfig:
    """An adaptive curriculum (docs/adaptive.md): a controller picks the level each generation batch is shown at
    from how the model did on the last one. Needs shards built with ``--schedule adaptive``."""

    controller: str | None = rule(None, help=(
        "target-band (AdaRFT) | mastery | informative (the level profile's forecast, refreshed) | a registered "
        "controller (rag_curriculum.train.register_controller) | pkg.module:Class; null: the rows are trained at the levels they were built with. With a search agent it "
        "drives the level of the searches' hard negatives or the withholding probability p (agent.difficulty)."))
    success: str = rule("exact_match", choices=SUCCESS, help=(
        "What a completion's success is: exact_match (1 or 0, the one scorer) or reward (the weighted total "
        "reward; set the controller's target / threshold on the reward's scale)."))
    kwargs: dict[str, Any] = rule(default_factory=dict, help=(
        "The controller's settings, e.g. target-band: target 0.5, eta 1.0, alpha 2.0, start 1, mode round|sample, "
        "spread 0.5; mastery: start 1, threshold 1.0, new batch|start; informative: target_informative 1.0, target "
        "0.5, prior_weight 1.0, drift_decay 0.9, drift_prior_groups 2, level_decay 0.9, level_prior_groups 2."))
    seed: int | None = rule(None, ge=0, help=(
        "Seed of the controller's draws; null: grpo.seed."))
    plot: bool = rule(True, help=(
        "Write curriculum_levels.png (level and success against step) into run.output_dir after the run."))
    from_pass_rates: bool = rule(False, help=(
        "Start the controller from data.pass_rates: the partition's samples are its first scored batch (at the "
        "levels they were measured at) instead of starting from level 1. Needs success=exact_match."))


AGENT_DIFFICULTY = ("none", "hard-negatives", "withhold")


@renamed_keywords()
@dataclass
class AgentConfig:
    """A search agent (docs/training.md, "Training a search agent"): the model searches a retriever across turns
    (Search-R1's ``<search>`` / ``<information>`` protocol) and TRL trains on the trajectories, the retrieved
    tokens masked out of the loss. Off (the closed-context RAG-RL setting) while ``retriever`` is null."""

    retriever: str | None = rule(None, help=(
        "The search tool: a directory written by ``curriculum index`` (in-process BM25) or the URL of a server "
        "speaking Search-R1's ``POST /retrieve`` (``curriculum serve``); null: no search agent."))
    retriever_timeout: float = retriever_timeout_rule()
    retriever_retries: int = retriever_retries_rule()
    protocol: str = rule("tags", choices=("tags", "tools"), help=(
        "How the model searches: tags (Search-R1's <search> / <information> protocol through the toolkit's "
        "rollout_func) or tools (TRL's native tool calling: environment_factory with a search tool; the chat "
        "template must render tools, e.g. Qwen2.5's; use template=search-tools)."))
    template: str = rule("search-r1", choices=("search-r1", "search-r1-original", "globalrag", "globalrag-released",
                                               "search-tools"),
                         help=("The agent's prompt: search-r1 (VERITAS appendix A), search-r1-original (Search-R1's "
                               "make_prefix), globalrag (GlobalRAG's Figure 7), globalrag-released (its release's) "
                               "or search-tools (the tool-calling agent's, protocol=tools)."))
    top_k: int = rule(3, ge=1, le=100, renamed_from="topk", help="Passages per search (Search-R1: 3).")
    max_turns: int = rule(4, ge=1, le=64, help=(
        "Model turns per trajectory, the answering one included (Search-R1: max_turns 2 to 4)."))
    max_turn_tokens: int | None = rule(None, ge=1, le=MAX_COUNT, help=(
        "Tokens one turn may generate (Search-R1: max_response_length 500); null: grpo.max_completion_length."))
    max_context_tokens: int = rule(8192, ge=1, le=MAX_COUNT, help=(
        "Budget of prompt plus trajectory in tokens; a trajectory that reaches it stops (status context_budget)."))
    on_invalid: str = rule("feedback", choices=("feedback", "stop"), help=(
        "A turn with a format error: feedback (Search-R1's 'My previous action is invalid', go on) or stop."))
    difficulty: str = rule("none", choices=AGENT_DIFFICULTY, help=(
        "What the row's level does to its search results: none, hard-negatives (RAG-RL's d distractors above "
        "the gold) or withhold (gold removed with probability p, ZeroSearch)."))
    p: float = rule(0.0, ge=0.0, le=1.0, help=(
        "Withholding probability of difficulty=withhold (fixed; p_schedule or adaptive.controller move it instead)."))
    p_schedule: str = rule("none", choices=("none", "zerosearch"), help=(
        "How p moves without a controller (difficulty=withhold): none (fixed at p) or zerosearch (ZeroSearch's "
        "p(t) = p_start + (4^(t/T) - 1) / 3 * (p_end - p_start), t the optimiser steps done, T the run's)."))
    p_start: float = rule(0.0, ge=0.0, le=1.0, help=(
        "p at the start of p_schedule=zerosearch, and at level 1 of an adaptive controller (difficulty=withhold)."))
    p_end: float = rule(0.5, ge=0.0, le=1.0, help=(
        "p at the end of p_schedule=zerosearch, and at the top level p_levels of an adaptive controller."))
    p_levels: int = rule(6, ge=2, le=1001, help=(
        "Levels an adaptive controller moves over with difficulty=withhold: level l shows p = p_start + (l - 1) / "
        "(p_levels - 1) * (p_end - p_start) (6: steps of 0.1 over 0..0.5)."))
    first_turn: str | None = rule(None, help=(
        "A scripted first turn (``{question}`` filled in), e.g. ``<search> {question} </search>``, written instead "
        "of the model's and masked out of the loss: a warm start, and how a tiny random model is made to search. "
        "Under protocol=tools its <search> is run by the environment when a rollout starts, the passages appended "
        "to the question (TRL's reset) and the search recorded."))
    seed: int | None = rule(None, ge=0, help="Seed of the rollouts and of the difficulty's draws; null: grpo.seed.")


DYNAMIC_DROPPED = ("retire", "retry")


@dataclass
class DynamicConfig:
    """Dynamic sampling (DAPO): groups that teach nothing are dropped and the batch refilled with the next rows of
    the curriculum (docs/training.md, "Dynamic sampling")."""

    enabled: bool = rule(False, help=(
        "Drop the groups whose metric spread is at most max_spread and refill the generation batch with the next "
        "rows in curriculum order (DAPO's dynamic sampling)."))
    metric: str = rule("reward", help=(
        "What a group's spread is measured on: reward (the weighted total, what the advantages use), exact_match "
        "(the one scorer), or the name of a reward in ``rewards`` (one with weight 0 is scored, logged and not "
        "trained on)."))
    max_spread: float = rule(0.0, ge=0.0, le=1e6, help=(
        "A group is dropped when max - min of its metric is at most this (0: DAPO's rule, all equal)."))
    max_refills: int = rule(4, ge=0, le=MAX_COUNT, help=(
        "Refill generations per batch at most; a batch still short trains its informative groups, the slots "
        "left holding dropped groups with their loss mask zeroed."))
    dropped: str = rule("retire", choices=DYNAMIC_DROPPED, help=(
        "What becomes of a dropped row: retire (recorded, not shown again) or retry (shown again retry_after "
        "generation batches later, ahead of the next new rows, up to max_retries times)."))
    refill: str = rule("estimate", choices=("estimate", "missing", "batch"), help=(
        "Rows a refill generates: estimate (the missing groups over the informative rate seen so far, at most a "
        "batch), missing (exactly the missing groups: fewest generations, more rounds) or batch (a full generation "
        "batch, as DAPO / verl). Rows generated past the need are given back: shown first in the next batch."))
    retry_after: int = rule(4, ge=0, le=MAX_COUNT, help="Generation batches before a dropped row is retried.")
    max_retries: int = rule(1, ge=1, le=MAX_COUNT, help="Times a row may be retried before it is retired.")
    plot: bool = rule(True, help=(
        "Write curriculum_dynamic.png (informative fraction, refills, rows retired per step) after the run."))


@dataclass
class TrainConfig:
    """A training run: which curriculum, model, rewards and GRPO settings.

    Usually composed from a recipe (:func:`~rag_curriculum.train.compose_train_config`); ``from_dict`` binds a
    mapping with the same checks. Each field's type and range is checked when the config is made (a
    :class:`SettingError`, a :class:`ConfigError`), the rest by :meth:`validate`.

    Examples:
        >>> from rag_curriculum import TrainConfig
        >>> cfg = TrainConfig.from_dict({"curriculum": "linear", "data": {"shards": "outputs/musique-linear"},
        ...                              "grpo": {"learning_rate": 2e-6}})
        >>> cfg.data.shards, cfg.rewards[0].name
        ('outputs/musique-linear', 'rag-rl')
    """

    recipe: str | None = rule(None, help=(
        "The recipe this config was composed from (recorded with the run)."))
    dataset: str = rule("musique", help=(
        "Dataset the curriculum was built from (hotpotqa, musique, 2wikimultihopqa); names the default shards."))
    curriculum: str = rule("???", help=(
        "Curriculum name (max, linear, min-max, base-answerable, base-unanswerable, ...); names the default "
        "shards."))
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rewards: list[RewardSpec] = rule(default_factory=lambda: [RewardSpec()], help=(
        "Reward functions and weights; RAG-RL uses one, the total ``rag-rl`` (its components are logged)."))
    batch: BatchConfig = field(default_factory=BatchConfig)
    run: RunConfig = field(default_factory=RunConfig)
    grpo: dict[str, Any] = rule(default_factory=dict, help=(
        "Any ``trl.GRPOConfig`` field (learning_rate, beta, epsilon, num_generations, use_vllm, bf16, ...)."))
    adaptive: AdaptiveConfig = field(default_factory=AdaptiveConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    dynamic: DynamicConfig = rule(default_factory=DynamicConfig, help=(
        "Dynamic sampling (DAPO): drop the groups that teach nothing and refill in curriculum order."))

    def validate(self) -> None:
        """Check the values TRL does not check itself; raise :class:`ConfigError` (a ``ValueError``) saying what to
        set instead."""
        if self.data.shards in (None, "", "???"):
            raise ConfigError("no curriculum given: set data.shards=DIR (a directory written by `curriculum build`)")
        check_settings(self, flags=False)  # types and ranges: the same rules as every other config
        if not isinstance(self.rewards, list) or not self.rewards:
            raise ConfigError("no reward given: rewards=[{name: rag-rl}] is the paper's")
        for i, spec in enumerate(self.rewards):
            check_settings(spec, prefix=f"rewards.{i}.", flags=False)
            if spec.name not in REWARDS:
                try:
                    REWARDS.get(spec.name)
                except KeyError as e:
                    raise UsageError(f"rewards.{i}.name: {e.args[0]}") from None
        if self.adaptive.controller is not None:
            try:
                resolve_controller(self.adaptive.controller)
            except KeyError as e:
                raise UsageError(f"adaptive.controller: {e.args[0]}") from None
        check_model_ref(self.model.name_or_path, label="model.name_or_path")
        if self.agent.retriever is not None:
            self._validate_agent()
        if self.data.pass_rates is None and (self.data.pass_min is not None or self.data.pass_max is not None
                                             or self.adaptive.from_pass_rates):
            raise ConfigError("data.pass_min / data.pass_max / adaptive.from_pass_rates read the pass rates of "
                              "data.pass_rates, which is not set", hint="set data.pass_rates=PARTITION/stats.parquet")
        if self.data.pass_rates is not None:  # before anything heavy: the file is there (a dry run says so too)
            stats_path(self.data.pass_rates)
        if self.adaptive.from_pass_rates and (self.adaptive.controller is None
                                              or self.adaptive.success != "exact_match"):
            raise ConfigError("adaptive.from_pass_rates needs adaptive.controller and adaptive.success=exact_match "
                              "(the partition counts exactly correct samples)")
        if self.dynamic.enabled:
            names = [r.name for r in self.rewards]
            if self.dynamic.metric not in ("reward", "exact_match", *names):
                raise UsageError(f"dynamic.metric={self.dynamic.metric!r}: reward, exact_match or a reward of this "
                                 f"run ({', '.join(names)}); add it to rewards with weight 0 to filter on it only")
            if (self.batch.num_processes or 1) > 1:
                raise ConfigError("dynamic.enabled with batch.num_processes > 1: the TRL trainer's dynamic sampling "
                                  "runs on one training process", hint="train multi-GPU with verl's "
                                  "algorithm.filter_groups (docs/training.md, Dynamic sampling), or one process")
        if self.run.resume not in (None, "auto", "last") and not str(self.run.resume).strip():
            raise UsageError("run.resume must be auto, last, a checkpoint path, or null")
        for key in ("output_dir", "run_name", "reward_weights"):
            if key in self.grpo:
                where = {"output_dir": "run.output_dir", "run_name": "run.name",
                         "reward_weights": "the weight of each entry in rewards"}[key]
                raise ConfigError(f"set {where} instead of grpo.{key} (the toolkit fills grpo.{key} from it)")

    def _validate_agent(self) -> None:
        if not str(self.agent.retriever).strip():
            raise ConfigError("agent.retriever is empty", hint="give an index directory or a server URL, or null")
        tools = self.agent.protocol == "tools"
        if tools != (self.agent.template == "search-tools"):
            raise ConfigError(f"agent.protocol={self.agent.protocol} with agent.template={self.agent.template}: the "
                              "search-tools prompt asks for tool calls, the others for <search> tags",
                              hint="protocol=tools goes with template=search-tools; protocol=tags with the others")
        if self.grpo.get("use_vllm") and not tools:
            raise ConfigError("agent.retriever with grpo.use_vllm=true: the search rollout generates with the policy "
                              "in the trainer's process (transformers)", hint="set grpo.use_vllm=false")
        self._validate_agent_curriculum()
        rest = str(self.agent.first_turn or "").replace("{{", "").replace("}}", "").replace("{question}", "")
        if "{" in rest or "}" in rest:
            raise ConfigError(f"agent.first_turn={self.agent.first_turn!r}: the only field it may name is "
                              "{question} (write a literal brace twice: {{ }})")
        if tools and self.agent.first_turn:  # the environment's first search (train/_tools.py): one it can run
            first_search_query(self.agent.first_turn, "a question")

    def _validate_agent_curriculum(self) -> None:
        """What moves a search agent's difficulty during training (docs/search-agents.md, "Difficulty"): a
        controller drives the level (hard-negatives) or p (withhold); p_schedule moves p without one."""
        a, controller = self.agent, self.adaptive.controller
        if a.p_schedule != "none" and a.difficulty != "withhold":
            raise ConfigError(f"agent.p_schedule={a.p_schedule} with agent.difficulty={a.difficulty}: the schedule "
                              "moves the withholding probability p", hint="set agent.difficulty=withhold")
        if self.dynamic.enabled and (controller is not None or a.p_schedule != "none"):
            raise ConfigError("dynamic.enabled with a search agent whose difficulty moves (adaptive.controller or "
                              "agent.p_schedule): not supported yet", hint="set dynamic.enabled=false")
        if controller is None:
            return
        if a.difficulty == "none":
            raise ConfigError("adaptive.controller with agent.difficulty=none: a search agent's controller drives the "
                              "level of its searches' hard negatives or the probability p its gold is withheld",
                              hint="set agent.difficulty=hard-negatives or withhold, or adaptive.controller=null")
        if a.p_schedule != "none":
            raise ConfigError(f"adaptive.controller with agent.p_schedule={a.p_schedule}: both would set p",
                              hint="keep one: agent.p_schedule=none, or adaptive.controller=null")
        if self.adaptive.from_pass_rates:
            raise ConfigError("adaptive.from_pass_rates with a search agent: not supported yet (the partition's "
                              "pass rates are not measured at search levels)", hint="set adaptive.from_pass_rates=false")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """Build from plain data (a resolved recipe), refusing unknown keys with a "did you mean"."""
        return bind(cls, d)


def check_recipe_rewards(data: dict[str, Any], where: str) -> None:
    """A composed train recipe's ``rewards``, checked where they enter, before the recipe is bound: each weight a
    finite number in -1e6..1e6 and each number of its kwargs finite (:func:`~rag_curriculum.rewards.reward_entries`),
    a refusal naming the recipe and the key (``recipe mine: rewards.0.weight = nan is not a finite number``). A value
    still to be interpolated (``${...}``) is checked once bound (:meth:`TrainConfig.validate`)."""
    rewards = data.get("rewards")
    if rewards is None or "${" in repr(rewards):
        return
    try:
        reward_entries(rewards, where=where)
    except ConfigError as e:
        raise UsageError(str(e), hint=e.hint) from None


DATA_CHECKS["train"]["rewards"] = check_recipe_rewards
