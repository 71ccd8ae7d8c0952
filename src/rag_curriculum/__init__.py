"""rag-curriculum: curricula of controlled difficulty for RL post-training of RAG answer generators.

The verbs, one per command (``curriculum build | partition | train | eval``), each taking its config:

>>> import rag_curriculum as rc
>>> [name for name in rc.__all__ if name[0].islower() and not name.startswith("_")]
['build_curriculum', 'load_examples', 'run_eval', 'run_partition', 'run_training', 'sniff_dataset']

``rag_curriculum.partition`` and ``rag_curriculum.train`` are the subpackages behind two of the commands, so
their verbs are exported here as ``run_partition`` and ``run_training`` (one name, one meaning).

Importing the package is cheap: it never imports torch, transformers or vllm; the verbs and configs load on first
use (module ``__getattr__``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .errors import ConfigError, CurriculumError, DataError, SkipReport, WrongDatasetError
from .records import Document, Example

#: name -> "module:attribute", imported on first use (a module of the package, ``rag_curriculum.verl.rewards`` in a
#: verl reward worker say, imports this ``__init__`` first: it pays for none of them).
_LAZY = {
    "load_examples": "rag_curriculum.loaders:load_examples",
    "sniff_dataset": "rag_curriculum.loaders:sniff_dataset",
    "build_curriculum": "rag_curriculum.curricula:build_curriculum",
    "BuildConfig": "rag_curriculum.curricula:BuildConfig",
    "run_partition": "rag_curriculum.partition:partition",
    "PartitionConfig": "rag_curriculum.partition:PartitionConfig",
    "run_eval": "rag_curriculum.evaluation:run_eval",
    "EvalConfig": "rag_curriculum.evaluation:EvalConfig",
    "run_training": "rag_curriculum.train:train",
    "TrainConfig": "rag_curriculum.train:TrainConfig",
    "RagRlReward": "rag_curriculum.rewards:RagRlReward",
}

if TYPE_CHECKING:  # for type checkers and IDEs; at run time these load lazily
    from .curricula import BuildConfig, build_curriculum
    from .evaluation import EvalConfig, run_eval
    from .loaders import load_examples, sniff_dataset
    from .partition import PartitionConfig
    from .partition import partition as run_partition
    from .rewards import RagRlReward
    from .train import TrainConfig
    from .train import train as run_training


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'rag_curriculum' has no attribute {name!r}")
    module, _, attr = target.partition(":")
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [  # a literal list (linters read it); a test checks it covers _LAZY
    "BuildConfig",
    "ConfigError",
    "CurriculumError",
    "DataError",
    "Document",
    "EvalConfig",
    "Example",
    "PartitionConfig",
    "RagRlReward",
    "SkipReport",
    "TrainConfig",
    "WrongDatasetError",
    "__version__",
    "build_curriculum",
    "load_examples",
    "run_eval",
    "run_partition",
    "run_training",
    "sniff_dataset",
]
