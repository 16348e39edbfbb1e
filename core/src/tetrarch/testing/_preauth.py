"""The pre-authentication part of the transport kit: what a stranger may cost a listener.

Whoever can reach a listener's address can open connections without the allocation's
secret. The kernel bounds such a connection from ``on_open`` on; a transport whose library
runs a handshake of its own first (zmq's ZMTP greeting and PLAIN HELLO, nng's SP header)
holds the stranger *before* the kernel sees it, and must apply the same
bounds, which the kernel hands it with :meth:`Transport.limit_unauthenticated
<tetrarch.plugins.Transport.limit_unauthenticated>` (:class:`~tetrarch.plugins.PreAuthLimits`).

:class:`PreAuthConformance` (inherited by
:class:`~tetrarch.testing.transport.TransportConformance`) holds every transport to them,
against a real kernel ``Router`` on the transport under test, run in a child process
(:mod:`tetrarch.testing._preauth_target`) so that its memory, descriptors and survival are
measured alone. The strangers are raw sockets (127.0.0.1 or Unix sockets only):

* **deadline**: a connection that sends nothing, and one that sends the transport's own
  opening bytes (:meth:`~PreAuthConformance.preauth_flood`) and stalls, are closed by the
  listener within ``timeout`` plus a few seconds' slack;
* **count**: of ``max_pending`` + 8 stalled connections at most ``max_pending`` stay open,
  the oldest closed first, while an authenticated peer is served and a new peer gets in;
* **memory**: 48 stalled connections that each sent the most the pre-open stage takes
  raise the listening process's resident memory by at most 48 x ``max_bytes`` + 16 MiB;
* **descriptors**: with an open-file limit of 1024:1024 and ``max_pending`` far above the
  connection cap, 1100 idle connections neither kill the listener (libzmq aborts on
  EMFILE) nor keep it busy (under half a CPU), an authenticated peer is served meanwhile,
  once the strangers leave a new peer gets in, and the listener logged the refusals (a
  WARNING or ERROR record, of any logger).

Hooks a transport's conformance class overrides: :meth:`~PreAuthConformance.preauth_flood`
(its stalled stranger's bytes), :meth:`~PreAuthConformance.preauth_factory` (how the child
builds the transport) and :attr:`~PreAuthConformance.preauth_skip` (a reason to opt out).
"""

from __future__ import annotations

import contextlib
import errno
import re
import secrets
import select
import socket
import struct
import time
from collections.abc import Callable, Iterator
from typing import ClassVar

import pytest

from tetrarch._transport._base import Transport
from tetrarch._transport._limits import PreAuthLimits, raise_open_file_limit

from ._preauth_target import Peer, Target
from ._raw_sock import closed_now, raw_sockaddr, still_open
from ._timing import scaled

__all__ = ["PreAuthConformance"]

_MiB = 1 << 20
#: Stalled strangers beyond ``max_pending`` in the count test, and ``max_pending`` there.
_EXTRA, _PENDING = 8, 8
#: Stalled strangers in the memory test, and the growth allowed besides ``max_bytes`` each.
_FLOODERS, _SLACK = 48, 16 * _MiB
#: The open-file limit of the listening child in the descriptor test, and the strangers.
_NOFILE, _ATTACKERS = 1024, 1100
_TIMEOUT_MARK = pytest.mark.timeout(scaled(90))
#: A log record of WARNING or above, as the child formats them (any logger: a plugin logs with its own).
_LOGGED = re.compile(r"^(WARNING|ERROR|CRITICAL) \S+: ", re.MULTILINE)


