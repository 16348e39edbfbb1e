"""Conformance tests for :class:`tetrarch._transport._base.Transport` implementations.

Subclass :class:`TransportConformance` in your plugin's test suite and provide a
``transport`` fixture (see :mod:`tetrarch.testing` for a complete example). The tests
check the contract the kernel relies on, as written in the docstrings of
``Transport``, ``Connection`` and ``ConnectionHandler``:

* ``connect`` returns an open connection whose ``on_open`` has run; the listener's
  handler sees ``on_open`` for the accepted side.
* A message is a list of frames and arrives as such: same count, same bytes, empty
  frames and 16 MiB frames included; messages of a connection arrive in send order,
  also when several threads send at once (each message stays whole).
* Handler callbacks run on the transport's I/O thread, not the sender's.
* ``close`` is idempotent, ``on_close`` runs once per connection, the peer learns of
  the close, and ``send`` on a closed connection raises ``ConnectionClosed``.
* A message larger than the receiver's ``max_message_size`` (sum of its frames) closes
  that connection; the listener keeps accepting, also after clients that vanish
  abruptly or send garbage.
* The header counts toward ``max_message_size`` too: a message of so many frames that
  its header (4 bytes plus 8 per frame) exceeds the limit closes the connection, even
  when every frame is empty, and the frame count alone is enough: the receiver does not
  wait for (nor buffer) the lengths it announces. That last check sends raw bytes; it
  runs where :meth:`TransportConformance.raw_frame_count` knows the framing (the
  builtin transports; override it for yours).
* A burst of 64 simultaneous dials all get in; a dial into a Unix socket whose backlog is
  full waits until its timeout instead of failing at once (:mod:`._dialing`).
* Dialing an address nobody listens on raises ``TransportError`` within seconds;
  a malformed address or foreign scheme raises ``ValueError``.
* A transport whose connections offer receive sinks (``supports_sinks``; optional, see
  :data:`~tetrarch._transport._base.SinkResolver`) passes the sink tests of
  :class:`~tetrarch.testing._sinks.ReceiveSinkConformance`; the others skip them.
* Strangers cost a listener little (:class:`~tetrarch.testing._preauth.PreAuthConformance`,
  against a kernel ``Router`` on the transport in a child process, raw sockets to it): a
  stalled connection is closed at ``PreAuthLimits.timeout``, at most ``max_pending`` wait
  (oldest closed first), each holds about ``max_bytes``, and a flood at an open-file limit
  of 1024 neither kills nor spins the listener, is logged, and real peers get in after.
  Hooks: ``preauth_flood(address)`` (your wire's stalled opening), ``preauth_factory``.

Helpers for a transport's own tests: :class:`Recorder` (a ``ConnectionHandler`` that
records what it sees), :func:`kernel_listening` (the kernel's router listening on your
transport in this process, as a tetrarch process would) and :func:`transport_key` (the
key the kernel hands ``Transport.use_key`` for an allocation's secret).
"""

from __future__ import annotations

import array
import re
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tetrarch._transport._base import Connection, ConnectionClosed, Listener, Transport, TransportError

from ._dialing import DialConformance
from ._kernel import kernel_listening, transport_key
from ._kit import TEST_TIMEOUT, WAIT, bounded, pattern, raw_sockaddr
from ._preauth import PreAuthConformance
from ._recorder import Recorder, _as_bytes
from ._sinks import ReceiveSinkConformance

__all__ = ["Recorder", "TransportConformance", "kernel_listening", "transport_key"]

_bounded, _pattern, _raw_sockaddr = bounded, pattern, raw_sockaddr


def _limited_listener(transport: Transport, address: str, limit: int) -> tuple[Listener, Recorder]:
    """A listener whose accepted connections take messages of at most ``limit`` bytes, and its recorder."""

    def lower_limit(conn: Connection) -> None:
        conn.max_message_size = limit

    srec = Recorder(on_open_hook=lower_limit)
    return transport.listen(address, srec), srec


