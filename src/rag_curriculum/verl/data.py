"""What a verl run is pointed at, made from a curriculum; ``python -m rag_curriculum.verl`` runs each from a
launch script (``recipes/verl/*.sh``)::

    python -m rag_curriculum.verl train-files outputs/musique-min-max   # ['/abs/part-00000.parquet', ...]
    python -m rag_curriculum.verl reward-path                           # /.../rag_curriculum/verl/rewards.py
    python -m rag_curriculum.verl reward-manager-path                   # /.../verl/reward_manager.py (search-r1)
    python -m rag_curriculum.verl lengths outputs/musique-min-max --model MODEL      # the longest prompt
    python -m rag_curriculum.verl check-lengths outputs/musique-min-max --model MODEL \\
        --prompt-length 6144 --response-length 800 [--dry-run] [VERL_OVERRIDES...]
    python -m rag_curriculum.verl steps outputs/musique-min-max --train-batch-size 42 [VERL_OVERRIDES...]
    python -m rag_curriculum.verl agent-data outputs/musique-min-max agent.parquet [--template search-r1] [--overwrite]
    python -m rag_curriculum.verl layout --prompts 42 --rollouts 7 --nnodes 1 --gpus-per-node 7
    python -m rag_curriculum.verl shared-paths --nnodes 2 SHARDS=/nfs/mm OUT=/nfs/run --installed REWARD_PY=/...

**The layout** (``layout``): verl splits a step's ``data.train_batch_size x rollout.n`` sequences evenly over
every GPU (``trainer.nnodes x trainer.n_gpus_per_node``) and refuses the run otherwise; ``layout`` refuses it
first (exit status 2), offering what keeps the step's sequences first (nodes and GPUs per node), then the prompts
per step that change them, each with its sequences (:func:`verl_layout`).

**Across nodes** (``shared-paths``): the curriculum, the model (a directory), the checkpoints' folder must be on
every node (absolute paths on a filesystem every node mounts), the reward module at the same path in every node's
install; a relative path, or one on the head's own disk, is refused (exit status 2) unless ``--shared`` says the
files are at the same paths on every node (:func:`check_shared_paths`).

**The shard files** (``train-files``), in curriculum order as a Hydra list for ``data.train_files``: verl
concatenates them in list order and, with ``data.shuffle=False``, walks the rows with a sequential sampler
(dropping the incomplete last batch). **The reward file** (``reward-path``) for
``reward.custom_reward_function.path``: :mod:`rag_curriculum.verl.rewards`.

**Prompt lengths.** ``check-lengths`` refuses (exit status 2) a curriculum whose longest prompt exceeds
``data.max_prompt_length`` or ``actor_rollout_ref.rollout.prompt_length`` (or, with the response,
``actor_rollout_ref.rollout.max_model_len``), naming the rows, their levels and the setting: verl 0.9.1
left-truncates such a prompt with a warning only, even under ``data.truncation=error``. ``--prompt-length auto``
takes the longest prompt. On success it prints the ``data.max_prompt_length`` to use. Prompt lengths come from the
shards' ``prompt_tokens`` when they were counted with the model's tokenizer (``curriculum build --tokenizer
MODEL``), else from the model's tokenizer here. With ``--dry-run`` (a launch script's ``DRY_RUN=1``) a tokenizer
that cannot be loaded (no network, a Hub id not in the cache) does not stop it: it says on stderr what it could
not check and prints the prompt limit given (``--prompt-length N`` or ``data.max_prompt_length=N``), or
``UNCHECKED`` for ``auto``, so the script still prints its command.

**Steps** (``steps``): verl's trainer makes ``len(dataset) // data.train_batch_size`` steps an epoch and its train
loader drops the incomplete last batch (``drop_last=True``), so the rows past the last whole batch are never
trained. It trains while the epoch is below ``trainer.total_epochs`` and the step at most
``trainer.total_training_steps`` (when set), and its loader starts again at the first row each epoch.
``steps`` reads those settings among the overrides (``data.train_batch_size``, ``data.train_max_samples``,
``trainer.total_epochs``, ``trainer.total_training_steps``; they win over ``--train-batch-size`` and
``--total-epochs``, default 1), says on stderr how many steps an epoch the curriculum gives, which rows are left,
how many steps the run trains, and, before the run, what it does to the curriculum's order: an epoch after the
first restarts at the easiest rows, a step limit short of an epoch never reaches the hardest. It prints the run's
steps (stdout), and refuses (exit status 2), naming the numbers, a run of 0 steps: a curriculum with fewer rows
than one batch (verl itself would fail on it with a division by zero), ``trainer.total_epochs`` or
``trainer.total_training_steps`` below 1 (verl would train nothing and end as if it had finished).

**Search-agent rows** (``agent-data``; verl's ``ToolAgentLoop`` with the toolkit's
:class:`~rag_curriculum.verl.tool.SearchTool`): one Parquet file, rows in curriculum order. Each row keeps the
curriculum row's columns, with:

* ``prompt``: the search agent's prompt (the Search-R1 template rendered with the question; no passages: the
  model finds them by searching);
* ``agent_name``: ``tool_agent`` (verl's multi-turn agent loop);
* ``extra_info.tools_kwargs.search.create_kwargs.row``: what the search tool needs of the row to apply its search
  difficulty and to say whether a gold passage came back (id, question, level, answers, passages with ``is_gold``);
  ``extra_info.need_tools_kwargs``: true (verl warns about a row without them).

The file is written atomically (a crash leaves no half-written file under the name), and the same shards give a
byte-identical file.

>>> hydra_list(["/d/part-00000.parquet", "/d/part-00001.parquet"])
"['/d/part-00000.parquet','/d/part-00001.parquet']"
>>> reward_path().endswith("rag_curriculum/verl/rewards.py")
True
>>> row = {"id": "r1", "question": "Who?", "answers": ["A"], "level": 2, "extra_info": {"index": 0},
...        "passages": [{"label": "x", "title": "T", "text": "t", "is_gold": True}], "prompt": []}
>>> out = agent_row(row, get_agent_template("search-r1"))
>>> out["agent_name"], out["prompt"][0]["content"].endswith("Question: Who?")
('tool_agent', True)
>>> out["extra_info"]["tools_kwargs"]["search"]["create_kwargs"]["row"]["passages"]
[{'title': 'T', 'text': 't', 'is_gold': True}]
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .._plumbing import MaskingStream, atomic_write_with, mask_secrets
from .._settings import MAX_COUNT
from ..agents import SearchTemplate, get_agent_template
from ..errors import ConfigError, CurriculumError, PromptLengthError, TokenizerError
from ..lengths import Limit, check_lengths, read_lengths
from ..shards import read_manifest, shard_files, validate_shards

__all__ = ["UNCHECKED", "VerlRun", "agent_row", "agent_table", "hydra_list", "main", "parse_verl_overrides",
           "reward_path", "run_settings", "train_files", "verl_limits", "verl_run", "verl_steps", "write_agent_data"]


# --- the shard files and the reward file ---------------------------------------------------------------------------
def train_files(directory: str | Path, *, verify: bool = True) -> list[str]:
    """Absolute paths of the shard files, in curriculum order (the manifest's), after checking the manifest."""
    if verify:
        validate_shards(directory)
    return [str(Path(f).resolve()) for f in shard_files(directory)]


def hydra_list(paths: Sequence[str]) -> str:
    """A Hydra command-line list of quoted paths."""
    for p in paths:
        if "'" in p or "," in p:
            raise ConfigError(f"{p!r}: quotes and commas in a shard path do not survive Hydra's list syntax")
    return "[" + ",".join(f"'{p}'" for p in paths) + "]"


def reward_path(module: str = "rewards") -> str:
    """The file verl loads the rewards from (``rag_curriculum/verl/rewards.py``; ``compute_score`` and the others),
    or, with ``module="reward_manager"``, Search-R1's reward manager (``reward.reward_manager.module.path``)."""
    spec = importlib.util.find_spec(f"rag_curriculum.verl.{module}")
    if spec is None or not spec.origin:  # pragma: no cover - a broken install
        raise ImportError(f"rag_curriculum.verl.{module} is not importable")
    return spec.origin


# --- prompt lengths against verl's limits ------------------------------------------------------------------------
VERL_KEYS = {
    "data.max_prompt_length": "prompt",
    "actor_rollout_ref.rollout.prompt_length": "rollout_prompt",
    "data.max_response_length": "response",
    "actor_rollout_ref.rollout.response_length": "rollout_response",
    "actor_rollout_ref.rollout.max_model_len": "max_model_len",
    "actor_rollout_ref.model.path": "model",
    "data.filter_overlong_prompts": "filter",
    "data.train_batch_size": "train_batch_size",
    "data.train_max_samples": "train_max_samples",
    "data.gen_batch_size": "gen_batch_size",
    "trainer.total_epochs": "total_epochs",
    "trainer.total_training_steps": "total_training_steps",
    "algorithm.filter_groups.enable": "filter_groups",
}
#: What ``check-lengths --dry-run`` prints for a prompt limit it could not derive (``--prompt-length auto``).
UNCHECKED = "UNCHECKED"


def parse_verl_overrides(overrides: Iterable[str]) -> dict[str, str]:
    """The values of the length settings among verl Hydra overrides (``key=value``, ``+key``/``++key``; the last
    one wins, as in Hydra)."""
    found: dict[str, str] = {}
    for o in overrides:
        key, eq, value = str(o).lstrip("+").partition("=")
        if eq and key in VERL_KEYS:
            found[VERL_KEYS[key]] = value.strip().strip("'\"")
    return found


def _int(value: str | None, name: str, *, what: str = "a number of tokens",
         error: type[Exception] = PromptLengthError) -> int | None:
    """An override's whole number (None for unset / null), or ``error`` naming the setting and ``what`` it must be."""
    if value is None or value.lower() in ("", "null", "none", "~"):
        return None
    try:
        return int(value)
    except ValueError:
        raise error(f"{name}={mask_secrets(value)!r} is not {what}") from None


def verl_limits(prompt_length: int, response_length: int, overrides: Mapping[str, str]) -> list[Limit]:
    """verl's limits: ``data.max_prompt_length`` (its dataset), ``actor_rollout_ref.rollout.prompt_length``
    (its rollout, which left-truncates; defaults to the former), and ``actor_rollout_ref.rollout.max_model_len``
    when set (vLLM's context: prompt plus response)."""
    prompt = _int(overrides.get("prompt"), "data.max_prompt_length") or prompt_length
    response = _int(overrides.get("response"), "data.max_response_length") or response_length
    limits = [Limit("data.max_prompt_length", prompt, alias=None if "prompt" in overrides else "MAX_PROMPT")]
    rollout_prompt = _int(overrides.get("rollout_prompt"), "actor_rollout_ref.rollout.prompt_length")
    if rollout_prompt is not None:
        limits.append(Limit("actor_rollout_ref.rollout.prompt_length", rollout_prompt))
    rollout_response = _int(overrides.get("rollout_response"), "actor_rollout_ref.rollout.response_length")
    max_model_len = _int(overrides.get("max_model_len"), "actor_rollout_ref.rollout.max_model_len")
    if max_model_len is not None:
        limits.append(Limit("actor_rollout_ref.rollout.max_model_len", max_model_len, rollout_response or response,
                            "actor_rollout_ref.rollout.response_length" if rollout_response
                            else "data.max_response_length"))
    return limits


USAGE = ("usage: python -m rag_curriculum.verl train-files SHARD_DIR | reward-path | reward-manager-path\n"
         "       | lengths SHARD_DIR [--model MODEL] [VERL_OVERRIDES...]\n"
         "       | check-lengths SHARD_DIR --prompt-length N|auto --response-length M [--model MODEL] [--dry-run] "
         "[VERL_OVERRIDES...]\n"
         "       | steps SHARD_DIR --train-batch-size N [--total-epochs E] [VERL_OVERRIDES...]\n"
         "       | agent-data SHARD_DIR OUT.parquet [--template NAME] [--overwrite]\n"
         "       | layout --prompts N --rollouts R --nnodes N --gpus-per-node G\n"
         "       | shared-paths --nnodes N [--shared] NAME=PATH... [--installed NAME=PATH...]\n")


def _lengths_args(args: list[str], options: tuple[str, ...] = ("--model", "--prompt-length", "--response-length")
                  ) -> tuple[str, dict[str, str], dict[str, str]]:
    """SHARD_DIR, the --options (``options``, each ``--name VALUE`` or ``--name=VALUE``; another is refused), and
    the length settings among the verl overrides."""
    if not args or args[0].startswith("-") or "=" in args[0]:
        raise SystemExit(USAGE)
    directory, rest = args[0], args[1:]
    opts: dict[str, str] = {}
    overrides = []
    i = 0
    while i < len(rest):
        a = rest[i]
        if a == "--dry-run":
            opts["dry-run"] = "1"
            i += 1
            continue
        name, eq, value = a.partition("=")
        if name in options:
            if not eq and i + 1 >= len(rest):
                raise SystemExit(f"{a} needs a value\n{USAGE}")
            opts[name[2:]] = value if eq else rest[i + 1]
            i += 1 if eq else 2
            continue
        if a.startswith("-"):  # an option of another command (or a misspelt one) is never passed over in silence
            raise SystemExit(f"{name}: not an option of this command (it takes {', '.join(options)} and verl "
                             f"overrides KEY=VALUE)\n{USAGE}")
        overrides.append(a)
        i += 1
    return directory, opts, parse_verl_overrides(overrides)


def prompt_lengths(directory: str | Path, model: str | None):
    """The prompt lengths of the shards (see ``read_lengths``), with the source
    and the longest prompt said on stderr."""
    lengths = read_lengths(directory, model)
    if lengths.tokens:
        top = lengths.longest()
        sys.stderr.write(f"longest prompt: {lengths.tokens[top]} tokens ({lengths.describe(top)}), counted from "
                         f"{lengths.source}\n")
    return lengths


def _unchecked(model: str | None, error: CurriculumError, opts: Mapping[str, str], found: Mapping[str, str]) -> int:
    """``check-lengths --dry-run`` where the prompts cannot be counted here: say so, print the limit given."""
    given = found.get("prompt") or opts.get("prompt-length")
    limit = given if given and given != "auto" else UNCHECKED
    sys.stderr.write(
        f"not checked: whether the prompts fit the run's limits. The prompt lengths need {model}'s tokenizer, which "
        f"could not be loaded here ({error}). The command below ")
    if limit == UNCHECKED:
        sys.stderr.write(f"has data.max_prompt_length={UNCHECKED}: set MAX_PROMPT=N (a number of tokens) to print it "
                         "with a number. ")
    else:
        sys.stderr.write(f"keeps data.max_prompt_length={limit} unchecked. ")
    sys.stderr.write("Check it where the tokenizer loads (the same command without DRY_RUN does, and refuses prompts "
                     "that do not fit), or build the curriculum with `--tokenizer MODEL` so its prompt_tokens are "
                     "read instead.\n")
    sys.stdout.write(f"{limit}\n")
    return 0


def check_lengths_main(args: list[str], *, derive_only: bool = False) -> int:
    directory, opts, found = _lengths_args(args, ("--model",) if derive_only else
                                           ("--model", "--prompt-length", "--response-length", "--dry-run"))
    model = found.get("model") or opts.get("model")
    try:
        if not derive_only:  # every number checked where it enters: before a tokenizer is loaded
            if "response-length" not in opts or "prompt-length" not in opts:
                raise SystemExit(f"check-lengths needs --prompt-length and --response-length\n{USAGE}")
            if opts["prompt-length"] != "auto":
                _int(opts["prompt-length"], "--prompt-length", what="a number of tokens or auto")
            _int(opts["response-length"], "--response-length")
            verl_limits(1, 1, found)
        try:
            lengths = prompt_lengths(directory, model)
        except TokenizerError as e:
            if opts.get("dry-run") and not derive_only:
                return _unchecked(model, e, opts, found)
            raise
        if derive_only:
            sys.stdout.write(f"{lengths.max_tokens}\n")
            return 0
        prompt = opts["prompt-length"]
        prompt_length = lengths.max_tokens if prompt == "auto" else _int(prompt, "--prompt-length")
        if found.get("prompt"):
            prompt_length = _int(found["prompt"], "data.max_prompt_length")
        limits = verl_limits(prompt_length, _int(opts["response-length"], "--response-length"), found)
        check_lengths(lengths, limits, what="verl would left-truncate these prompts with a warning only (even under "
                      "data.truncation=error), or drop them under data.filter_overlong_prompts=True. Nothing was run.")
    except (CurriculumError, ValueError) as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    if found.get("filter", "").lower() == "true":
        sys.stderr.write("note: data.filter_overlong_prompts=True drops every prompt over data.max_prompt_length "
                         "without a word, and those are the hardest rows of a curriculum; none is over it now\n")
    sys.stdout.write(f"{prompt_length}\n")
    return 0


# --- steps: verl's drop_last ---------------------------------------------------------------------------------------
def verl_steps(rows: int, train_batch_size: int, *, max_samples: int | None = None, where: str = "the curriculum",
               setting: str = "data.train_batch_size") -> tuple[int, int]:
    """(steps an epoch, rows left over) as verl 0.9's trainer counts them: ``len(dataset) // data.train_batch_size``
    steps, the rest dropped by its train loader (``drop_last=True``); ``data.train_max_samples`` (> 0) keeps the
    first rows only. A curriculum that gives no step is refused with both numbers.

    >>> verl_steps(100, 42)
    (2, 16)
    >>> verl_steps(30, 42)
    Traceback (most recent call last):
    ...
    rag_curriculum.errors.ConfigError: the curriculum has 30 rows, fewer than one batch of data.train_batch_size=42 prompts: verl's train loader drops the incomplete last batch (drop_last=True), so the run would train 0 steps
    """
    if max_samples is not None and 0 < max_samples < rows:
        rows = max_samples
    if train_batch_size <= 0:
        raise ConfigError(f"{setting}={train_batch_size}: a batch needs at least one prompt")
    steps, tail = divmod(rows, train_batch_size)
    if steps == 0:
        raise ConfigError(
            f"{where} has {rows} rows, fewer than one batch of {setting}={train_batch_size} prompts: verl's train "
            "loader drops the incomplete last batch (drop_last=True), so the run would train 0 steps",
            hint=f"set {setting} to at most {rows} (PROMPTS_PER_STEP in recipes/verl/*.sh), or build a curriculum with "
                 "more rows")
    return steps, tail


@dataclass(frozen=True)
class VerlRun:
    """The steps verl 0.9's trainer runs on a curriculum (:func:`verl_run`): ``rows`` (after
    ``data.train_max_samples``), ``batch`` (``data.train_batch_size``), ``steps_per_epoch`` and the ``tail`` its
    ``drop_last`` leaves, ``epochs`` (``trainer.total_epochs``), ``total_training_steps`` (as given, or None) and
    ``steps``, what the run trains: ``min(total_training_steps, steps_per_epoch * epochs)``."""

    rows: int
    batch: int
    steps_per_epoch: int
    tail: int
    epochs: int
    total_training_steps: int | None
    steps: int
    dynamic: bool = False

    @property
    def epochs_run(self) -> int:
        """The epochs the run starts (the last may be cut short by ``trainer.total_training_steps``)."""
        return -(-self.steps // self.steps_per_epoch)

    @property
    def rows_reached(self) -> int:
        """The rows of the curriculum the run reaches (its first epoch's; all but ``tail`` when it completes one)."""
        return min(self.steps, self.steps_per_epoch) * self.batch

    def notes(self) -> list[str]:
        """What the run does that a curriculum user must know before it starts: the epochs that restart the
        curriculum at its easiest rows, the rows a short run never reaches, a step limit past the epochs."""
        s, out = self.steps_per_epoch, []
        if self.epochs_run > 1:
            starts = ", ".join(f"step {e * s + 1}" for e in range(1, min(self.epochs_run, 4)))
            more = ", ..." if self.epochs_run > 4 else ""
            out.append(
                f"the run trains {self.steps} steps, {self.epochs_run} epochs of {s}: each epoch restarts the "
                f"curriculum at its easiest rows (verl's loader reads from the first row again at {starts}{more}), "
                f"so the levels go from easy to hard {self.epochs_run} times, not once. For one pass over the "
                f"curriculum set trainer.total_epochs=1 and leave trainer.total_training_steps unset")
        elif self.steps < s and not self.dynamic:
            out.append(f"the run stops after {self.steps} of the curriculum's {s} steps (trainer.total_training_steps="
                       f"{self.total_training_steps}): it trains the first {self.rows_reached} of {self.rows} rows, "
                       f"the easiest; the last {self.rows - self.rows_reached} are never trained")
        if self.total_training_steps is not None and self.total_training_steps > s * self.epochs:
            out.append(f"trainer.total_training_steps={self.total_training_steps} is more than the {s * self.epochs} "
                       f"steps of trainer.total_epochs={self.epochs}: verl stops after {self.steps}")
        if self.dynamic:
            out.append("with algorithm.filter_groups a step takes more rows than data.train_batch_size (refills), so "
                       "the rows run out before the last step and verl restarts at the first row (set "
                       "trainer.total_training_steps so they do not)")
        return out


def verl_run(rows: int, train_batch_size: int, *, max_samples: int | None = None, total_epochs: int = 1,
             total_training_steps: int | None = None, dynamic: bool = False, where: str = "the curriculum",
             setting: str = "data.train_batch_size") -> VerlRun:
    """The steps verl 0.9's trainer runs (:class:`VerlRun`): it trains while the epoch is below
    ``trainer.total_epochs`` and the step at most ``trainer.total_training_steps`` (when set; otherwise
    ``steps_per_epoch * total_epochs``), and its loader restarts at the first row each epoch. A run of 0 steps is
    refused: a curriculum with fewer rows than one batch (:func:`verl_steps`), ``trainer.total_epochs`` or
    ``trainer.total_training_steps`` below 1 (verl would start, train nothing and end as if it had finished).

    >>> run = verl_run(100, 42, total_epochs=2)
    >>> run.steps, run.epochs_run, run.rows_reached
    (4, 2, 84)
    >>> verl_run(100, 42, total_training_steps=1).notes()[0][:60]
    "the run stops after 1 of the curriculum's 2 steps (trainer.t"
    >>> verl_run(100, 42, total_training_steps=0)
    Traceback (most recent call last):
    ...
    rag_curriculum.errors.ConfigError: trainer.total_training_steps=0: verl's trainer would train 0 steps (it stops once the step passes trainer.total_training_steps) and end as if it had finished
    """
    steps_per_epoch, tail = verl_steps(rows, train_batch_size, max_samples=max_samples, where=where,
                                       setting=setting)
    if max_samples is not None and 0 < max_samples < rows:
        rows = max_samples
    one_pass = (f"leave trainer.total_training_steps unset and set trainer.total_epochs=1 for one pass over the "
                f"curriculum ({steps_per_epoch} steps of {train_batch_size} prompts)")
    if total_epochs < 1:
        raise ConfigError(f"trainer.total_epochs={total_epochs}: verl's trainer would train 0 steps (it trains while "
                          "the epoch is below trainer.total_epochs) and end as if it had finished", hint=one_pass)
    if total_training_steps is not None and total_training_steps < 1:
        raise ConfigError(f"trainer.total_training_steps={total_training_steps}: verl's trainer would train 0 steps "
                          "(it stops once the step passes trainer.total_training_steps) and end as if it had "
                          "finished", hint=one_pass)
    steps = steps_per_epoch * total_epochs
    if total_training_steps is not None:
        steps = min(steps, total_training_steps)
    return VerlRun(rows=rows, batch=train_batch_size, steps_per_epoch=steps_per_epoch, tail=tail,
                   epochs=total_epochs, total_training_steps=total_training_steps, steps=steps, dynamic=dynamic)


def run_settings(config: Any) -> dict[str, Any]:
    """:func:`verl_run`'s keyword arguments from a composed verl config (``trainer.total_epochs``,
    ``trainer.total_training_steps``, ``data.train_max_samples``, ``algorithm.filter_groups.enable``)."""
    fg = config.algorithm.get("filter_groups", None) if "algorithm" in config else None
    samples = config.data.get("train_max_samples", None)
    steps = config.trainer.get("total_training_steps", None)
    return {"total_epochs": int(config.trainer.get("total_epochs", 1)),
            "total_training_steps": None if steps is None else int(steps),
            "max_samples": None if samples is None else int(samples),
            "dynamic": bool(fg is not None and fg.get("enable", False))}


def _tail_note(directory: str | Path, rows: int, tail: int) -> str:
    """``: curriculum_index A..B, levels L`` of the rows verl's drop_last leaves (read from the shards)."""
    if not tail:
        return ""
    columns = [pq.read_table(f, columns=["curriculum_index", "level"]) for f in shard_files(directory)]
    table = pa.concat_tables(columns).slice(rows - tail, tail)
    index, levels = table.column(0).to_pylist(), table.column(1).to_pylist()
    shown = ", ".join(str(lv) for lv in sorted(set(levels)))
    return f": curriculum_index {index[0]}..{index[-1]}, level{'s' if len(set(levels)) > 1 else ''} {shown}"


def steps_main(args: list[str]) -> int:
    directory, opts, found = _lengths_args(args, ("--train-batch-size", "--total-epochs"))
    batch = found.get("train_batch_size") or opts.get("train-batch-size")
    if batch is None:
        raise SystemExit(f"steps needs --train-batch-size\n{USAGE}")
    try:
        manifest = read_manifest(directory)
        rows = int(manifest["num_rows"])
        samples = _int(found.get("train_max_samples"), "data.train_max_samples")
        where = f"{directory} with data.train_max_samples={samples}" if samples and samples < rows else str(directory)
        epochs = _count(found.get("total_epochs") or opts.get("total-epochs") or "1", "trainer.total_epochs")
        total = _count(found.get("total_training_steps"), "trainer.total_training_steps")
        size = _count(batch, "data.train_batch_size")
        if size is None:
            raise ConfigError(f"data.train_batch_size={batch}: verl needs a number of prompts a step")
        run = verl_run(rows, size, max_samples=samples, total_epochs=1 if epochs is None else epochs,
                       total_training_steps=total, dynamic=found.get("filter_groups", "").lower() == "true",
                       where=where)
        note = _tail_note(directory, run.rows, run.tail)
        reach = _reach_note(directory, run)
    except (CurriculumError, ValueError) as e:
        hint = getattr(e, "hint", None)
        sys.stderr.write(f"error: {e}. Nothing was run." + (f"\n  hint: {hint}" if hint else "") + "\n")
        return 2
    sys.stderr.write(f"curriculum: {directory} ({run.rows} rows, {run.steps_per_epoch} steps; the last {run.tail} "
                     f"rows are dropped by verl's drop_last{note})\n")
    sys.stderr.write(f"the run: {run.steps} step{'s' if run.steps != 1 else ''} (trainer.total_epochs={run.epochs}, "
                     f"trainer.total_training_steps={'unset' if total is None else total}, "
                     f"data.train_batch_size={run.batch})\n")
    for line in run.notes():
        sys.stderr.write(f"note: {line}{reach if line.startswith('the run stops') else ''}\n")
    sys.stdout.write(f"{run.steps}\n")
    return 0


def verl_layout_offers(prompts: int, rollouts: int, nnodes: int, gpus_per_node: int) -> dict[str, list[Any]]:
    """What a refused verl layout could change to, each accepted by :func:`verl_layout`. Those that keep the step's
    sequences first: ``LAYOUTS``, node and GPU counts together (``[NNODES, GPUS_PER_NODE]``, at most the nodes and
    GPUs per node at hand, up to 64 nodes of 16, the most GPUs first), GPUs per node (1..16) on these nodes, node
    counts (1..64) at these GPUs per node (each alone); then prompts per step nearest the asked, which change the
    batch (empty only where no multiple up to 10^9 splits)."""
    gpus = nnodes * gpus_per_node
    step = gpus // math.gcd(gpus, rollouts)  # data.train_batch_size must be a multiple of this
    below = prompts // step  # (the three nearest multiples of step lie within a few of it: no range over them all)
    top = min(max(2 * prompts, 2 * step), MAX_COUNT)  # (each offer accepted by verl_layout)
    near = sorted((m * step for m in range(max(1, below - 2), below + 4) if m * step <= top),
                  key=lambda p: (abs(p - prompts), p))[:3]
    seqs = prompts * rollouts
    pairs = [[n, g] for n in range(1, min(nnodes, 64) + 1) for g in range(1, min(gpus_per_node, 16) + 1)
             if seqs % (n * g) == 0 and [n, g] != [nnodes, gpus_per_node]]
    pairs.sort(key=lambda x: (-x[0] * x[1], x[0]))
    best: list[list[int]] = []
    for pair in pairs:  # one layout per GPU count: the fewest nodes
        if all(b[0] * b[1] != pair[0] * pair[1] for b in best):
            best.append(pair)
    return {"LAYOUTS": best[:3],
            "GPUS_PER_NODE": [g for g in range(1, 17) if seqs % (nnodes * g) == 0],
            "NNODES": [n for n in range(1, 65) if seqs % (n * gpus_per_node) == 0],
            "PROMPTS_PER_STEP": sorted(near)}


def verl_layout(prompts: int, rollouts: int, nnodes: int = 1, gpus_per_node: int = 8) -> int:
    """The sequences each GPU takes a step (``prompts x rollouts / GPUs``), or a :class:`ConfigError` when they do
    not split evenly (verl's own check, made before Ray starts), with ``offered`` (:func:`verl_layout_offers`):
    first what keeps the step's sequences, then the prompts per step that change them, each with its sequences.

    >>> verl_layout(42, 7, 1, 7)
    42
    >>> verl_layout(42, 7, 4, 8)
    Traceback (most recent call last):
    ...
    rag_curriculum.errors.ConfigError: 42 prompts x 7 rollouts = 294 sequences a step do not split over 32 GPUs (4 node(s) x 8); verl requires it. Keeping the 294 sequences a step: NNODES=3 GPUS_PER_NODE=7 (21 GPUs), or NNODES=2 GPUS_PER_NODE=7 (14 GPUs), or NNODES=1 GPUS_PER_NODE=7 (7 GPUs). Changing the batch: PROMPTS_PER_STEP=32 (224 sequences a step instead of 294), 64 (448 sequences a step instead of 294)
    """
    for value, name in ((prompts, "PROMPTS_PER_STEP"), (rollouts, "ROLLOUTS"), (nnodes, "NNODES"),
                        (gpus_per_node, "GPUS_PER_NODE")):
        if value < 1:
            raise ConfigError(f"{name}={value}: must be at least 1")
        if value > MAX_COUNT:
            raise ConfigError(f"{name}={value}: more than {MAX_COUNT:,}, far beyond any run verl can make")
    gpus = nnodes * gpus_per_node
    seqs = prompts * rollouts
    if seqs % gpus == 0:
        return seqs // gpus
    offered = verl_layout_offers(prompts, rollouts, nnodes, gpus_per_node)
    pairs = offered["LAYOUTS"]
    keeping = [" ".join([*([f"NNODES={n}"] if n != nnodes else []), *([f"GPUS_PER_NODE={g}"] if g != gpus_per_node
                                                                       else [])]) + f" ({n * g} GPUs)"
               for n, g in pairs]
    more_gpus = [g for g in offered["GPUS_PER_NODE"] if [nnodes, g] not in pairs]  # those not said already
    more_nodes = [n for n in offered["NNODES"] if [n, gpus_per_node] not in pairs]
    if more_gpus:
        keeping.append(f"GPUS_PER_NODE in {more_gpus}")
    if more_nodes:
        keeping.append(f"NNODES in {more_nodes}")
    changing = ", ".join(f"{p} ({p * rollouts} sequences a step instead of {seqs})"
                         for p in offered["PROMPTS_PER_STEP"])
    err = ConfigError(f"{prompts} prompts x {rollouts} rollouts = {seqs} sequences a step do not split over {gpus} "
                      f"GPUs ({nnodes} node(s) x {gpus_per_node}); verl requires it. "
                      + (f"Keeping the {seqs} sequences a step: {', or '.join(keeping)}. " if keeping else "")
                      + (f"Changing the batch: PROMPTS_PER_STEP={changing}" if changing else "Choose fewer GPUs"))
    err.offered = offered  # type: ignore[attr-defined]
    raise err


#: Filesystems that live on one machine: a path on one of them is not on the other nodes.
LOCAL_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "tmpfs", "ramfs", "overlay",
                               "vfat", "exfat", "ntfs", "ntfs3", "squashfs", "devtmpfs"})


