"""The zmq transport (placeholder until it is written: construction raises)."""

from __future__ import annotations

from tetrarch.plugins import Transport, not_implemented_factory

from ._plugin import ALTERNATIVE

__all__ = ["ZmqTransport"]

ZmqTransport = not_implemented_factory(
    "zmq transport", "transports", alternative=ALTERNATIVE, base=Transport, name="ZmqTransport"
)
