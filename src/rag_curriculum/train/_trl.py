"""TRL wiring: a :class:`~rag_curriculum.train._config.TrainConfig` becomes TRL's ``GRPOConfig`` and
``GRPOTrainer``, with the toolkit's rewards, curriculum order kept and checked, and the rows of every step logged.

torch, transformers and TRL are imported inside the functions only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import json
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._plumbing import expected_type, mask_secrets, redact_overrides, shards_digest
from ..agents import open_retriever
from ..errors import BatchError, ConfigError, CurriculumOrderError, SettingError, TokenizerError
from ..lengths import load_tokenizer
from ..models import model_settings, resolve_model
from ..prompts import completion_style
from ..rewards import reward_identity
from ..shards import load_hf_dataset, shared_path, validate_shards
from . import _dynamic as dyn
from ._agent_adaptive import make_search_hook, uses_search_curriculum
from ._batching import BatchPlan, apply_batch, plan_batches
from ._config import TrainConfig
from ._informative import PLOT_FILE as INFORMATIVE_PLOT
from ._informative import STEP_METRICS_FILE, InformativeCheck, informative_callback, resolve_profile
from ._ledger import (
    CHECKPOINT_PLAN,
    STEPS_FILE,
    StepLayout,
    StepRecorder,
    compact_progress_callback,
    non_finite_callback,
    nothing_to_learn_callback,
)
from ._lengths import check_trl_lengths, longest_rows
from ._memory import (
    PEAK_DIR,
    check_disk,
    check_memory,
    peak_memory_callback,
    resolve_deepspeed_file,
    run_estimate,
)
from ._order import RECIPE, check_index_order, curriculum_order, enforce, order_issues, report_tail, tail_rows
from ._pass_rates import apply_pass_rates, read_pass_rates, warm_start
from ._recipes import model_card, save_run_files
from ._resume import check_resume, read_checkpoint_plan
from ._rewards import reward_funcs_from_config, with_model_tokenizer
from ._rollout import rollout_from_config, search_prompts
from ._tools import environment_from_config
from .adaptive import LEVELS_FILE, PLOT_FILE, make_hook, plot_levels, read_levels

log = logging.getLogger(__name__)

#: What to do on a machine without a GPU (the paper's batch of 294 completions does not fit a CPU).
CPU_HINT = ("No GPU here: to try training on the CPU, run `curriculum train recipe=cpu-tiny` (a tiny model, 3 steps "
            "of 2 prompts x 2 generations, about a minute; data.shards=DIR for your curriculum), or give this recipe "
            "grpo.bf16=false grpo.use_vllm=false batch.prompts_per_step=2 batch.per_device_completions=2 "
            "grpo.num_generations=2 grpo.max_completion_length=32")
# GRPOConfig fields renamed across transformers versions: (new, old).
_ALIASES = (("activation_checkpointing", "gradient_checkpointing"),)
# GRPOConfig fields newer TRLs added, with the value that keeps what older TRLs (without the field) do: a recipe
# that asks for that value binds there too, the field dropped.
_LEGACY_VALUES = {"use_bias_correction_kl": False}


#: The attribute of an exception that stopped a training run holding the steps it logged before (a list of dicts,
#: as ``TrainResult.log_history``), so that the command prints its closing lines also when the run fails.
PARTIAL_HISTORY = "rag_curriculum_log_history"


def partial_history(e: BaseException) -> list[dict[str, Any]]:
    """The steps a failed run logged before ``e`` stopped it (empty when it logged none)."""
    return list(getattr(e, PARTIAL_HISTORY, None) or [])


@dataclass
class TrainResult:
    """What a run produced (:func:`train`)."""

    output_dir: Path
    """The run's folder (``run.output_dir``): config, plan, model card, checkpoints, the final model."""
    global_step: int
    """The optimiser steps trained."""
    training_loss: float
    """TRL's mean training loss."""
    plan: BatchPlan
    """The batch mapping: prompts per step, accumulation, the steps and the tail rows left unseen."""
    steps_file: Path | None
    """``curriculum_steps.jsonl``: every step's rows, checked against the curriculum (None: ``run.log_rows`` off)."""
    checkpoints: list[Path] = field(default_factory=list)
    """The checkpoint folders, in step order."""
    log_history: list[dict[str, Any]] = field(default_factory=list)
    """TRL's logged metrics, one dict per logging step (``curriculum/*`` included)."""
    levels_file: Path | None = None
    """``curriculum_levels.jsonl`` of an adaptive run (level target, level shown, success per batch)."""
    dynamic_file: Path | None = None
    """``curriculum_dynamic.jsonl`` of a run with dynamic sampling (rows generated, trained, dropped per batch)."""
    finished: bool = False
    """The run had already reached its steps: nothing was trained (see :func:`finished_message`)."""
    informative: dict[str, Any] | None = None
    """With a level profile: the prediction checked (``informative.json``: predicted against measured informative
    fraction per level and per quarter of the run, with 95% intervals)."""


