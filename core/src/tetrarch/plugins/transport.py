"""Everything a transport plugin's implementation needs: the interfaces and the kernel's wire helpers.

Import it from the modules that implement the transport (the factory's module), never
from the featherweight entry point module, which imports only :mod:`tetrarch.plugins`.

The interfaces (contracts in their docstrings; docs/plugins.md §5): :class:`Transport`,
:class:`Listener`, :class:`Connection`, :class:`ConnectionHandler`, the errors
:class:`TransportError`, :class:`ConnectionClosed` (``send`` after a close) and
:class:`HandshakeRefused`; :data:`Buffer`, what a frame may be; :data:`SinkResolver`,
the optional receive sinks.

**The framing** a transport uses when its library moves bytes, not message lists (the
builtin socket transport writes it to a stream, nng inside its own messages): a message
is the frame count (:data:`COUNT`, ``!I``), each frame's length (``!Q``), then the
frames back to back. :func:`header` writes the first two (its size counts toward
``max_message_size``); a receiver refuses a count over :data:`MAX_FRAMES` and, on
authenticated connections only, asks its sink resolver where large frames go. To
receive, :func:`receive_buffers` gives the frames' buffers and the targets left to
fill, :func:`consume` drops what a read filled; :func:`nbytes` sizes any frame.
:func:`as_bytes` is how the kernel adopts a frame as ``bytes`` (no copy for a frame of
its own buffer).

**Strangers**: until a peer authenticated, the kernel sets each connection's
``max_message_size`` to :data:`PRE_AUTH_LIMIT`; a library with a handshake of its own
holds it to :class:`PreAuthLimits` (``limit_unauthenticated``) and keeps at most
:func:`connection_cap` connections.

**Loops and threads**: :class:`LeaderLoop` (let waiting threads read for your loop),
:class:`IoLoop` (the epoll loop of the builtin and nng transports), :class:`CallQueue`;
:func:`helper_thread_policy` and :func:`batch_helper_threads` for a library's own threads.

**Addresses**: :func:`parse_qualified` / :class:`QualifiedAddress` (``foo+tcp://...``),
:func:`fresh_ipc_name`, :func:`advertised_host`.
"""

from __future__ import annotations

from .._runtime.values._buffers import as_bytes
from .._transport._auth import PRE_AUTH_LIMIT
from .._transport._base import (
    Buffer,
    Connection,
    ConnectionClosed,
    ConnectionHandler,
    HandshakeRefused,
    Listener,
    SinkResolver,
    Transport,
    TransportError,
)
from .._transport._call_queue import CallQueue
from .._transport._framing import COUNT, MAX_FRAMES, consume, header, nbytes, receive_buffers
from .._transport._limits import PreAuthLimits, connection_cap
from .._transport._loop import IoLoop, LeaderLoop
from .._transport._qualified import QualifiedAddress, fresh_ipc_name, parse_qualified
from .._transport._route import advertised_host
from .._transport._sched import batch_helper_threads, helper_thread_policy

__all__ = [
    "COUNT",
    "MAX_FRAMES",
    "PRE_AUTH_LIMIT",
    "Buffer",
    "CallQueue",
    "Connection",
    "ConnectionClosed",
    "ConnectionHandler",
    "HandshakeRefused",
    "IoLoop",
    "LeaderLoop",
    "Listener",
    "PreAuthLimits",
    "QualifiedAddress",
    "SinkResolver",
    "Transport",
    "TransportError",
    "advertised_host",
    "as_bytes",
    "batch_helper_threads",
    "connection_cap",
    "consume",
    "fresh_ipc_name",
    "header",
    "helper_thread_policy",
    "nbytes",
    "parse_qualified",
    "receive_buffers",
]
