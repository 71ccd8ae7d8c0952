"""``python -m rag_curriculum.train recipe=NAME [overrides...]``: the entry point for launchers that start one
process per GPU (``accelerate launch -m rag_curriculum.train ...``, ``torchrun -m``); same arguments and options as
``curriculum train``."""

from __future__ import annotations

from .._cli.train import main

if __name__ == "__main__":
    main()
