"""The EFA RDMA backend (placeholder until it is written: construction raises)."""

from __future__ import annotations

from tetrarch.plugins import not_implemented_factory

__all__ = ["EfaRdmaBackend"]

EfaRdmaBackend = not_implemented_factory("efa RDMA backend", "rdma", name="EfaRdmaBackend")
