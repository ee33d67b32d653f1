"""The package version: one place (pyproject.toml reads it, the trace's ``tool.version`` too)."""

__version__ = "0.1.0"
