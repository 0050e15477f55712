"""The package's version, one literal (pyproject.toml reads it; `tuneproof.__version__` re-exports it)."""

__version__ = "0.1.0"
