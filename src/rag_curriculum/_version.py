"""The toolkit's version, in a module of its own so that any module can record it without importing the package
``__init__`` (which sits above every subpackage)."""

__version__ = "0.1.0"
