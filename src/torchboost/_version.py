"""The package version, in a module of its own.

Kept apart from ``torchboost/__init__.py`` so a module that only needs the version (the
reports stamp it on what they write) imports it without importing the Booster and its
techniques.
"""

__version__ = "0.1.0"
"""torchboost's version (PEP 440)."""
