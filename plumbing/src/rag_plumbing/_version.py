"""The plumbing's version, in a module of its own."""

__version__ = "0.1.0"
