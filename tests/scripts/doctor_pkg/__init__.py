"""A package whose ``train`` module is run with ``python -m doctor_pkg.train``."""