def _until(predicate: Callable[[], bool], timeout: float, what: str, step: float = 0.02) -> None:
    """Poll ``predicate`` until it holds; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(step)


def _push(socks: list[socket.socket], payload: bytes, deadline: float) -> None:
    """Send ``payload`` on every socket without blocking on any; stop at ``deadline``.

    A listener that stops reading (back-pressure) or closes a socket ends that socket's
    share early: both are ways to bound what a stranger costs.
    """
    sent = dict.fromkeys(range(len(socks)), 0)
    view = memoryview(payload)
    for s in socks:
        s.setblocking(False)
    while sent and time.monotonic() < deadline:
        wait = min(0.05, max(0.0, deadline - time.monotonic()))
        _, writable, _ = select.select([], [socks[i] for i in sent], [], wait)
        for s in writable:
            i = socks.index(s)
            try:
                sent[i] += s.send(view[sent[i]:])
            except BlockingIOError:
                continue
            except OSError:
                sent[i] = len(payload)
            if sent[i] >= len(payload):
                del sent[i]


def _unread(socks: list[socket.socket], family: int, port: int) -> int:
    """Bytes sent on ``socks`` that the listener has not read yet (about; 0 once it read them all)."""
    if family == socket.AF_UNIX:  # a Unix stream's bytes count against its sender until read
        total = 0
        for s in socks:
            with contextlib.suppress(OSError):
                import fcntl
                import termios

                total += struct.unpack("i", fcntl.ioctl(s.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
        return total
    total = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                local, remote, state, queues = fields[1], fields[2], fields[3], fields[4]
                tx, rx = (int(q, 16) for q in queues.split(":"))
                if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
                    total += rx  # the listener's side: received, not read
                elif state == "01" and int(remote.rsplit(":", 1)[1], 16) == port:
                    total += tx  # ours: not delivered yet
    return total


class PreAuthConformance:
    """Tests that a stranger's connection costs a listening process little, for a short time.

    Needs the ``transport`` and ``address`` fixtures of
    :class:`~tetrarch.testing.transport.TransportConformance`.
    """

    #: A reason this class skips the pre-auth tests, or None (they run). Only for a transport
    #: that truly cannot be reached by a raw socket, or a class that repeats another's
    #: listener (the tests use no ``client_transport``: a second instance adds nothing).
    preauth_skip: ClassVar[str | None] = None

    def preauth_flood(self, address: str) -> bytes | None:
        """The bytes a stranger sends to make the listener at ``address`` hold the most, then stalls.

        A genuine dialer's opening, carried as far as the transport lets a peer without the
        key go, up to the largest message or command it accepts, less its last byte (a
        stalled stranger must not complete anything). The default is the builtin framing's
        (the kernel's stage starts at accept): one frame of ``PRE_AUTH_LIMIT`` bytes, less
        one. Override it for your wire: zmq's is a ZMTP 3.0 greeting for PLAIN and a HELLO
        command announcing the largest frame the listener takes; nng's a pair0 SP header and
        a message as large as the listener takes before the connection opens. None: the
        memory test skips (the others still run, with silent strangers only).
        """
        from tetrarch._transport._auth import PRE_AUTH_LIMIT

        return struct.pack("!IQ", 1, PRE_AUTH_LIMIT) + bytes(PRE_AUTH_LIMIT - 1)

    def preauth_factory(self, transport: Transport) -> str:
        """``"pkg.mod:Class"`` that the listening child (and the test's peers) call, without
        arguments, to build a transport like ``transport``. Override if yours needs arguments
        (point it at a subclass or function that supplies them)."""
        cls = type(transport)
        return f"{cls.__module__}:{cls.__qualname__}"

    # -- plumbing ------------------------------------------------------------------------
    @pytest.fixture
    def preauth(self, transport: Transport, address: str) -> Iterator[_Bench]:
        """A bench for one test: the factory, the address, a secret, and cleanup of it all."""
        if self.preauth_skip is not None:
            pytest.skip(self.preauth_skip)
        with contextlib.ExitStack() as stack:
            yield _Bench(self.preauth_factory(transport), address, self.preauth_flood(address), stack)

    # -- tests -------------------------------------------------------------------------
    @_TIMEOUT_MARK
    def test_preauth_stalled_connections_are_closed_at_the_deadline(self, preauth: _Bench) -> None:
        timeout, slack = scaled(1.0), scaled(4.0)
        target = preauth.target(timeout=timeout, max_pending=512)
        opened = time.monotonic()
        silent = preauth.raw(target)
        strangers = [silent]
        if preauth.flood is not None:
            opener = preauth.raw(target)
            _push([opener], preauth.flood, time.monotonic() + scaled(5))
            strangers.append(opener)
        left = still_open(strangers, max(0.0, opened + timeout + slack - time.monotonic()))
        kinds = ["one that sent nothing", "one that sent preauth_flood()'s bytes and stalled"]
        assert not left, (
            f"the listener kept {', '.join(kinds[i] for i in left)} open {timeout + slack:g} s after it connected "
            f"(auth_timeout {timeout:g} s); {target.describe()}"
        )
        preauth.served_by_new_peer(target, "after the deadline")

    @_TIMEOUT_MARK
    def test_preauth_pending_connections_are_capped_oldest_first(self, preauth: _Bench) -> None:
        target = preauth.target(timeout=scaled(60), max_pending=_PENDING)
        friend = preauth.served_by_new_peer(target, "before the strangers")
        strangers = [preauth.raw(target) for _ in range(_PENDING + _EXTRA)]
        if preauth.flood is not None:
            _push(strangers, preauth.flood, time.monotonic() + scaled(10))
        oldest = strangers[:_EXTRA]
        left = still_open(oldest, scaled(5))
        assert not left, (
            f"{_PENDING + _EXTRA} strangers with max_pending={_PENDING}: the oldest {_EXTRA} must be closed, "
            f"but #{left} of them are still open; {target.describe()}"
        )
        open_now = [i for i, s in enumerate(strangers) if not closed_now(s)]
        assert len(open_now) <= _PENDING, f"{len(open_now)} strangers open with max_pending={_PENDING}"
        assert len(strangers) - 1 in open_now, "the newest stranger was closed instead of the oldest"
        preauth.served(target, friend, "an authenticated peer, while strangers wait")
        preauth.served_by_new_peer(target, "while max_pending strangers wait")

    @_TIMEOUT_MARK
    def test_preauth_memory_per_stalled_connection_is_bounded(self, preauth: _Bench) -> None:
        if preauth.flood is None:
            pytest.skip("preauth_flood() returned None: no bytes to hold the listener with")
        limits = PreAuthLimits(timeout=scaled(60), max_pending=512)
        target = preauth.target(timeout=limits.timeout, max_pending=limits.max_pending)
        friend = preauth.served_by_new_peer(target, "before the strangers")
        family, port = preauth.family, preauth.port(target)
        before = target.rss()
        strangers = [preauth.raw(target) for _ in range(_FLOODERS)]
        _push(strangers, preauth.flood, time.monotonic() + scaled(15))
        peak = before
        bound = _FLOODERS * limits.max_bytes + _SLACK
        deadline = time.monotonic() + scaled(5)  # until the listener has read what it will read
        while time.monotonic() < deadline and peak - before <= bound:
            unread = _unread(strangers, family, port)
            peak = max(peak, target.rss())
            if not unread:
                break
            time.sleep(0.02)
        peak = max(peak, target.rss())
        grown = peak - before
        assert grown <= bound, (
            f"{_FLOODERS} strangers that each sent {len(preauth.flood)} bytes of preauth_flood() and stalled grew "
            f"the listening process by {grown / _MiB:.1f} MiB ({grown / _FLOODERS / 1024:.0f} KiB each); allowed: "
            f"max_bytes={limits.max_bytes // 1024} KiB each + {_SLACK // _MiB} MiB; {target.describe()}"
        )
        preauth.served(target, friend, "an authenticated peer, while strangers wait")

    @_TIMEOUT_MARK
    def test_preauth_descriptor_exhaustion_is_survived(self, preauth: _Bench) -> None:
        if raise_open_file_limit() < _ATTACKERS + 256:
            pytest.skip(f"this test process may not open {_ATTACKERS + 256} files (RLIMIT_NOFILE)")
        target = preauth.target(timeout=scaled(60), max_pending=4 * _NOFILE, nofile=_NOFILE)
        friend = preauth.served_by_new_peer(target, "before the strangers")
        strangers: list[socket.socket] = []
        failures, deadline = 0, time.monotonic() + scaled(20)
        while len(strangers) < _ATTACKERS and failures < 16 and time.monotonic() < deadline:
            s = preauth.try_raw(target, scaled(1.0))
            if s is None:
                failures += 1  # refused, or a full backlog: the listener is not accepting now
            else:
                strangers.append(s)
                failures = 0
            if len(strangers) % 100 == 0 and not target.alive():
                break
        assert target.alive(), f"the listener died under {len(strangers)} connections; {target.describe()}"
        preauth.served(target, friend, f"an authenticated peer, while {len(strangers)} strangers are connected")
        # Strangers connected, nobody sending: the listener goes idle once it has dealt with the last
        # arrivals (closing the shed ones can take nng a moment). A loop that spins stays busy in every window.
        windows, busy = [], 1.0
        settle = time.monotonic() + scaled(6)
        while busy >= 0.5 and time.monotonic() < settle and target.alive():
            busy = target.busy(1.0)
            windows.append(f"{busy:.0%}")
        assert target.alive(), f"the listener died under {len(strangers)} connections; {target.describe()}"
        assert busy < 0.5, (
            f"the listener used {', '.join(windows)} of a CPU in successive seconds while {len(strangers)} "
            "idle strangers were connected "
            f"(a loop that retries accept() without a descriptor to accept with?); {target.describe()}"
        )
        count = len(strangers)
        for s in strangers:
            s.close()
        strangers.clear()
        preauth.served_by_new_peer(target, f"after {count} strangers left")
        assert target.alive(), target.describe()
        _until(lambda: bool(_LOGGED.search(target.stderr())), scaled(5),
               f"a logged WARNING saying connections were refused (the listening process, limited "
               f"to {_NOFILE} files, took {count} strangers); {target.describe()}")


class _Bench:
    """What one pre-auth test uses: the child, raw strangers and real peers, all cleaned up."""

    def __init__(self, factory: str, address: str, flood: bytes | None, stack: contextlib.ExitStack) -> None:
        self.factory, self.address, self.flood, self._stack = factory, address, flood, stack
        self.secret = secrets.token_bytes(32)
        self.family: int = socket.AF_UNIX
        self._sockaddr: object = None
        self._peers = 0
        self._expected = 0

    def target(self, *, timeout: float, max_pending: int, nofile: int | None = None) -> Target:
        target = Target(self.factory, self.address, self.secret, timeout=timeout, max_pending=max_pending,
                        nofile=nofile, start_timeout=scaled(30))
        self._stack.callback(target.close, scaled(10))
        raw = raw_sockaddr(target.address)
        if raw is None:
            pytest.skip(f"a raw socket cannot dial {target.address} (set preauth_skip with the reason)")
        self.family, self._sockaddr = raw
        host = raw[1][0] if self.family in (socket.AF_INET, socket.AF_INET6) else None  # type: ignore[index]
        if host is not None and host not in ("127.0.0.1", "::1"):
            pytest.skip(f"the pre-auth tests dial loopback and Unix sockets only, not {target.address}: "
                        "override the `address` fixture")
        return target

    def port(self, target: Target) -> int:
        return int(self._sockaddr[1]) if self.family != socket.AF_UNIX else 0  # type: ignore[index]

    def raw(self, target: Target) -> socket.socket:
        """A raw connection to the target, closed at the end of the test.

        Raises:
            AssertionError: it cannot connect within a few seconds.
        """
        s = self.try_raw(target, scaled(5))
        if s is None:
            raise AssertionError(f"cannot connect to {target.address}; {target.describe()}")
        return s

    def try_raw(self, target: Target, timeout: float) -> socket.socket | None:
        """A raw connection, or None if it was refused or found no room within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            s = socket.socket(self.family, socket.SOCK_STREAM)
            s.settimeout(timeout)
            try:
                s.connect(self._sockaddr)  # type: ignore[arg-type]
                break
            except OSError as exc:
                s.close()
                # A Unix socket's full backlog answers EAGAIN at once where TCP waits: wait too.
                if exc.errno == errno.EAGAIN and time.monotonic() < deadline:
                    time.sleep(0.005)
                    continue
                if exc.errno not in (errno.ECONNREFUSED, errno.EAGAIN, errno.ETIMEDOUT, None):
                    raise
                return None
        self._stack.callback(s.close)
        return s

    def served_by_new_peer(self, target: Target, when: str) -> Peer:
        """A new authenticated peer (a Router on a fresh transport) whose message the target counts."""
        self._peers += 1
        peer = Peer(self.factory, self.secret, name=f"preauth-peer-{self._peers}")
        self._stack.callback(peer.close)
        self.served(target, peer, f"a new peer, {when}")
        return peer

    def served(self, target: Target, peer: Peer, who: str) -> None:
        """``peer`` sends the target one message; fail unless the target counts it in time."""
        try:
            peer.send(target.address, who)
        except ConnectionError as exc:
            raise AssertionError(f"{who} could not reach the listener: {exc}; {target.describe()}") from exc
        self._expected += 1
        target.wait_served(self._expected, scaled(10), f"the listener to serve {who}")
