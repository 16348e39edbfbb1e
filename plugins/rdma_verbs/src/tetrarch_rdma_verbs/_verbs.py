"""The verbs RDMA backend (placeholder until it is written: construction raises)."""

from __future__ import annotations

from tetrarch.plugins import not_implemented_factory

__all__ = ["VerbsRdmaBackend"]

VerbsRdmaBackend = not_implemented_factory(
    "verbs RDMA backend", "rdma", name="VerbsRdmaBackend"
)
