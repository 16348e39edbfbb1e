"""The transport interface every byte-moving backend implements.

A transport moves *messages*: ordered lists of byte buffers ("frames") between two
endpoints of a connection. It knows nothing about pickling, actors or security: the
kernel authenticates every connection itself (see ``tetrarch._transport._auth``)
before it decodes a single frame, so a transport plugin cannot forget to.

Threading contract (the kernel relies on it):

* ``Connection.send`` may be called from any thread; frames of one ``send`` call are
  delivered together, and the messages of one connection arrive in send order.
* Handler callbacks never run two at once and must not block. They run on the
  transport's own I/O thread, or, for a transport whose :meth:`Transport.leader_loop` is
  a :class:`~tetrarch.plugins.LeaderLoop` (such as ``IoLoop``), on a thread that waits for a reply and reads for
  the loop meanwhile. The one exception is ``on_open`` of a dialed connection, which
  runs in the thread calling ``connect`` before any ``on_message`` of that connection.
* ``Connection.max_message_size`` is honoured by the receiving side: a peer that
  announces a larger message is disconnected without the message being buffered.
  The header counts too: a message whose header alone (a 4-byte frame count plus 8
  bytes of length per frame, whatever the transport's own framing) would exceed the
  limit is refused as soon as its frame count is known, before the lengths are
  buffered. So one connection never holds more than about twice the limit of a message
  it has not delivered yet. The kernel keeps the limit small (``PRE_AUTH_LIMIT``) until
  the peer is authenticated: that is what bounds a connection nobody vouched for.

Optional capability, *receive sinks* (a transport that lacks it changes nothing; the
kernel then copies what it receives): a connection whose ``supports_sinks`` is True
consults ``Connection.sinks`` before it allocates buffers for a large message. The
kernel sets ``sinks`` only once the peer is authenticated, so an unauthenticated peer
never names memory to write into. See :data:`SinkResolver` for the rules.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from .._errors import TetrarchError
from ._limits import PreAuthLimits

if TYPE_CHECKING:
    from ._loop import LeaderLoop

__all__ = [
    "Buffer",
    "Connection",
    "ConnectionClosed",
    "ConnectionHandler",
    "HandshakeRefused",
    "Listener",
    "PreAuthLimits",
    "SinkResolver",
    "Transport",
    "TransportError",
]

Buffer = bytes | bytearray | memoryview

#: ``resolver(lead, sizes)``: where the rest of a large message should land.
#:
#: ``lead`` are the message's first frames, up to (not including) its first frame of at
#: least ``_framing.OWN_MIN`` bytes, provided they total less than that (a transport
#: waits until they have arrived before it asks); ``sizes`` has every frame's length.
#: The resolver returns None (the transport uses its own buffers) or one entry per frame
#: after the lead: None for "your own buffer", or a writable, contiguous byte
#: ``memoryview`` of exactly that frame's length for the transport to receive the frame
#: into. The delivered message then holds that very memoryview object in its place, so
#: the handler can tell (``frame is sink``) that the bytes are already where they
#: belong. Runs on the transport's I/O thread and must not block; an entry that breaks
#: these rules, or a resolver that raises, makes the transport fall back to its own
#: buffers for that message. The memory is written while the message arrives, before
#: ``on_message``: a message that never completes (the connection broke) leaves part
#: of it written.
SinkResolver = Callable[[list[bytes], list[int]], "Sequence[memoryview | None] | None"]


class TransportError(TetrarchError, OSError):
    """A transport could not listen, connect or send."""


class ConnectionClosed(TransportError):
    """The connection is closed (by either side); the message was not sent."""


class HandshakeRefused(TransportError):
    """``connect``: the listener refused this process in the transport's own handshake
    (another transport key, see :meth:`Transport.use_key`), as opposed to nobody listening."""


class ConnectionHandler(Protocol):
    """Callbacks a transport invokes on its I/O thread."""

    def on_open(self, conn: Connection) -> None:
        """A connection was accepted by a listener or established by ``connect``."""

    def on_message(self, conn: Connection, frames: list[memoryview]) -> None:
        """One whole message arrived. The frames stay valid after the call returns."""

    def on_close(self, conn: Connection, error: BaseException | None) -> None:
        """The connection closed; ``error`` is None for an orderly close."""


class Connection(abc.ABC):
    """One bidirectional, ordered, message-oriented connection."""

    #: The largest message (sum of frame sizes) the receiving side accepts; also the
    #: largest header (``4 + 8 * frames`` bytes), checked as soon as the frame count is read.
    max_message_size: int = 1 << 62

    #: Free slot for the kernel (authentication state, peer identity).
    context: object = None

    #: Whether this connection honours :attr:`sinks` (the optional receive-sink capability).
    supports_sinks: bool = False

    #: Set by the kernel (only on an authenticated connection whose ``supports_sinks`` is
    #: True): names caller-owned memory that frames of a large message are received into.
    sinks: SinkResolver | None = None

    @property
    @abc.abstractmethod
    def peer(self) -> str:
        """A human readable description of the remote end (for errors and logs)."""

    @abc.abstractmethod
    def send(self, frames: Sequence[Buffer]) -> None:
        """Send one message made of ``frames``, without concatenating them.

        Thread safe. Blocks while the kernel socket buffer is full (backpressure).

        Raises:
            ConnectionClosed: the connection is closed.
        """

    def send_many(self, messages: Sequence[Sequence[Buffer]]) -> None:
        """Send several messages in order (transports may write them in one syscall).

        Raises:
            ConnectionClosed: the connection is closed (some messages may be lost).
        """
        for frames in messages:
            self.send(frames)

    @abc.abstractmethod
    def close(self) -> None:
        """Close the connection. Idempotent; ``on_close`` runs once."""

    @property
    @abc.abstractmethod
    def closed(self) -> bool:
        """Whether the connection is closed."""


class Listener(abc.ABC):
    """A bound, listening endpoint that accepts connections."""

    @property
    @abc.abstractmethod
    def address(self) -> str:
        """The address peers connect to (with the real port if 0 was asked for)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop accepting. Existing connections stay open. Idempotent."""


class Transport(abc.ABC):
    """A family of addresses (``schemes``) and how to listen on and dial them."""

    #: Backend name as registered with the plugin registry, e.g. ``"tcp"``.
    name: str = ""
    #: The bare address schemes this transport serves, e.g. ``("tcp", "ipc")``, as its ``TransportSpec.schemes``:
    #: ``listen`` gets bare addresses (``tcp://h:1``) even where the user wrote ``foo+tcp://h:1``.
    schemes: tuple[str, ...] = ()

    @abc.abstractmethod
    def listen(self, address: str, handler: ConnectionHandler) -> Listener:
        """Bind and listen on ``address`` (port 0 / a fresh path allowed).

        Raises:
            TransportError: the address cannot be bound.
            ValueError: the address is malformed or of a scheme this transport lacks.
        """

    @abc.abstractmethod
    def connect(self, address: str, handler: ConnectionHandler, timeout: float = 10.0) -> Connection:
        """Dial ``address`` and return the open connection (``on_open`` has run).

        Raises:
            TransportError: nobody listens there, or the dial timed out.
            ValueError: the address is malformed or of a scheme this transport lacks.
        """

    @abc.abstractmethod
    def default_address(self, *, spans_hosts: bool) -> str:
        """An address to listen on: loopback/local unless ``spans_hosts``."""

    def leader_loop(self) -> LeaderLoop | None:
        """The :class:`~tetrarch.plugins.LeaderLoop` that runs this transport's handlers, if any.

        A thread that waits for a reply may then read for that loop itself while nobody
        else does (saving two thread wake-ups per call). None, the default, keeps every
        handler on the transport's own threads.
        """
        return None

    def use_key(self, key: bytes) -> None:  # noqa: B027 - optional: most transports ignore the key
        """Optional: the allocation's *transport key*, handed over before the first ``listen``
        or ``connect``: 32 bytes that every process of the allocation derives from its secret
        (an HMAC under a fixed label: knowing the key tells nothing of the secret).

        A transport whose library authenticates peers in its own handshake can use it to
        refuse a stranger before the library buffers anything the stranger sends (zmq: ZMTP
        PLAIN checked by a ZAP handler). It is a gate in front of the kernel's handshake,
        never instead of it: the kernel still proves the secret on every connection before
        it unpickles a frame. A transport that uses the key makes ``connect`` to a listener
        with another key raise ``TransportError`` promptly (best :class:`HandshakeRefused`,
        so callers can tell a refusal from nobody listening). The default ignores it.
        """

    #: The bounds on connections that have not authenticated, as the kernel last set them
    #: (:meth:`limit_unauthenticated`); the defaults until then.
    preauth_limits: PreAuthLimits = PreAuthLimits()

    def limit_unauthenticated(self, limits: PreAuthLimits) -> None:
        """The kernel's bounds on strangers, handed over before the first ``listen``.

        A transport whose library runs a handshake of its own before ``on_open`` (so the
        kernel can't see the connection yet) must hold that stage to ``limits``: close a
        connection not opened within ``limits.timeout``, keep at most ``limits.max_pending``
        waiting (closing the oldest), hold about ``limits.max_bytes`` for each, and keep at
        most ``limits.connection_limit()`` connections open in all, refusing new ones with a
        log line (see ``tetrarch._transport._limits``). A transport that calls ``on_open``
        as soon as it accepts leaves this to the kernel and keeps the default, which stores
        ``limits`` in :attr:`preauth_limits`.
        """
        self.preauth_limits = limits

    def close(self) -> None:  # noqa: B027 - optional: a transport without resources keeps this no-op
        """Release the transport's I/O resources (threads, contexts). Idempotent."""