class TransportConformance(ReceiveSinkConformance, PreAuthConformance, DialConformance):
    """Contract tests every transport must pass. Subclass and provide ``transport``."""

    # -- fixtures a subclass provides or may override -------------------------
    @pytest.fixture
    def transport(self) -> Transport:
        raise NotImplementedError(
            f"{type(self).__name__} must define a function-scoped `transport` fixture "
            "returning (or yielding, then closing) an instance of the Transport under test"
        )

    @pytest.fixture
    def client_transport(self, transport: Transport) -> Transport:
        """The transport that dials; the listening one unless a subclass overrides."""
        return transport

    @pytest.fixture
    def address(self, transport: Transport) -> str:
        """An address to listen on."""
        return transport.default_address(spans_hosts=False)

    @pytest.fixture
    def unused_address(self, address: str) -> Iterator[str]:
        """An address nobody listens on.

        For ``scheme://host:0`` a port is bound (not listening) for the test's duration,
        so dialing it is refused; any other default address is assumed fresh.
        """
        match = re.fullmatch(r"(?P<head>.+://(?P<host>.*)):0", address)
        if match is None:
            yield address
            return
        host = match.group("host")
        family = socket.AF_INET6 if host.startswith("[") else socket.AF_INET
        bind_host = host.strip("[]") or ("::1" if family == socket.AF_INET6 else "127.0.0.1")
        with socket.socket(family, socket.SOCK_STREAM) as reserved:
            reserved.bind((bind_host, 0))
            yield f"{match.group('head')}:{reserved.getsockname()[1]}"

    def raw_frame_count(self, transport: Transport, count: int) -> bytes | None:
        """The bytes that open a message of ``count`` frames on the wire, or None.

        For the raw-socket check that a frame count alone, whose header would exceed
        ``max_message_size``, closes the connection. The default knows the builtin
        framing (``!I`` count, then ``!Q`` lengths) and returns None (the check is
        skipped) for other transports; override it for yours if a raw socket can
        dial its addresses.
        """
        from tetrarch._transport._socket import SocketTransport

        return struct.pack("!I", count) if isinstance(transport, SocketTransport) else None

    # -- helpers ---------------------------------------------------------------
    @pytest.fixture
    def server(self, transport: Transport, address: str) -> Iterator[tuple[Listener, Recorder]]:
        """A listener on ``address`` with a recording handler, closed after the test."""
        recorder = Recorder()
        listener = transport.listen(address, recorder)
        yield listener, recorder
        listener.close()

    def _connect(
        self, client_transport: Transport, listener: Listener, recorder: Recorder | None = None
    ) -> tuple[Connection, Recorder]:
        recorder = recorder or Recorder()
        conn = client_transport.connect(listener.address, recorder, timeout=WAIT)
        return conn, recorder

    def _pair(
        self, client_transport: Transport, server: tuple[Listener, Recorder]
    ) -> tuple[Connection, Recorder, Connection, Recorder]:
        """Connect one client; return (client conn, client recorder, server conn, server recorder)."""
        listener, srec = server
        already = len(srec.opened)
        conn, crec = self._connect(client_transport, listener)
        sconn = srec.wait_opened(already + 1)
        return conn, crec, sconn, srec

    # -- tests -------------------------------------------------------------------
    @_bounded
    def test_listen_and_connect_open_both_sides(
        self, client_transport: Transport, server: tuple[Listener, Recorder]
    ) -> None:
        listener, srec = server
        assert isinstance(listener.address, str)
        assert "://" in listener.address
        conn, crec = self._connect(client_transport, listener)
        # connect() returns only once the client's on_open has run
        assert crec.opened == [conn], "connect() must return after on_open ran for the new connection"
        assert not conn.closed
        assert isinstance(conn.peer, str)
        assert conn.peer
        sconn = srec.wait_opened()
        assert not sconn.closed
        assert isinstance(sconn.peer, str)
        assert sconn.peer
        conn.close()

    @_bounded
    def test_multi_frame_message_keeps_frames(
        self, client_transport: Transport, server: tuple[Listener, Recorder]
    ) -> None:
        conn, crec, sconn, srec = self._pair(client_transport, server)
        doubles = array.array("d", (i / 3 for i in range(1000)))
        big = _pattern(16 << 20, seed=3)
        messages: list[list[Any]] = [
            [b"header", b"", b"x" * 1000, bytearray(b"mutable"), memoryview(b"a view"), b""],
            [b""],  # a message that is one empty frame
            [b"", b""],
            [memoryview(doubles)],  # a non-byte format: its size is nbytes, not len()
            [b"before", memoryview(big), b"after"],  # 16 MiB frame
            [memoryview(_pattern(1 << 20, seed=9))[100:-100]],  # a slice of a larger buffer
        ]
        expected = [_as_bytes(m) for m in messages]
        for frames in messages:
            conn.send(frames)
        got = srec.wait_messages(sconn, len(messages))
        assert [len(m) for m in got] == [len(m) for m in expected], "frame counts differ"
        for i, (received, sent) in enumerate(zip(got, expected, strict=True)):
            assert _as_bytes(received) == sent, f"message {i} arrived with different bytes"
        # and back, from the accepting side
        for frames in expected:
            sconn.send(frames)
        back = crec.wait_messages(conn, len(expected))
        assert [_as_bytes(m) for m in back] == expected
        conn.close()

    @_bounded
    def test_frames_stay_valid_after_callback(
        self, client_transport: Transport, server: tuple[Listener, Recorder]
    ) -> None:
        conn, _crec, sconn, srec = self._pair(client_transport, server)
        for i in range(50):  # later messages must not overwrite earlier frames
            conn.send([struct.pack("!I", i), _pattern(4096 + i, seed=i)])
        got = srec.wait_messages(sconn, 50)
        for i, frames in enumerate(got):
            assert _as_bytes(frames) == [struct.pack("!I", i), _pattern(4096 + i, seed=i)]
        conn.close()

    @_bounded
    def test_many_messages_arrive_in_order(
        self, client_transport: Transport, server: tuple[Listener, Recorder]
    ) -> None:
        count = 10_000
        conn, _crec, sconn, srec = self._pair(client_transport, server)
        for i in range(count):
            conn.send([struct.pack("!I", i), b"p" * (i % 100)])
        got = srec.wait_messages(sconn, count)
        assert len(got) == count
        for i, frames in enumerate(got):
            assert len(frames) == 2
            (seq,) = struct.unpack("!I", bytes(frames[0]))
            assert seq == i, f"message {i} arrived as #{seq}: messages were reordered or lost"
            assert bytes(frames[1]) == b"p" * (i % 100)
        conn.close()

    @_bounded
    def test_concurrent_senders_keep_messages_whole_and_ordered(
        self, client_transport: Transport, server: tuple[Listener, Recorder]
    ) -> None:
        threads_n, per_thread = 4, 1000
        conn, _crec, sconn, srec = self._pair(client_transport, server)

        def payload(tid: int, seq: int) -> bytes:
            size = 65536 + seq if seq % 50 == 0 else seq % 300  # some large, to force partial writes
            return _pattern(size, seed=tid * 31 + seq)

        barrier = threading.Barrier(threads_n)
        errors: list[BaseException] = []

        def sender(tid: int) -> None:
            try:
                barrier.wait(WAIT)
                for seq in range(per_thread):
                    conn.send([bytes([tid]), struct.pack("!I", seq), payload(tid, seq)])
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        workers = [threading.Thread(target=sender, args=(t,), daemon=True) for t in range(threads_n)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(TEST_TIMEOUT)
        assert not any(w.is_alive() for w in workers), "a sender thread is stuck in send()"
        assert not errors, f"send() raised in a sender thread: {errors[0]!r}"

        got = srec.wait_messages(sconn, threads_n * per_thread)
        assert len(got) == threads_n * per_thread
        next_seq = [0] * threads_n
        for frames in got:
            assert len(frames) == 3, f"a message arrived with {len(frames)} frames instead of 3"
            tid = bytes(frames[0])[0]
            (seq,) = struct.unpack("!I", bytes(frames[1]))
            assert seq == next_seq[tid], f"thread {tid}: message {seq} arrived when {next_seq[tid]} was due"
            assert bytes(frames[2]) == payload(tid, seq), f"thread {tid} message {seq}: payload corrupted"
            next_seq[tid] += 1
        conn.close()

    @_bounded
    def test_callbacks_run_on_the_io_thread(
        self, client_transport: Transport, server: tuple[Listener, Recorder]
    ) -> None:
        conn, crec, sconn, srec = self._pair(client_transport, server)
        conn.send([b"ping"])
        srec.wait_messages(sconn, 1)
        sconn.send([b"pong"])
        crec.wait_messages(conn, 1)
        me = threading.get_ident()
        assert me not in srec.message_threads, "on_message ran on the sending thread"
        assert me not in crec.message_threads, "on_message ran on the sending thread"
        conn.close()

    @_bounded
    def test_two_clients_are_separate_connections(
        self, client_transport: Transport, server: tuple[Listener, Recorder]
    ) -> None:
        a, arec, sa, srec = self._pair(client_transport, server)
        b, brec, sb, _ = self._pair(client_transport, server)
        assert sa is not sb
        a.send([b"from a"])
        b.send([b"from b"])
        assert _as_bytes(srec.wait_messages(sa, 1)[0]) == [b"from a"]
        assert _as_bytes(srec.wait_messages(sb, 1)[0]) == [b"from b"]
        sa.send([b"to a"])
        sb.send([b"to b"])
        assert _as_bytes(arec.wait_messages(a, 1)[0]) == [b"to a"]
        assert _as_bytes(brec.wait_messages(b, 1)[0]) == [b"to b"]
        a.close()
        srec.wait_closed(sa)
        assert not sb.closed, "closing one client closed another connection"
        b.send([b"still here"])
        assert _as_bytes(srec.wait_messages(sb, 2)[1]) == [b"still here"]
        b.close()

    @_bounded
    def test_client_close_reaches_server(
        self, client_transport: Transport, server: tuple[Listener, Recorder]
    ) -> None:
        conn, crec, sconn, srec = self._pair(client_transport, server)
        conn.send([b"last words"])
        srec.wait_messages(sconn, 1)
        conn.close()
        assert conn.closed
        error = srec.wait_closed(sconn)
        assert error is None, f"an orderly close was reported as an error: {error!r}"
        assert sconn.closed
        with pytest.raises(ConnectionClosed):
            sconn.send([b"too late"])
        with pytest.raises(ConnectionClosed):
            conn.send([b"too late"])
        crec.wait_closed(conn)  # the closing side's handler hears of it too
        assert srec.order(sconn)[-1] == "close"

    @_bounded
    def test_server_close_reaches_client(
        self, client_transport: Transport, server: tuple[Listener, Recorder]
    ) -> None:
        conn, crec, sconn, srec = self._pair(client_transport, server)
        sconn.send([b"bye"])
        crec.wait_messages(conn, 1)
        sconn.close()
        error = crec.wait_closed(conn)
        assert error is None, f"an orderly close was reported as an error: {error!r}"
        assert conn.closed
        with pytest.raises(ConnectionClosed):
            conn.send([b"too late"])
        srec.wait_closed(sconn)

    @_bounded
    def test_close_is_idempotent(
        self, transport: Transport, client_transport: Transport, server: tuple[Listener, Recorder]
    ) -> None:
        listener, srec = server
        conn, crec, sconn, _ = self._pair(client_transport, server)
        conn.close()
        conn.close()
        crec.wait_closed(conn)
        srec.wait_closed(sconn)
        sconn.close()
        sconn.close()
        # A full round trip on a fresh connection orders us after any stray callbacks.
        other, orec, sother, _ = self._pair(client_transport, server)
        other.send([b"barrier"])
        srec.wait_messages(sother, 1)
        sother.send([b"barrier"])
        orec.wait_messages(other, 1)
        assert len(crec.closes(conn)) == 1, "on_close ran more than once for the client"
        assert len(srec.closes(sconn)) == 1, "on_close ran more than once for the server side"
        other.close()
        listener.close()
        listener.close()
        transport.close()
        transport.close()
        if client_transport is not transport:
            client_transport.close()
            client_transport.close()

    @_bounded
    def test_listener_survives_abrupt_and_garbage_clients(
        self, client_transport: Transport, server: tuple[Listener, Recorder]
    ) -> None:
        listener, srec = server
        # Through the transport: connect and vanish, with and without a message in flight.
        for payload in (None, [b"half a conversation"], [_pattern(1 << 20)]):
            conn, _ = self._connect(client_transport, listener)
            if payload is not None:
                conn.send(payload)
            conn.close()
        # Raw sockets, for addresses a plain socket can dial: nothing, garbage, a
        # header that promises more than is sent, then a reset (SO_LINGER 0).
        raw = _raw_sockaddr(listener.address)
        if raw is not None:
            family, sockaddr = raw
            garbage = (
                b"",
                b"\xff" * 64,
                b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                struct.pack("!IQ", 1, 1 << 20) + b"partial",
                struct.pack("!IQ", 1, 1 << 62),
            )
            for data in garbage:
                with socket.socket(family, socket.SOCK_STREAM) as sock:
                    sock.settimeout(WAIT)
                    sock.connect(sockaddr)  # type: ignore[arg-type]
                    if data:
                        sock.sendall(data)
                    if family != socket.AF_UNIX:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # The listener still serves. (Which accepted connection is ours is told by
        # content: a late accept of a vanished client may come first.)
        conn, crec = self._connect(client_transport, listener)
        conn.send([b"hello", b"again"])
        srec.wait(lambda: srec._find([b"hello", b"again"]) is not None, "the message of a healthy client")
        sconn = srec._find([b"hello", b"again"])
        assert sconn is not None
        sconn.send([b"welcome"])
        assert _as_bytes(crec.wait_messages(conn, 1)[0]) == [b"welcome"]
        # Every other connection the listener accepted was closed.
        srec.wait(
            lambda: all(id(c) in srec._closes for c in srec.opened if c is not sconn),
            "on_close for every connection of the vanished clients",
        )
        conn.close()

    @_bounded
    def test_oversized_message_closes_only_that_connection(
        self, transport: Transport, client_transport: Transport, address: str
    ) -> None:
        limit = 1024
        listener, srec = _limited_listener(transport, address, limit)
        try:
            conn, crec, sconn, _ = self._pair(client_transport, (listener, srec))
            assert sconn.max_message_size == limit
            conn.send([b"a" * 512, b"b" * 512])  # exactly the limit: delivered
            assert _as_bytes(srec.wait_messages(sconn, 1)[0]) == [b"a" * 512, b"b" * 512]
            try:
                conn.send([b"c" * 600, b"d" * 600])  # each frame fits, the sum does not
            except ConnectionClosed:
                pass  # the receiver may already have hung up: also fine
            srec.wait_closed(sconn)
            assert srec.order(sconn) == ["open", "message", "close"], (
                f"the oversized message must not be delivered; callbacks were {srec.order(sconn)}"
            )
            assert sconn.closed
            crec.wait_closed(conn)  # the sender learns its connection is gone
            # the listener still accepts and delivers
            other, _orec, sother, _ = self._pair(client_transport, (listener, srec))
            other.send([b"small"])
            assert _as_bytes(srec.wait_messages(sother, 1)[0]) == [b"small"]
            other.close()
        finally:
            listener.close()

    @_bounded
    def test_oversized_header_closes_the_connection(
        self, transport: Transport, client_transport: Transport, address: str
    ) -> None:
        limit = 1024
        fits = (limit - 4) // 8  # 127 empty frames: a 1020-byte header, no body
        listener, srec = _limited_listener(transport, address, limit)
        try:
            conn, crec, sconn, _ = self._pair(client_transport, (listener, srec))
            conn.send([b""] * fits)  # the header just fits: delivered
            assert _as_bytes(srec.wait_messages(sconn, 1)[0]) == [b""] * fits
            try:
                conn.send([b""] * (fits + 1))  # an empty body, but a 1028-byte header
            except ConnectionClosed:
                pass  # the receiver may already have hung up: also fine
            srec.wait_closed(sconn)
            assert srec.order(sconn) == ["open", "message", "close"], (
                "a message whose header alone exceeds max_message_size must not be delivered; "
                f"callbacks were {srec.order(sconn)}"
            )
            crec.wait_closed(conn)
        finally:
            listener.close()

    @_bounded
    def test_oversized_header_is_refused_on_its_frame_count(self, transport: Transport, address: str) -> None:
        limit = 1024
        listener, srec = _limited_listener(transport, address, limit)
        try:
            raw = _raw_sockaddr(listener.address)
            prefix = self.raw_frame_count(transport, 200)  # a 1604-byte header
            if raw is None or prefix is None:
                pytest.skip(f"no raw frame count to send to {listener.address} (see raw_frame_count)")
            family, sockaddr = raw
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.settimeout(WAIT)
                sock.connect(sockaddr)  # type: ignore[arg-type]
                sock.sendall(prefix)  # and not one of the lengths it announces
                sconn = srec.wait_opened()
                srec.wait_closed(sconn)
                assert not srec.messages(sconn)
                try:
                    while sock.recv(4096):
                        pass
                except ConnectionResetError:
                    pass  # closed with our bytes unread: also a close
        finally:
            listener.close()

    @_bounded
    def test_connect_to_nobody_raises_quickly(self, client_transport: Transport, unused_address: str) -> None:
        started = time.monotonic()
        with pytest.raises(TransportError):
            client_transport.connect(unused_address, Recorder(), timeout=4.0)
        elapsed = time.monotonic() - started
        assert elapsed < 5.0, f"connect to a dead address took {elapsed:.1f} s"

    @_bounded
    def test_bad_addresses_raise_value_error(self, transport: Transport) -> None:
        for bad in ("no-such-scheme://nowhere", "not an address"):
            # The contract fixes the exception type only; each transport words its own message.
            with pytest.raises(ValueError):  # noqa: PT011
                transport.listen(bad, Recorder())
            with pytest.raises(ValueError):  # noqa: PT011
                transport.connect(bad, Recorder(), timeout=1.0)

    @_bounded
    def test_default_address_is_listenable_and_local(self, transport: Transport) -> None:
        address = transport.default_address(spans_hosts=False)
        assert isinstance(address, str)
        assert "://" in address
        assert "0.0.0.0" not in address, "without spans_hosts the default address must stay local"
        listener = transport.listen(address, Recorder())
        try:
            assert "://" in listener.address
        finally:
            listener.close()