def filesystem_type(path: str | Path, mounts: str | Path = "/proc/mounts") -> str | None:
    """The type of the filesystem holding ``path`` (made absolute, its links resolved; it may not exist yet), from
    ``mounts``; None where it cannot be read (not Linux)."""
    here = Path(os.path.realpath(os.path.expanduser(str(path))))
    try:
        lines = Path(mounts).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    best, kind = "", None
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].encode("utf-8").decode("unicode_escape")  # "\040" for a space
        inside = str(here) == point or str(here).startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, parts[2]
    return kind


def check_shared_paths(paths: dict[str, str], *, nnodes: int, shared: bool = False,
                       installed: dict[str, str] | None = None, mounts: str | Path = "/proc/mounts") -> list[str]:
    """What a verl run across ``nnodes`` nodes needs on every node, checked from the head: ``paths`` (the
    curriculum, the model when a directory, the checkpoints' folder) must be absolute (a relative path is read
    against each Ray worker's own directory) and on a filesystem every node mounts (one of
    :data:`LOCAL_FILESYSTEMS` is the head's alone: refused unless ``shared``, said when the same files are at the
    same paths on every node); ``installed`` (the reward module) must be absolute, and is each node's own install at
    the same path. A model given as a Hub id is each node's to fetch. Returns the notes; a :class:`ConfigError`
    names every path that fails."""
    if nnodes <= 1:
        return []
    problems, notes = [], []
    for name, value in paths.items():
        local = value.startswith(("/", ".", "~")) or Path(value).exists()
        if name == "MODEL" and not local:
            notes.append(f"MODEL={value}: a Hub id, which every node loads from its own Hugging Face cache (or the Hub)")
            continue
        if not Path(value).expanduser().is_absolute():
            problems.append(f"{name}={value} is relative: each Ray worker reads it against its own directory; give "
                            f"the absolute path on a filesystem every node mounts")
            continue
        kind = filesystem_type(value, mounts)
        if kind in LOCAL_FILESYSTEMS and not shared:
            problems.append(f"{name}={value} is on this node's own disk ({kind}): the other {nnodes - 1} node(s) do "
                            "not see it")
        notes.append(f"{name}={value} ({kind or 'filesystem unknown'}{', shared as said' if shared else ''})")
    for name, value in (installed or {}).items():
        if not Path(value).is_absolute():
            problems.append(f"{name}={value} is relative")
        notes.append(f"{name}={value}: each node's own install of rag-curriculum, at this same path")
    if problems:
        raise ConfigError(f"verl on {nnodes} nodes: " + "; ".join(problems), hint=(
            "put the shards, the model and OUT on a shared filesystem (NFS, Lustre, ...) and give absolute paths; "
            "or copy them to the same absolute paths on every node and set SHARED_FS=1"))
    return notes