def resolve_num_processes(cfg: TrainConfig) -> int:
    """``batch.num_processes``, else ``WORLD_SIZE`` (accelerate, torchrun), else 1."""
    if cfg.batch.num_processes:
        return int(cfg.batch.num_processes)
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def grpo_kwargs(cfg: TrainConfig, *, num_processes: int) -> dict[str, Any]:
    """The ``GRPOConfig`` keyword arguments of a run: the recipe's ``grpo`` section plus what the toolkit sets
    (no shuffle unless asked, the batch from ``batch``, reward weights, output dir, model loading)."""
    kw = dict(cfg.grpo)
    kw.setdefault("shuffle_dataset", False)
    if kw.setdefault("remove_unused_columns", False):
        raise ConfigError("grpo.remove_unused_columns=true drops the answers / gold_labels / passages columns the "
                         "rewards read; leave it false")
    kw = apply_batch(kw, prompts_per_step=cfg.batch.prompts_per_step, per_device=cfg.batch.per_device_completions,
                     num_processes=num_processes)
    kw["output_dir"] = cfg.run.output_dir
    kw["run_name"] = cfg.run.name
    kw["reward_weights"] = [float(r.weight) for r in cfg.rewards]
    init = {"dtype": cfg.model.dtype}
    for key in ("attn_implementation", "revision"):
        if getattr(cfg.model, key) is not None:
            init[key] = getattr(cfg.model, key)
    if cfg.model.trust_remote_code:
        init["trust_remote_code"] = True
    init.update(kw.get("model_init_kwargs") or {})
    kw["model_init_kwargs"] = init
    return kw


def _grpo_fields() -> dict[str, dataclasses.Field]:
    from trl import GRPOConfig

    return {f.name: f for f in dataclasses.fields(GRPOConfig) if f.init}


@functools.cache
def _grpo_types() -> dict[str, Any]:
    import typing

    from trl import GRPOConfig

    try:
        return typing.get_type_hints(GRPOConfig)
    except Exception:  # pragma: no cover - a forward reference this TRL cannot resolve: types left to TRL
        return {}


def _check_grpo_type(key: str, value: Any) -> None:
    """Refuse a value of the wrong type for a plain-typed ``GRPOConfig`` field (a number, a flag, a string), as the
    real run would fail on it later (``grpo.learning_rate=abc``: a TypeError in the optimiser); lists, dicts and
    enums are left to TRL's own checks."""
    hint = _grpo_types().get(key)
    want = None if hint is None else expected_type(value, hint, number_as_string=False)
    if want is not None:
        raise SettingError(f"grpo.{key}", value, f"a value of type {want} (trl.GRPOConfig)")


def check_grpo_keys(kw: Mapping[str, Any]) -> dict[str, Any]:
    """Refuse keys that are not ``GRPOConfig`` fields (with a "did you mean"); map renamed fields."""
    known = _grpo_fields()
    out = {}
    for key, value in kw.items():
        if key not in known:
            alias = next((b if a == key else a for a, b in _ALIASES if key in (a, b)), None)
            if alias in known:
                out[alias] = value
                continue
            if key in _LEGACY_VALUES and value == _LEGACY_VALUES[key]:
                log.debug("grpo.%s=%r is what this TRL does (it has no such field); dropped", key, value)
                continue
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f"; did you mean grpo.{close[0]}?" if close else ""
            raise ConfigError(f"grpo.{key} is not a field of trl.GRPOConfig{hint}")
        _check_grpo_type(key, value)
        out[key] = value
    for new, old in _ALIASES:  # both names known: transformers lets the new one win, silently
        if new in out and old in out:
            if out[new] != out[old]:
                raise ConfigError(f"grpo.{old}={out[old]!r} and grpo.{new}={out[new]!r} are the same setting (its old "
                                 f"and new name) and disagree; set grpo.{new} only (the old name is ignored)")
            del out[old]
    return out


def bind_grpo_config(kw: Mapping[str, Any], *, cpu: bool = False) -> Any:
    """``trl.GRPOConfig(**kw)``, after checking the keys. ``cpu=True`` binds a GPU recipe on a machine without one
    (bf16/fp16 off, ``use_cpu``) to check that it is valid."""
    from trl import GRPOConfig

    kw = check_grpo_keys(kw)
    if cpu:
        kw = {**kw, "bf16": False, "fp16": False, "use_cpu": True}
    return GRPOConfig(**kw)


def check_recipe(cfg: TrainConfig, *, num_processes: int | None = None, num_rows: int | None = None
                 ) -> tuple[Any, BatchPlan]:
    """Bind a config to TRL without loading data or models: the order checks (raised as errors whatever the
    policy), the batch plan, and the ``GRPOConfig`` (on the CPU when there is no GPU). For tests and --dry-run."""
    cfg.validate()
    n = num_processes or resolve_num_processes(cfg)
    kw = grpo_kwargs(cfg, num_processes=n)
    plan = plan_batches(kw, num_processes=n, num_rows=num_rows)
    errors = [i for i in order_issues(kw, plan) if i.severity == "error"]
    if errors:
        raise CurriculumOrderError("; ".join(i.message for i in errors))
    import torch

    return bind_grpo_config(kw, cpu=not torch.cuda.is_available()), plan


def shards_fingerprint(manifest: Mapping[str, Any]) -> str:
    """A short hash naming the exact rows (the content hash of every shard, in order)."""
    return shards_digest(manifest, length=16, missing=None)


