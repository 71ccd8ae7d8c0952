"""The companion methods the toolkit reproduces, one folder each, each holding what is its own (its format, reward,
agent pieces, evaluation table) on top of the shared machinery of the core packages:

* :mod:`rag_curriculum.methods.craft`: CRAFT's trace formats, rewards and faithfulness judge (docs/craft.md);
* :mod:`rag_curriculum.methods.globalrag`: GlobalRAG's plan grammar, agent prompt, gold and teacher plans, Table 1
  and its plan rewards (docs/globalrag.md);
* :mod:`rag_curriculum.methods.react_crag`: ReAct's Thought / Action / Observation format and the consistency-ranked
  best-of-N of ReAct+CRAG (docs/react-crag.md);
* :mod:`rag_curriculum.methods.search_r1`: Search-R1's prompts, a search agent's rewards and Search-R1's own reward
  bit for bit (docs/search-agents.md);
* :mod:`rag_curriculum.methods.veritas`: VERITAS's faithfulness reward and evaluation columns (docs/veritas.md).

Importing this package registers each method's names in the toolkit's registries (rewards, output formats, agent
templates), by dotted path, so nothing of a method loads until one of its names is asked for. The package's own
``__init__`` (``rag_curriculum``) imports it, so the built-in methods are known wherever the toolkit is; a method of
your own is a folder of your package plus an entry point (docs/extending.md, "A new method").
"""

from __future__ import annotations

from . import craft, globalrag, react_crag, search_r1, veritas

__all__ = ["craft", "globalrag", "react_crag", "search_r1", "veritas"]