def shared_paths_main(args: list[str]) -> int:
    """``shared-paths --nnodes N [--shared] NAME=PATH ... [--installed NAME=PATH ...]``: exit status 2 and why
    when a path a multi-node run needs is not on every node."""
    nnodes, shared, paths, installed, target = 1, False, {}, {}, None
    it = iter(args)
    for arg in it:
        if arg == "--nnodes":
            nnodes = _int(next(it, ""), "--nnodes", what="a whole number", error=ConfigError) or 1
        elif arg == "--shared":
            shared = True
        elif arg == "--installed":
            target = installed
        elif "=" in arg and not arg.startswith("-"):
            name, value = arg.split("=", 1)
            (paths if target is None else target)[name] = value
        else:
            raise SystemExit(USAGE)
    try:
        notes = check_shared_paths(paths, nnodes=nnodes, shared=shared, installed=installed)
    except ConfigError as e:
        sys.stderr.write(f"error: {e}\n  hint: {e.hint}\n")
        return 2
    if notes:
        sys.stderr.write(f"on every one of the {nnodes} nodes: " + "; ".join(notes) + "\n")
    return 0


def layout_main(args: list[str]) -> int:
    """``layout --prompts N --rollouts R --nnodes N --gpus-per-node G``: exit status 2 and what would split."""
    names = ("--prompts", "--rollouts", "--nnodes", "--gpus-per-node")
    values: dict[str, int] = {}
    if len(args) != 2 * len(names):
        raise SystemExit(USAGE)
    try:
        for flag, value in zip(args[::2], args[1::2], strict=True):
            number = _int(value, flag, what="a whole number", error=ConfigError) if flag in names else None
            if number is None:
                raise SystemExit(USAGE)
            values[flag] = number
        per_gpu = verl_layout(*(values[n] for n in names))
    except ConfigError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    sys.stderr.write(f"layout: {per_gpu} sequences per GPU a step\n")
    return 0


