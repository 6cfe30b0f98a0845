"""The version of nsys_cc (also in pyproject.toml), in a module that imports nothing."""

__version__ = "0.1.0"
