"""The version of the ``tetrarch`` distribution (foundation: imports nothing)."""

__version__ = "0.1.0"
