"""The receive-sink part of the transport kit (an optional capability, see
:data:`tetrarch._transport._base.SinkResolver`).

:class:`~tetrarch.testing.transport.TransportConformance` inherits these tests; they skip
themselves where the accepted connection's ``supports_sinks`` is False. Where it is True:

* a frame the resolver names a sink for is received into that memory and delivered as
  that very ``memoryview``; the other frames of the message arrive as usual;
* the resolver is shown the lead (the frames before the first large one) and every
  frame's size;
* a resolver that declines (None), names a sink of the wrong size, or raises costs
  nothing but the copy: the message arrives whole and the connection stays open, and a
  rejected sink is not written.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tetrarch._transport._base import Connection, Transport

from ._kit import WAIT, bounded, pattern

__all__ = ["ReceiveSinkConformance"]

_BIG = 16 << 20  # a frame every transport receives as a large one


class ReceiveSinkConformance:
    """Tests of the optional receive-sink capability (skipped where a transport lacks it)."""

    @bounded
    def test_receive_sinks_take_large_frames_in_place(
        self, transport: Transport, client_transport: Transport, address: str
    ) -> None:
        from .transport import Recorder

        dest, wrong = memoryview(bytearray(_BIG)), memoryview(bytearray(_BIG - 1))
        asked: list[tuple[list[bytes], list[int]]] = []

        def resolver(lead: list[bytes], sizes: list[int]) -> Sequence[memoryview | None] | None:
            asked.append(([bytes(f) for f in lead], list(sizes)))
            tag = bytes(lead[0]) if lead else b""
            if tag == b"raise":
                raise RuntimeError("a faulty resolver")
            return {b"sink": [dest, None], b"wrong": [wrong, None]}.get(tag)

        def install(conn: Connection) -> None:
            if conn.supports_sinks:
                conn.sinks = resolver

        srec = Recorder(on_open_hook=install)
        listener = transport.listen(address, srec)
        conn = client_transport.connect(listener.address, Recorder(), timeout=WAIT)
        try:
            sconn = srec.wait_opened()
            if not sconn.supports_sinks:
                pytest.skip(f"{type(transport).__name__} offers no receive sinks (an optional capability)")
            tags = [b"sink", b"wrong", b"raise", b"none"]
            payloads = [pattern(_BIG, seed=i) for i in range(len(tags))]
            for tag, data in zip(tags, payloads, strict=True):
                conn.send([tag, data, b"tail"])
            got = srec.wait_messages(sconn, len(tags))
            for tag, data, frames in zip(tags, payloads, got, strict=True):
                assert [bytes(f) for f in frames] == [tag, data, b"tail"], f"message {tag!r} arrived changed"
            assert got[0][1] is dest, "a frame received into its sink must be delivered as the sink itself"
            assert all(frames[1] is not dest and frames[1] is not wrong for frames in got[1:])
            assert not any(wrong), "a sink of the wrong size was rejected, yet written"
            assert not sconn.closed, "a faulty resolver must cost a copy, not the connection"
            for tag in tags:
                assert ([tag], [len(tag), _BIG, 4]) in asked, f"the resolver was not shown the lead of {tag!r}"
        finally:
            conn.close()
            listener.close()
