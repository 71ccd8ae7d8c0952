"""What a verl run is pointed at, made from a curriculum; ``python -m rag_curriculum.verl`` runs each from a
launch script (``recipes/verl/*.sh``)::

    python -m rag_curriculum.verl train-files outputs/musique-min-max   # ['/abs/part-00000.parquet', ...]
    python -m rag_curriculum.verl reward-path                           # /.../rag_curriculum/verl/rewards.py
    python -m rag_curriculum.verl reward-manager-path                   # /.../verl/reward_manager.py (search-r1)
    python -m rag_curriculum.verl lengths outputs/musique-min-max --model MODEL      # the longest prompt
    python -m rag_curriculum.verl check-lengths outputs/musique-min-max --model MODEL \\
        --prompt-length 6144 --response-length 800 [VERL_OVERRIDES...]
    python -m rag_curriculum.verl agent-data outputs/musique-min-max agent.parquet [--template search-r1] [--overwrite]

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
MODEL``), else from the model's tokenizer here.

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
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .._plumbing import atomic_write_with
from ..agents import SearchTemplate, get_agent_template
from ..errors import ConfigError, CurriculumError, PromptLengthError
from ..lengths import Limit, check_lengths, read_lengths
from ..shards import shard_files, validate_shards

__all__ = ["agent_row", "agent_table", "hydra_list", "main", "parse_verl_overrides", "reward_path", "train_files",
           "verl_limits", "write_agent_data"]


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
}


def parse_verl_overrides(overrides: Iterable[str]) -> dict[str, str]:
    """The values of the length settings among verl Hydra overrides (``key=value``, ``+key``/``++key``; the last
    one wins, as in Hydra)."""
    found: dict[str, str] = {}
    for o in overrides:
        key, eq, value = str(o).lstrip("+").partition("=")
        if eq and key in VERL_KEYS:
            found[VERL_KEYS[key]] = value.strip().strip("'\"")
    return found


def _int(value: str | None, name: str) -> int | None:
    if value is None or value.lower() in ("", "null", "none", "~"):
        return None
    try:
        return int(value)
    except ValueError:
        raise PromptLengthError(f"{name}={value!r} is not a number of tokens") from None


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
         "       | check-lengths SHARD_DIR --prompt-length N|auto --response-length M [--model MODEL] "
         "[VERL_OVERRIDES...]\n"
         "       | agent-data SHARD_DIR OUT.parquet [--template NAME] [--overwrite]\n")


def _lengths_args(args: list[str]) -> tuple[str, dict[str, str], dict[str, str]]:
    """SHARD_DIR, the --options, and the length settings among the verl overrides."""
    if not args or args[0].startswith("-") or "=" in args[0]:
        raise SystemExit(USAGE)
    directory, rest = args[0], args[1:]
    opts: dict[str, str] = {}
    overrides = []
    i = 0
    while i < len(rest):
        a = rest[i]
        if a in ("--model", "--prompt-length", "--response-length"):
            if i + 1 >= len(rest):
                raise SystemExit(f"{a} needs a value\n{USAGE}")
            opts[a[2:]] = rest[i + 1]
            i += 2
            continue
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


def check_lengths_main(args: list[str], *, derive_only: bool = False) -> int:
    directory, opts, found = _lengths_args(args)
    model = found.get("model") or opts.get("model")
    try:
        lengths = prompt_lengths(directory, model)
        if derive_only:
            sys.stdout.write(f"{lengths.max_tokens}\n")
            return 0
        if "response-length" not in opts or "prompt-length" not in opts:
            raise SystemExit(f"check-lengths needs --prompt-length and --response-length\n{USAGE}")
        prompt = opts["prompt-length"]
        prompt_length = lengths.max_tokens if prompt == "auto" else int(prompt)
        if found.get("prompt"):
            prompt_length = int(found["prompt"])
        limits = verl_limits(prompt_length, int(opts["response-length"]), found)
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
    if out.exists() and not overwrite:
        raise ConfigError(f"{out} exists", hint="pass --overwrite to replace it, or choose another file")
    if out.is_dir():
        raise ConfigError(f"{out} is a directory", hint="give a file name, e.g. agent.parquet")
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
    if args[:1] == ["agent-data"]:
        return agent_data_main(args[1:])
    sys.stderr.write(USAGE)
    return 2