def _count(value: str | None, name: str) -> int | None:
    """A whole number setting (None for unset/null), or a ConfigError naming it."""
    return _int(value, name, what="a whole number", error=ConfigError)


def _reach_note(directory: str | Path, run: VerlRun) -> str:
    """`` (curriculum_index A..B, levels ...)`` of the rows a run stopped by ``trainer.total_training_steps`` never
    reaches."""
    if run.epochs_run > 1 or run.steps >= run.steps_per_epoch or run.dynamic:
        return ""
    columns = [pq.read_table(f, columns=["curriculum_index", "level"]) for f in shard_files(directory)]
    table = pa.concat_tables(columns).slice(run.rows_reached, run.rows - run.rows_reached)
    index, levels = table.column(0).to_pylist(), table.column(1).to_pylist()
    return f" (curriculum_index {index[0]}..{index[-1]}, {_levels_text(levels)})" if index else ""


def _levels_text(levels: Sequence[Any]) -> str:
    shown = sorted({lv for lv in levels if lv is not None})
    return f"level{'s' if len(shown) > 1 else ''} {', '.join(map(str, shown))}"


# --- search-agent rows ---------------------------------------------------------------------------------------------
#: The verl tool name the rows' ``tools_kwargs`` are keyed by (the tool schema's function name).
TOOL_NAME = "search"


