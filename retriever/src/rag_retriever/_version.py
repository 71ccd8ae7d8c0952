"""The retriever's version, in a module of its own so any module can record it."""

__version__ = "0.1.0"
