"""Helpers for the verl (Ray) recipe, ``recipes/verl/run_grpo.sh``: the shard files in curriculum order as a Hydra
list for ``data.train_files``, and the file of the toolkit's ``compute_score`` for
``reward.custom_reward_function.path``. verl concatenates ``data.train_files`` in list order and, with
``data.shuffle=False``, walks the rows with a sequential sampler (dropping the incomplete last batch).

    python -m rag_curriculum.train.verl train-files outputs/musique-min-max   # ['/abs/part-00000.parquet', ...]
    python -m rag_curriculum.train.verl reward-path                           # /.../rag_curriculum/rewards/verl.py

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

from ..shards import shard_files, validate_shards


def train_files(directory: str | Path, *, verify: bool = True) -> list[str]:
    """Absolute paths of the shard files, in curriculum order (the manifest's), after checking the manifest."""
    if verify:
        validate_shards(directory)
    return [str(Path(f).resolve()) for f in shard_files(directory)]


def hydra_list(paths: Sequence[str]) -> str:
    """A Hydra command-line list of quoted paths."""
    for p in paths:
        if "'" in p or "," in p:
            raise ValueError(f"{p!r}: quotes and commas in a shard path do not survive Hydra's list syntax")
    return "[" + ",".join(f"'{p}'" for p in paths) + "]"


def reward_path() -> str:
    """The file verl loads ``compute_score`` from (``rag_curriculum/rewards/verl.py``)."""
    spec = importlib.util.find_spec("rag_curriculum.rewards.verl")
    if spec is None or not spec.origin:  # pragma: no cover - a broken install
        raise ImportError("rag_curriculum.rewards.verl is not importable")
    return spec.origin


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["train-files"] and len(args) == 2:
        sys.stdout.write(hydra_list(train_files(args[1])) + "\n")
        return 0
    if args == ["reward-path"]:
        sys.stdout.write(reward_path() + "\n")
        return 0
    sys.stderr.write("usage: python -m rag_curriculum.train.verl train-files SHARD_DIR | reward-path\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