def agent_row(row: dict[str, Any], template: SearchTemplate, *, tool: str = TOOL_NAME) -> dict[str, Any]:
    """One curriculum row as a verl search-agent row (see the module docstring)."""
    passages = [{"title": p["title"], "text": p["text"], "is_gold": bool(p.get("is_gold"))}
                for p in row.get("passages") or []]
    view = {"id": str(row["id"]), "question": row["question"], "level": int(row.get("level") or 1),
            "answers": list(row.get("answers") or []), "answerable": bool(row.get("answerable", True)),
            "passages": passages}
    extra = dict(row.get("extra_info") or {})
    extra["tools_kwargs"] = {tool: {"create_kwargs": {"row": view}}}
    extra["need_tools_kwargs"] = True
    return {**row, "prompt": template.render(row["question"]), "agent_name": "tool_agent", "extra_info": extra}


def agent_table(shards: str | Path, template: str = "search-r1") -> pa.Table:
    """The curriculum at ``shards`` (checked first) as verl search-agent rows, in curriculum order."""
    validate_shards(shards)
    tmpl = get_agent_template(template)
    rows: list[dict[str, Any]] = []
    for f in shard_files(shards):
        for i, r in enumerate(pq.read_table(f).to_pylist()):
            if not r.get("question"):
                raise ConfigError(f"{f}: row {i} has no `question`", hint="build the curriculum again")
            rows.append(agent_row(r, tmpl))
    if not rows:
        raise ConfigError(f"{shards}: the curriculum has no rows", hint="nothing to train on")
    return pa.Table.from_pylist(rows)


