"""The template's transport passes tetrarch's transport contract, test for test."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest

from tetrarch.plugins import Transport
from tetrarch.testing.transport import TransportConformance
from tetrarch_plugin_template._transport import ThreadedTransport


class TestThreadedTransport(TransportConformance):
    @pytest.fixture
    def transport(self) -> Iterator[Transport]:
        t = ThreadedTransport()
        yield t
        t.close()

    @pytest.fixture
    def client_transport(self) -> Iterator[Transport]:
        """A second instance dials: the two sides share nothing but the wire."""
        t = ThreadedTransport()
        yield t
        t.close()

    def raw_frame_count(self, transport: Transport, count: int) -> bytes | None:
        return struct.pack("!I", count)  # this wire opens a message with its frame count, as the builtin one
