"""Collection rules for the whole tree (tests/, and the doctests of src/rag_curriculum, plumbing/ and retriever/)."""

import importlib.util

# Modules that exist to be loaded by an engine and import it at the top: their doctests run only where it is
# installed (the verl tier's environment).
collect_ignore = []
if importlib.util.find_spec("verl") is None:
    collect_ignore += ["src/rag_curriculum/verl/tool.py", "src/rag_curriculum/verl/reward_manager.py"]