def write_agent_data(shards: str | Path, out: str | Path, *, template: str = "search-r1",
                     overwrite: bool = False) -> int:
    """Write :func:`agent_table` to ``out`` (one Parquet file) atomically; the number of rows."""
    out = Path(out)
    if not Path(shards).is_dir():
        raise ConfigError(f"{shards}: no such shard directory", hint="give a curriculum's folder (curriculum build --out)")
    src, dst = Path(shards).resolve(), out.resolve()
    if dst == src or src in dst.parents:
        raise ConfigError(f"{out} is inside the input shard directory {shards}: agent-data would write into its own "
                          "input", hint="choose an output file outside the shard directory")
    if out.is_dir():
        raise ConfigError(f"{out} is a directory", hint="give a file name, e.g. agent.parquet")
    if out.exists() and not overwrite:
        raise ConfigError(f"{out} exists", hint="pass --overwrite to replace it, or choose another file")
    if not out.parent.is_dir():
        raise ConfigError(f"{out}: its folder {out.parent} does not exist" if not out.parent.exists() else
                          f"{out}: {out.parent} is not a folder", hint="create the folder first, or choose another file")
    table = agent_table(shards, template)
    atomic_write_with(out, lambda tmp: pq.write_table(table, tmp))
    return table.num_rows


