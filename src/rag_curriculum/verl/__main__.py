"""``python -m rag_curriculum.verl COMMAND ...``: the helpers the verl launch scripts call
(:func:`rag_curriculum.verl.data.main`)."""

import sys

from .data import main

if __name__ == "__main__":
    sys.exit(main())
