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

from typing import TYPE_CHECKING

from . import methods  # noqa: F401  (the built-in methods register their rewards, formats and templates)
from ._plumbing import lazy_exports
from ._version import __version__
from .errors import ConfigError, CurriculumError, DataError, SkipReport, WrongDatasetError
from .records import Document, Example

# The names imported under TYPE_CHECKING load on first use (a module of the package, ``rag_curriculum.verl.rewards``
# in a verl reward worker say, imports this ``__init__`` first: it pays for none of them).
if TYPE_CHECKING:  # for type checkers and IDEs; at run time these load on first use
    from .curricula import BuildConfig, build_curriculum
    from .evaluation import EvalConfig, run_eval
    from .loaders import load_examples, sniff_dataset
    from .partition import PartitionConfig
    from .partition import partition as run_partition
    from .rewards import RagRlReward
    from .train import TrainConfig
    from .train import train as run_training

__getattr__, __dir__ = lazy_exports(__name__, globals())

__all__ = [  # a literal list (linters and the docs read it); a test checks it covers the lazy names
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
