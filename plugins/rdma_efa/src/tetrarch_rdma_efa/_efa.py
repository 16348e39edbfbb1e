"""The EFA RDMA backend (placeholder until it is written: construction raises)."""

from __future__ import annotations

from tetrarch.plugins import not_implemented_factory

from ._plugin import ALTERNATIVE

__all__ = ["EfaRdmaBackend"]

EfaRdmaBackend = not_implemented_factory("efa RDMA backend", "rdma", alternative=ALTERNATIVE, name="EfaRdmaBackend")
