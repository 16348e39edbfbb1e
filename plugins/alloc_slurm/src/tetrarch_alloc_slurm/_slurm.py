"""The Slurm allocator (placeholder until it is written: construction raises)."""

from __future__ import annotations

from tetrarch.plugins import Allocator, not_implemented_factory

from ._plugin import ALTERNATIVE

__all__ = ["SlurmAllocator"]

SlurmAllocator = not_implemented_factory(
    "slurm allocator", "allocators", alternative=ALTERNATIVE, base=Allocator, name="SlurmAllocator"
)