def _checkpoints(output_dir: Path) -> list[Path]:
    found = [p for p in output_dir.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
    return sorted(found, key=lambda p: int(p.name.split("-")[-1]))


#: How to start afresh instead of resuming (``run.resume=auto`` continues whatever ``run.output_dir`` holds).
FRESH_RUN_HINT = ("to start a fresh run, give it another name: run.name=NEW (its output_dir is outputs/train/NEW), or "
                  "another run.output_dir; run.resume=PATH resumes one given checkpoint")


def resolve_resume(cfg: TrainConfig) -> str | None:
    """The checkpoint to resume from, per ``run.resume`` (see :class:`~rag_curriculum.train._config.RunConfig`)."""
    out = Path(cfg.run.output_dir)
    existing = _checkpoints(out) if out.is_dir() else []
    mode = cfg.run.resume
    if mode is None or str(mode).lower() in ("null", "none", "false"):
        if existing:
            raise ConfigError(f"{out} already holds checkpoints ({existing[-1].name}): run.resume=null starts a run "
                              "only in an output_dir without checkpoints",
                              hint="continue it with run.resume=auto, or " + FRESH_RUN_HINT)
        return None
    if mode == "auto":
        return str(existing[-1]) if existing else None
    if mode in ("last", "true", "True"):
        if not existing:
            raise ConfigError(f"run.resume={mode}: no checkpoint-* in {out}")
        return str(existing[-1])
    path = Path(str(mode)).expanduser()
    if not path.is_dir():
        raise ConfigError(f"run.resume={mode}: no such checkpoint directory")
    return str(path)


def _checkpoint_step(checkpoint: str) -> int | str:
    """The optimiser step a checkpoint was saved at (its trainer_state.json, else its folder name)."""
    try:
        return int(json.loads((Path(checkpoint) / "trainer_state.json").read_text()).get("global_step"))
    except (OSError, ValueError, TypeError):
        tail = Path(checkpoint).name.rsplit("-", 1)[-1]
        return int(tail) if tail.isdigit() else "?"


def _check_resume_plan(checkpoint: str, plan: Mapping[str, Any], args: Any, policy: str,
                       order: Sequence[Any] | None = None) -> None:
    """Resuming on other rows, or with a batch that would continue elsewhere in the curriculum (another row, or
    inside a generation batch), would skip or repeat rows: refuse (or warn) before anything is generated, with the
    numbers (:func:`._resume.check_resume`)."""
    saved = read_checkpoint_plan(checkpoint)
    if saved is None:
        log.warning("%s has no %s: cannot check that the run being resumed trained on the same curriculum",
                    checkpoint, CHECKPOINT_PLAN)
        return
    problems = [f"{k} was {saved.get(k)!r}, now {plan.get(k)!r}" for k in ("shards_fingerprint", "num_rows")
                if k in saved and saved.get(k) != plan.get(k)]
    if "retriever" in saved and saved["retriever"] != plan.get("retriever"):
        was, now = (((x or {}).get("index") or x or {}).get("fingerprint") for x in (saved["retriever"], plan.get("retriever")))
        problems.append(f"its searches went to another index (fingerprint {str(was)[:12]}, now {str(now)[:12]})")
    hint = FRESH_RUN_HINT + "; data.order_policy=warn resumes anyway"
    if problems:
        msg = (f"resuming {checkpoint} would skip or repeat curriculum rows: " + "; ".join(problems)
               + " (keep the data, batch and retriever of the run being resumed)")
        if policy == "refuse":
            raise CurriculumOrderError(msg, hint=hint)
        log.warning("CURRICULUM ORDER: %s", msg)
        return
    check_resume(checkpoint, args, plan, policy=policy, order=order, vocab=RECIPE, hint=hint)


def _trained_order(cfg: TrainConfig, indices: Sequence[Any] | None) -> list[Any] | None:
    """The ``curriculum_index`` order the run's steps are checked against: the dataset's when a pass-rate band put it
    in that order on purpose, else the curriculum's (shards out of order, trained under data.order_policy=warn, are
    checked against the curriculum, not against themselves)."""
    if not indices:
        return None
    return list(indices) if cfg.data.pass_rates is not None else curriculum_order(indices)


def curriculum_classes() -> tuple[type, type]:
    """The toolkit's ``GRPOTrainer`` and its callback (:mod:`._trainer`, which imports TRL and transformers)."""
    from ._trainer import CurriculumCallback, CurriculumGRPOTrainer

    return CurriculumGRPOTrainer, CurriculumCallback


def load_curriculum(cfg: TrainConfig):
    """The shards as a ``datasets.Dataset`` in curriculum order (checked), and their manifest."""
    manifest = validate_shards(cfg.data.shards, check_hashes=cfg.data.verify)
    if manifest.get("kind") not in (None, "curriculum"):  # an evaluation set (distractor / ideal / retrieved)
        raise ConfigError(f"data.shards={cfg.data.shards} holds a {manifest.get('kind')!r} evaluation set, not a "
                          "training curriculum", hint="train on a curriculum (`curriculum build`, --setting "
                          "curriculum, the default) and keep the evaluation sets for `curriculum eval`")
    if manifest.get("num_rows") == 0:  # an empty partition bucket (a weak model answers nothing): nothing to train
        raise ConfigError(f"data.shards={cfg.data.shards} holds no rows: nothing to train on",
                          hint="an empty partition bucket; train on another bucket, or partition more questions")
    dataset = load_hf_dataset(cfg.data.shards, verify=False)
    if cfg.data.max_rows is not None and cfg.data.max_rows < len(dataset):
        dataset = dataset.select(range(cfg.data.max_rows))  # a prefix: the order is kept
    if "prompt" not in dataset.column_names:
        raise ConfigError(f"{cfg.data.shards}: no 'prompt' column; these are not rag-curriculum shards")
    return dataset, manifest


@dataclass
class PreparedRun:
    """Everything a run checks and makes before its model loads (:func:`prepare`): what ``train`` goes on with, and
    what ``curriculum train --dry-run`` reports. Nothing on disk is written or removed by preparing."""

    cfg: TrainConfig
    dataset: Any
    manifest: Mapping[str, Any]
    plan: BatchPlan
    args: Any
    """TRL's ``GRPOConfig`` (bound on the CPU by a dry run on a machine without a GPU)."""
    tail: dict[str, Any]
    run_plan: dict[str, Any]
    resume: str | None
    num_processes: int
    lengths: Any = None
    lengths_error: Exception | None = None
    """Why a dry run could not count the prompt lengths (a real run stops on it)."""
    retriever: Any = None
    hook: Any = None
    dynamic: Any = None
    search_curriculum: bool = False
    model_path: str = ""
    """What the trainer loads: ``model.name_or_path``, or the folder a ``.gguf`` file was converted into."""
    prompt_style: str = "chat"
    """``chat`` (the model's chat template renders the prompts) or ``completion`` (a base model without one:
    :func:`rag_curriculum.prompts.completion_prompt`)."""
    finished: int | None = None
    """The step of the checkpoint a finished run stopped at (it reached the run's steps): nothing is left to train."""
    profile: Any = None
    """The level profile each step's informative fraction is checked against (``data.profile``, else the build's),
    or None."""
    profile_source: str | None = None
    disk: Any = None
    """The disk the run's checkpoints need at once (``_memory.DiskNeed``; None: unknown or nothing saved)."""
    free_disk: float | None = None
    """Free GiB at ``run.output_dir``."""


def prepare(cfg: TrainConfig, *, dry_run: bool = False) -> PreparedRun:
    """Every check of a run, in the order the run makes them, before any model loads: the config, the shards and
    their order, the batch (a curriculum shorter than one batch is refused), the order settings, ``GRPOConfig``,
    the prompt lengths against its limits, the retriever (opened, its index fingerprinted), the resume point (the
    same rows, batch and index as the run being resumed; a run that already reached its steps is ``finished``),
    the adaptive controller or the search curriculum's hook and dynamic sampling. ``train`` and
    ``curriculum train --dry-run`` both call it, so a dry run refuses what the real run refuses.

    ``dry_run``: the order checks' errors are raised under either ``data.order_policy``; ``GRPOConfig`` is bound on
    the CPU when there is no GPU (a GPU recipe is checked on a laptop); the number of running processes is not
    compared with the plan's (a dry run is not launched); a tokenizer that cannot be loaded is reported in
    ``lengths_error`` instead of raised.

    Args:
        cfg: the run's settings.
        dry_run: check as ``curriculum train --dry-run`` does (see above).

    Returns:
        Everything the run checked and made (dataset, batch plan, ``GRPOConfig``, resume point, ...); nothing on
        disk is written or removed.

    Raises:
        CurriculumError: what :func:`train` raises before its model loads, for the same reasons.

    Examples:
        ```python
        from rag_curriculum.train import compose_train_config, prepare

        run = prepare(compose_train_config("rag-rl-min-max"), dry_run=True)   # needs outputs/musique-min-max
        run.plan.steps_per_epoch, run.resume, run.finished
        ```
    """
    cfg.validate()
    num_processes = resolve_num_processes(cfg)
    dataset, manifest = load_curriculum(cfg)
    model = resolve_model(cfg.model.name_or_path)  # a .gguf file: converted once into a cached folder
    if cfg.agent.retriever is not None:  # a search agent: the prompt is the agent's, made from the question
        dataset = search_prompts(dataset, cfg.agent.template)
    if cfg.adaptive.controller is None and (manifest.get("config") or {}).get("schedule") == "adaptive":
        log.info("%s is an adaptive curriculum and no adaptive.controller is set: its rows are trained at the "
                 "level they are stored at (K)", cfg.data.shards)
    indices = list(dataset["curriculum_index"]) if "curriculum_index" in dataset.column_names else None
    levels = list(dataset["level"]) if "level" in dataset.column_names else None
    problem = check_index_order(indices) if indices is not None else None
    if problem is not None:
        enforce([problem], "refuse" if dry_run else cfg.data.order_policy)
    pass_rates = None
    if cfg.data.pass_rates is not None:  # the measured pass rates: a learnable band first (docs/training.md)
        dataset, pass_rates = apply_pass_rates(dataset, cfg.data)
        indices = list(dataset["curriculum_index"]) if indices is not None else None
        levels = list(dataset["level"]) if levels is not None else None
    longest = None
    if cfg.data.longest_rows is not None:  # the pre-flight: the run's worst rows for memory, in their order
        dataset, longest = longest_rows(cfg, dataset, manifest, cfg.data.longest_rows)
        indices = list(dataset["curriculum_index"]) if indices is not None else None
        levels = list(dataset["level"]) if levels is not None else None

    kw = grpo_kwargs(cfg, num_processes=num_processes)
    plan = plan_batches(kw, num_processes=num_processes, num_rows=len(dataset))
    if not plan.steps_per_epoch:
        raise BatchError(f"data.shards={cfg.data.shards}: {len(dataset)} row(s) to train on, fewer than one batch of "
                         f"{plan.prompts_per_generation} prompts; nothing would be trained",
                         hint=f"lower batch.prompts_per_step (now {cfg.batch.prompts_per_step:g}) to at most "
                              f"{len(dataset)}, or train on a curriculum of more rows")
    resume = resolve_resume(cfg)
    issues = order_issues(kw, plan, resuming=resume is not None)
    if dry_run:  # errors under either policy; the warnings are the caller's to print
        errors = [i for i in issues if i.severity == "error"]
        if errors:
            raise CurriculumOrderError("; ".join(i.message for i in errors))
    else:
        enforce(issues, cfg.data.order_policy)
    tail = tail_rows(plan, indices, levels)
    log.info("batch: %s", plan.describe())

    import torch

    try:
        args = bind_grpo_config(kw, cpu=dry_run and not torch.cuda.is_available())
    except ValueError as e:
        if "bf16" in str(e) and not isinstance(e, SettingError):  # TRL's own "bf16 needs a GPU"
            raise ConfigError(f"{e}. {CPU_HINT}") from None
        raise
    if not dry_run and args.world_size != num_processes:
        raise BatchError(f"the batch was planned for {num_processes} process(es) but {args.world_size} are running; "
                         "launch with accelerate / torchrun (they set WORLD_SIZE) or set batch.num_processes")
    prompt_style = model_prompt_style(cfg, model.path, dry_run=dry_run)  # chat, or a base model's completion text
    # Every prompt must fit the run's limits: refused here, before the model is loaded, instead of truncated.
    lengths, lengths_error = None, None
    try:
        lengths = check_trl_lengths(cfg, args, dataset, manifest, say=not dry_run)  # a dry run prints it
    except TokenizerError as e:
        if not dry_run:
            raise
        lengths_error = e
    # an estimate on the GPU it runs on (a warning, with what fits, when it does not), recorded for the pre-flight
    longest_prompt = lengths.max_tokens if lengths is not None else None
    if not dry_run:  # a launcher config's DeepSpeed file, found where this process runs (accelerate reads it later)
        resolve_deepspeed_file()
    memory = (run_estimate if dry_run else check_memory)(cfg, args, num_processes, longest_prompt)
    # the disk the checkpoints need at once, against the free space at run.output_dir: refused when short
    disk, free = check_disk(cfg, args, num_processes, dry_run=dry_run, total_steps=plan.total_steps)
    run_plan = {  # shared with the model (its card): paths as shared_path gives them, never the machine's
        **plan.to_dict(), "tail": tail, "shards": shared_path(cfg.data.shards),
        "shards_fingerprint": shards_fingerprint(manifest), "resume_from": shared_path(resume),
        **{k: shared_path(v) if k in ("model", "converted_to") else v for k, v in model.record().items()},
        "model_settings": model_settings(model.path),
        "longest_prompt_tokens": lengths.max_tokens if lengths is not None else None,
    }
    if memory is not None:
        run_plan["memory_estimate"] = memory.to_dict()
    if disk is not None:
        run_plan["disk"] = {"checkpoint_gib": round(disk.each_gib, 3), "checkpoints_at_once": disk.kept,
                            "final_model_gib": round(disk.final_gib, 3), "need_gib": round(disk.total_gib, 3),
                            "free_gib": round(free or 0.0, 1), "layout": disk.layout}
    if longest is not None:
        run_plan["longest_rows"] = longest
    if prompt_style == "completion":
        run_plan["prompt_style"] = completion_style()
    if pass_rates is not None:
        run_plan["pass_rates"] = pass_rates
    profile, profile_source = resolve_profile(cfg.data.profile, cfg.data.shards, manifest)
    if profile is not None:
        run_plan["informative_profile"] = shared_path(profile_source)
        templates = sorted(dataset.unique("template")) if "template" in dataset.column_names else None
        _announce_profile(profile, profile_source, cfg, model.path, args, templates)
    retriever = None
    if cfg.agent.retriever is not None:  # which index the searches hit (its content, not where it is), checked on resume
        retriever = open_retriever(cfg.agent.retriever, timeout=cfg.agent.retriever_timeout,
                                   retries=cfg.agent.retriever_retries)
        run_plan["retriever"] = mask_secrets({k: v for k, v in retriever.describe().items() if k not in ("path", "url")})
    finished = None
    if resume is not None:
        _check_resume_plan(resume, run_plan, args, cfg.data.order_policy,
                           order=_trained_order(cfg, indices))
        step = _checkpoint_step(resume)
        if isinstance(step, int) and plan.total_steps is not None and step >= plan.total_steps:
            finished = step
        else:
            log.info("resuming from checkpoint %s (step %s)", resume, step)
    out = Path(args.output_dir)
    hook = None
    search_curriculum = uses_search_curriculum(cfg)  # a search agent's level or p moved by a controller / schedule
    if cfg.adaptive.controller is not None or search_curriculum:  # before the model loads: checks the shards
        levels_file = out / LEVELS_FILE if args.process_index == 0 else None
        hook = (make_search_hook if search_curriculum else make_hook)(
            cfg, manifest, num_generations=args.num_generations, seed=args.seed, levels_file=levels_file)
        if cfg.adaptive.from_pass_rates and resume is None:  # a resumed run restores the controller instead
            K_of = hook.renderer.K_of
            keys = [(str(i), K_of({"id": i, "data_source": s}))
                    for i, s in zip(dataset["id"], dataset["data_source"], strict=True)]
            run_plan["warm_start"] = warm_start(hook.controller, keys,
                                                read_pass_rates(cfg.data.pass_rates))
    dynamic = None
    if cfg.dynamic.enabled:
        if num_processes > 1:
            raise ConfigError(f"dynamic.enabled on {num_processes} processes: the TRL trainer's dynamic sampling runs "
                              "on one training process", hint="train multi-GPU with verl's algorithm.filter_groups "
                              "(docs/training.md, Dynamic sampling)")
        dynamic_file = out / dyn.ROWS_FILE if args.process_index == 0 else None
        dynamic = dyn.make_hook(cfg, num_rows=len(dataset), num_generations=args.num_generations,
                                rows_file=dynamic_file)
    return PreparedRun(cfg=cfg, dataset=dataset, manifest=manifest, plan=plan, args=args, tail=tail,
                       run_plan=run_plan, resume=resume, num_processes=num_processes, lengths=lengths,
                       lengths_error=lengths_error, retriever=retriever, hook=hook, dynamic=dynamic,
                       search_curriculum=search_curriculum, model_path=model.path, prompt_style=prompt_style,
                       finished=finished, profile=profile, profile_source=profile_source, disk=disk,
                       free_disk=free)


def _announce_profile(profile: Any, source: str | None, cfg: TrainConfig, model_path: str, args: Any,
                      templates: Sequence[str] | None = None) -> None:
    """Say which profile the run is checked against, and what differs between it and this run, in one line: the
    model, the reward, the prompt template of the shards' rows, the sampling (temperature, top-p, completion
    length, G). (A profile of other datasets is refused before: :func:`resolve_profile`.)"""
    log.info("each step's informative fraction is checked against the level profile %s", source)
    made = str(profile.model or "").rstrip("/").split("/")[-1].removesuffix(".gguf").lower()
    ours = {str(p or "").rstrip("/").split("/")[-1].removesuffix(".gguf").lower()
            for p in (cfg.model.name_or_path, model_path)}
    differ = [f"model {profile.model} in the profile, {cfg.model.name_or_path} here"] if made and made not in ours else []
    if hasattr(profile, "differences"):
        differ += profile.differences(
            rewards=reward_identity([dataclasses.asdict(r) for r in cfg.rewards]),
            sampling={"temperature": args.temperature, "top_p": args.top_p,
                      "max_tokens": args.max_completion_length, "group_size": args.num_generations,
                      "template": list(templates) if templates else None})
    if differ:
        log.warning("the level profile %s was made with other settings than this run's: %s; its predictions are "
                    "for the profile's", source, "; ".join(differ))


def model_prompt_style(cfg: TrainConfig, path: str, *, dry_run: bool = False) -> str:
    """``chat`` when the model's tokenizer has a chat template, else ``completion`` (a base model: its prompts are
    rendered by :func:`rag_curriculum.prompts.completion_prompt` and each completion scored after its response
    prefix). A base model with a setting that needs a chat template is refused in one line. A tokenizer that cannot
    be read here (a Hub id offline) counts as ``chat`` in a dry run; the real run loads it."""
    try:
        tok = load_tokenizer(path, revision=cfg.model.revision, trust_remote_code=cfg.model.trust_remote_code,
                             option="model.name_or_path")
    except TokenizerError:
        if dry_run:
            return "chat"
        raise
    if getattr(tok, "chat_template", None):
        return "chat"
    if cfg.agent.retriever is not None:
        raise ConfigError(f"model.name_or_path={cfg.model.name_or_path}: a base model (its tokenizer has no chat "
                          f"template), and a search agent's rollout (agent.protocol={cfg.agent.protocol}) renders its "
                          "turns with the chat template", hint="train the search agent from a model with a chat "
                          "template (an instruct model, or a warm start of one); base models train closed-context")
    if cfg.grpo.get("chat_template_kwargs"):
        raise ConfigError(f"grpo.chat_template_kwargs is set, but {cfg.model.name_or_path} has no chat template to "
                          "pass them to (a base model: its prompts are rendered as completion text)",
                          hint="drop grpo.chat_template_kwargs")
    return "completion"


def frozen_embeddings_model(path: str, args: Any) -> Any:
    """The model loaded as TRL would (``args.model_init_kwargs``), its token embeddings frozen (an output layer tied to
    them with them); TRL then gets the model itself, so ``model_init_kwargs`` is cleared (it would be ignored)."""
    from transformers import AutoModelForCausalLM

    kwargs = dict(args.model_init_kwargs or {})
    dtype = kwargs.get("dtype")
    if isinstance(dtype, str) and dtype != "auto":
        import torch

        kwargs["dtype"] = getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    model.get_input_embeddings().weight.requires_grad_(False)
    out = model.get_output_embeddings()
    if out is not None and out.weight is not model.get_input_embeddings().weight:
        log.info("model.freeze_embeddings: the output layer is not tied to the embeddings and keeps training")
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    log.info("model.freeze_embeddings: %s of %s weights frozen", f"{frozen:,}",
             f"{sum(p.numel() for p in model.parameters()):,}")
    args.model_init_kwargs = None
    return model


def finished_message(run: PreparedRun) -> str:
    """What a run that already reached its steps says instead of training."""
    return (f"{run.args.output_dir} is a finished run: {Path(str(run.resume)).name} is step {run.finished} of its "
            f"{run.plan.total_steps}; nothing to train. To train further, raise grpo.max_steps (or "
            "grpo.num_train_epochs); to start a new run, give it another name: run.name=NEW")


def _finished_result(run: PreparedRun) -> TrainResult:
    out = Path(run.args.output_dir)
    history: list[dict[str, Any]] = []
    try:
        history = list(json.loads((Path(str(run.resume)) / "trainer_state.json").read_text()).get("log_history") or [])
    except (OSError, ValueError):
        pass
    losses = [h["train_loss"] for h in history if "train_loss" in h] or [h["loss"] for h in history if "loss" in h]
    steps_file = out / STEPS_FILE
    return TrainResult(output_dir=out, global_step=int(run.finished or 0),
                       training_loss=float(losses[-1]) if losses else float("nan"), plan=run.plan,
                       steps_file=steps_file if steps_file.exists() else None, checkpoints=_checkpoints(out),
                       log_history=history, finished=True)


def _versions() -> dict[str, str]:
    """The versions a model card names: the toolkit's, TRL's and transformers'."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("rag-curriculum", "trl", "transformers"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:  # pragma: no cover - a source checkout without metadata
            pass
    return out


def train(cfg: TrainConfig, *, overrides: Sequence[str] = (), callbacks: Sequence[Any] = ()) -> TrainResult:
    """Train with TRL's GRPOTrainer on the curriculum in ``cfg.data.shards``, in curriculum order.

    Checks before anything heavy is built (:func:`prepare`): the shards and their order, the batch mapping (and the
    tail rows it leaves unseen), every setting that would reorder the curriculum (refused under
    ``data.order_policy=refuse``), the prompt lengths against the generation limits (refused: see :mod:`.lengths`),
    the resume point. A run whose last checkpoint already reached the run's steps trains nothing and says so
    (``TrainResult.finished``). Then saves the resolved config and plan into ``run.output_dir`` and trains, checking
    every step's rows against the curriculum and logging their level and hops.

    ``curriculum train`` calls this (exported as ``rag_curriculum.run_training``).

    Args:
        cfg: the run's settings, usually composed from a recipe (:func:`compose_train_config`).
        overrides: the command-line overrides, recorded in ``train_config.yaml`` (secrets masked).
        callbacks: more ``transformers.TrainerCallback`` objects for the trainer.

    Returns:
        What the run produced: its folder, steps, loss, batch plan, checkpoints and log history.

    Raises:
        ConfigError: settings that cannot be used (no shards, no reward, an evaluation set as the curriculum, a
            GPU-only setting on a CPU, ...).
        ShardError: shards that are missing or do not match their manifest.
        BatchError: a batch TRL cannot make, or a curriculum shorter than one batch.
        CurriculumOrderError: a setting or a step that breaks the curriculum order (``data.order_policy=refuse``).
        PromptLengthError: prompts longer than the run's generation limits.
        TokenizerError: the model's tokenizer cannot be loaded to count the prompts.
        ModelFileError: a ``.gguf`` model file that cannot be used.

    Examples:
        ```python
        from rag_curriculum import run_training
        from rag_curriculum.train import compose_train_config

        cfg = compose_train_config("rag-rl-min-max", ["data.shards=outputs/musique-min-max", "grpo.max_steps=10"])
        result = run_training(cfg)
        result.output_dir, result.global_step, result.steps_file   # steps_file: the rows of every step
        ```
    """
    run = prepare(cfg)
    if run.finished is not None:
        log.warning("%s", finished_message(run))
        return _finished_result(run)
    dataset, plan, args, resume, run_plan = run.dataset, run.plan, run.args, run.resume, run.run_plan
    hook, dynamic, retriever, search_curriculum = run.hook, run.dynamic, run.retriever, run.search_curriculum
    indices = list(dataset["curriculum_index"]) if "curriculum_index" in dataset.column_names else None
    report_tail(run.tail, run.manifest.get("trainer_tail"))
    out = Path(args.output_dir)
    steps_file = out / STEPS_FILE if cfg.run.log_rows else None
    if hook is not None and hook.levels_file is not None and resume is None and hook.levels_file.exists():
        hook.levels_file.unlink()
    if dynamic is not None and dynamic.rows_file is not None and resume is None and dynamic.rows_file.exists():
        dynamic.rows_file.unlink()
    if args.process_index == 0:  # the resolved config, the plan and the overrides, secrets masked (one rule)
        save_run_files(TrainConfig.from_dict(mask_secrets(cfg.to_dict())), out, plan=mask_secrets(run_plan),
                       overrides=redact_overrides(overrides))
        if steps_file is not None and resume is None and steps_file.exists():
            steps_file.unlink()  # a fresh run: drop the record of an earlier one that never checkpointed
        if resume is None and (out / STEP_METRICS_FILE).exists():
            (out / STEP_METRICS_FILE).unlink()
        if resume is None and (out / PEAK_DIR).is_dir():  # a fresh run's peaks are its own
            shutil.rmtree(out / PEAK_DIR)

    reward_funcs, _ = reward_funcs_from_config([dataclasses.asdict(r) for r in cfg.rewards])
    reward_funcs = with_model_tokenizer(reward_funcs, run.model_path)  # search-r1 decodes as the trainer
    trainer_cls, callback_cls = curriculum_classes()
    usable = len(dataset) - (plan.unseen_rows or 0)
    if dynamic is not None:  # the rows trained skip the dropped ones: the filter keeps (and records) the order
        callbacks = [*callbacks, dyn.callback_class()(dynamic, plan.to_dict())]
    recorder = StepRecorder(_trained_order(cfg, indices) if dynamic is None else None, usable=usable,
                            policy=cfg.data.order_policy, path=steps_file if args.process_index == 0 else None,
                            layout=StepLayout.from_plan(plan.to_dict()), words=RECIPE)
    check = InformativeCheck(run.profile, args.num_generations, source=run.profile_source,
                             path=out / STEP_METRICS_FILE if args.process_index == 0 else None,
                             refresh=cfg.data.profile_refresh, prior_weight=cfg.data.profile_prior_weight,
                             drift_decay=cfg.data.profile_drift_decay)
    recorder.check = check
    extra: dict[str, Any] = {}
    if cfg.agent.retriever is not None and cfg.agent.protocol == "tools":  # TRL's native tool calling
        extra["environment_factory"] = environment_from_config(cfg.agent, seed=args.seed, retriever=retriever)
        log.info("search agent (tool calling): retriever %s, top_k %s", mask_secrets(str(cfg.agent.retriever)),
                 cfg.agent.top_k)
    elif cfg.agent.retriever is not None:
        extra["rollout_func"] = rollout_from_config(cfg.agent, seed=args.seed, retriever=retriever)
        log.info("search agent: retriever %s, %s", mask_secrets(str(cfg.agent.retriever)),
                 mask_secrets(extra["rollout_func"].config.to_dict()))
    model: Any = run.model_path
    if cfg.model.freeze_embeddings:
        model = frozen_embeddings_model(run.model_path, args)
    trainer = trainer_cls(
        model=model, reward_funcs=reward_funcs, args=args, train_dataset=dataset, recorder=recorder,
        callbacks=[callback_cls(recorder, run_plan, hooks=[hook, dynamic], resume=resume), *callbacks], **extra,
    )
    card_plan, versions = mask_secrets(run_plan), _versions()
    trainer.card = lambda step: model_card(cfg, card_plan, run.manifest, step=step, versions=versions)
    from transformers.trainer_callback import ProgressCallback

    if trainer.pop_callback(ProgressCallback) is not None:  # one compact line per step, not TRL's dict
        trainer.add_callback(compact_progress_callback())
    trainer.add_callback(nothing_to_learn_callback())  # a step with nothing to learn says so, once
    trainer.add_callback(non_finite_callback())  # a NaN step stops the run before its weights are saved
    trainer.add_callback(peak_memory_callback(out))  # each training GPU's peak, for the pre-flight (CUDA only)
    trainer.informative = check  # each group scored: informative or not, for the step's check
    trainer.add_callback(informative_callback(check))
    if hook is not None:
        trainer.adaptive = hook
        if search_curriculum:
            hook.bind(trainer)
    if dynamic is not None:
        trainer.dynamic = dynamic
    try:
        output = trainer.train(resume_from_checkpoint=resume)
    except BaseException as e:  # the steps logged before it stopped, for the run's closing lines
        with contextlib.suppress(AttributeError, TypeError):
            setattr(e, PARTIAL_HISTORY, list(trainer.state.log_history))
        raise
    if search_curriculum and cfg.adaptive.plot:
        hook.plot(out, title=f"{cfg.adaptive.controller or cfg.agent.p_schedule}, {cfg.agent.difficulty}, "
                             f"success = {cfg.adaptive.success}")
    elif hook is not None and hook.levels_file is not None and cfg.adaptive.plot and hook.levels_file.exists():
        plot_levels(read_levels(hook.levels_file), out / PLOT_FILE, K=hook.controller.K,
                    title=f"{cfg.adaptive.controller} controller, success = {cfg.adaptive.success}",
                    success_range=(0.0, 1.0) if cfg.adaptive.success == "exact_match" else None)
    if dynamic is not None and dynamic.rows_file is not None and cfg.dynamic.plot and dynamic.rows_file.exists():
        dyn.plot_dynamic(dyn.read_records(dynamic.rows_file), out / dyn.PLOT_FILE,
                         title=f"dynamic sampling on {cfg.dynamic.metric} (spread > {cfg.dynamic.max_spread:g})")
    informative = check.finish(out) if args.process_index == 0 else None
    if informative is not None:
        refreshed = (informative.get("refreshed") or {}).get("whole", {}).get("predicted")
        log.info("the informative fraction: %.3f measured, %.3f predicted%s over %d groups (%s, %s)",
                 informative["whole"]["measured"], informative["whole"]["predicted"],
                 "" if refreshed is None else f", {refreshed:.3f} refreshed", informative["whole"]["groups"],
                 out / "informative.json", out / INFORMATIVE_PLOT)
    if cfg.run.save_final:
        trainer.save_model(str(out))
    trainer.create_model_card()  # the card of the run as it ended (its steps)
    log.info("trained %d steps (loss %.4g); %d of %d steps' rows were out of curriculum order",
             trainer.state.global_step, output.training_loss, recorder.out_of_order, len(recorder.records))
    return TrainResult(
        output_dir=out, global_step=trainer.state.global_step, training_loss=float(output.training_loss),
        plan=plan, steps_file=steps_file, checkpoints=_checkpoints(out), log_history=list(trainer.state.log_history),
        levels_file=hook.levels_file if hook is not None else None,
        dynamic_file=dynamic.rows_file if dynamic is not None else None, informative=informative,
    )
