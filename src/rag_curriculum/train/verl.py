"""Helpers for the verl (Ray) recipe, ``recipes/verl/run_grpo.sh``: the shard files in curriculum order as a Hydra
list for ``data.train_files``, and the file of the toolkit's ``compute_score`` for
``reward.custom_reward_function.path``. verl concatenates ``data.train_files`` in list order and, with
``data.shuffle=False``, walks the rows with a sequential sampler (dropping the incomplete last batch).

    python -m rag_curriculum.train.verl train-files outputs/musique-min-max   # ['/abs/part-00000.parquet', ...]
    python -m rag_curriculum.train.verl reward-path                           # /.../rag_curriculum/rewards/verl.py
    python -m rag_curriculum.train.verl lengths outputs/musique-min-max --model MODEL      # the longest prompt
    python -m rag_curriculum.train.verl check-lengths outputs/musique-min-max --model MODEL \
        --prompt-length 6144 --response-length 800 [VERL_OVERRIDES...]

``check-lengths`` refuses (exit status 2) a curriculum whose longest prompt exceeds ``data.max_prompt_length`` or
``actor_rollout_ref.rollout.prompt_length`` (or, with the response, ``actor_rollout_ref.rollout.max_model_len``),
naming the rows, their levels and the setting: verl 0.9.1 left-truncates such a prompt with a warning only, even
under ``data.truncation=error``. ``--prompt-length auto`` takes the longest prompt. On success it prints the
``data.max_prompt_length`` to use. Prompt lengths come from the shards' ``prompt_tokens`` when they were counted
with the model's tokenizer (``curriculum build --tokenizer MODEL``), else from the model's tokenizer here.

>>> hydra_list(["/d/part-00000.parquet", "/d/part-00001.parquet"])
"['/d/part-00000.parquet','/d/part-00001.parquet']"
>>> reward_path().endswith("rag_curriculum/rewards/verl.py")
True
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

from ..errors import ConfigError, CurriculumError
from ..shards import shard_files, validate_shards
from ._lengths import check_lengths, parse_verl_overrides, read_lengths, verl_limits


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


def reward_path() -> str:
    """The file verl loads ``compute_score`` from (``rag_curriculum/rewards/verl.py``)."""
    spec = importlib.util.find_spec("rag_curriculum.rewards.verl")
    if spec is None or not spec.origin:  # pragma: no cover - a broken install
        raise ImportError("rag_curriculum.rewards.verl is not importable")
    return spec.origin


USAGE = ("usage: python -m rag_curriculum.train.verl train-files SHARD_DIR | reward-path\n"
         "       | lengths SHARD_DIR [--model MODEL] [VERL_OVERRIDES...]\n"
         "       | check-lengths SHARD_DIR --prompt-length N|auto --response-length M [--model MODEL] "
         "[VERL_OVERRIDES...]\n")


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
    """The prompt lengths of the shards (see :func:`rag_curriculum.train._lengths.read_lengths`), with the source
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


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["train-files"] and len(args) == 2:
        sys.stdout.write(hydra_list(train_files(args[1])) + "\n")
        return 0
    if args == ["reward-path"]:
        sys.stdout.write(reward_path() + "\n")
        return 0
    if args[:1] == ["lengths"]:
        return check_lengths_main(args[1:], derive_only=True)
    if args[:1] == ["check-lengths"]:
        return check_lengths_main(args[1:])
    sys.stderr.write(USAGE)
    return 2


if __name__ == "__main__":
    sys.exit(main())
