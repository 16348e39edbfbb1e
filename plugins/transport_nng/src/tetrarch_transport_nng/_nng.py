"""The nng transport (placeholder until it is written: construction raises)."""

from __future__ import annotations

from tetrarch.plugins import Transport, not_implemented_factory

from ._plugin import ALTERNATIVE

__all__ = ["NngTransport"]

NngTransport = not_implemented_factory(
    "nng transport", "transports", alternative=ALTERNATIVE, base=Transport, name="NngTransport"
)