def agent_data_main(args: list[str]) -> int:
    overwrite = "--overwrite" in args
    args = [a for a in args if a != "--overwrite"]
    template = "search-r1"
    if "--template" in args:
        i = args.index("--template")
        if i + 1 >= len(args):
            sys.stderr.write(USAGE)
            return 2
        template = args[i + 1]
        del args[i:i + 2]
    if len(args) != 2 or any(a.startswith("-") for a in args):
        sys.stderr.write(USAGE)
        return 2
    try:
        n = write_agent_data(args[0], args[1], template=template, overwrite=overwrite)
    except CurriculumError as e:
        sys.stderr.write(f"error: {e}" + (f"\n  hint: {e.hint}" if getattr(e, "hint", None) else "") + "\n")
        return 2 if isinstance(e, ConfigError) else 1
    sys.stderr.write(f"{args[1]}: {n} rows in curriculum order\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rag_curriculum.verl COMMAND ...`` (see the module docstring); the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    stderr = sys.stderr  # every line it says: secrets masked (the plumbing's rule)
    sys.stderr = stderr if isinstance(stderr, MaskingStream) else MaskingStream(stderr)
    try:
        return _main(args)
    except SystemExit as e:  # a usage error: its message on stderr, exit status 2 (as every command's)
        if isinstance(e.code, str):
            sys.stderr.write(f"error: {e.code}" if not e.code.startswith("usage:") else e.code)
            return 2
        raise
    except CurriculumError as e:  # a shard directory that is not one, a file that cannot be read: one line
        hint = getattr(e, "hint", None)
        sys.stderr.write(f"error: {e}" + (f"\n  hint: {hint}" if hint else "") + "\n")
        return 2
    except OSError as e:
        sys.stderr.write(f"error: {e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}\n")
        return 2
    finally:
        sys.stderr = stderr


def _main(args: list[str]) -> int:
    if args[:1] == ["train-files"] and len(args) == 2:
        sys.stdout.write(hydra_list(train_files(args[1])) + "\n")
        return 0
    if args == ["reward-path"]:
        sys.stdout.write(reward_path() + "\n")
        return 0
    if args == ["reward-manager-path"]:  # Search-R1's decoding (verl/reward_manager.py), for reward=search-r1
        sys.stdout.write(reward_path("reward_manager") + "\n")
        return 0
    if args[:1] == ["lengths"]:
        return check_lengths_main(args[1:], derive_only=True)
    if args[:1] == ["check-lengths"]:
        return check_lengths_main(args[1:])
    if args[:1] == ["steps"]:
        return steps_main(args[1:])
    if args[:1] == ["agent-data"]:
        return agent_data_main(args[1:])
    if args[:1] == ["layout"]:
        return layout_main(args[1:])
    if args[:1] == ["shared-paths"]:
        return shared_paths_main(args[1:])
    sys.stderr.write(USAGE)
    return 2
