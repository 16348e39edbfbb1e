"""What a peer that has not authenticated may cost a listening process, and how many
connections a process keeps open at most.

Whoever can reach a listener's address can open connections without knowing the
allocation's secret. The kernel bounds what each one costs once the transport hands it
over (``on_open``): a small message limit, a deadline, a cap on how many wait at once
(``_runtime/router/_router.py``). A transport whose library runs a handshake of its own before
``on_open`` (zmq's ZMTP, nng's SP header exchange) holds the stranger *before* the kernel sees
it, so it gets the same bounds through :meth:`Transport.limit_unauthenticated
<tetrarch.plugins.Transport.limit_unauthenticated>` and must honour them for that stage:

* ``timeout``: a connection not opened (handed to ``on_open``) this many seconds after
  it was accepted is closed;
* ``max_pending``: at most this many accepted connections wait for their opening at
  once; one more closes the *oldest* waiting one (an attacker can't lock real peers out
  by opening connections first);
* ``max_bytes``: about the most memory the transport (its library's buffers included)
  holds for one waiting connection;
* ``max_connections``: the most connections the listening process keeps open at all,
  authenticated or not (:func:`connection_cap`: half the open-file limit by default). A
  connection accepted beyond it is closed at once, with a log line, so a flood of
  connections runs into this cap, never into the process's descriptor limit (libzmq
  aborts the whole process when ``accept`` finds no descriptor left).

The conformance kit holds every transport to these (``tetrarch.testing``,
``PreAuthConformance``).
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

__all__ = ["PreAuthLimits", "connection_cap", "raise_open_file_limit"]

#: Descriptors kept free below the open-file limit whatever the cap: room for the files,
#: pipes and sockets the process opens itself while it is flooded.
_FD_RESERVE = 64


def raise_open_file_limit() -> int:
    """Raise this process's soft open-file limit to its hard limit; return the soft limit now.

    Many Linux machines default to a soft limit of 1024 with a much higher hard limit; a
    process with hundreds of peers (or a flood of strangers' connections) needs more.
    Never raises: where the limit can't be read or changed, the current one is returned.
    """
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover - getrlimit does not fail on Linux
        return 1024
    if hard == resource.RLIM_INFINITY or (soft != resource.RLIM_INFINITY and soft < hard):
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError):
            pass
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def connection_cap() -> int:
    """The most connections one process should keep open: half its current soft open-file limit.

    The other half stays free for a burst of accepts that arrive before the cap is
    noticed, and for the process's own files. At least 32.
    """
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover
        soft = 1024
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(32, min(soft // 2, soft - _FD_RESERVE))


@dataclass(frozen=True, slots=True)
class PreAuthLimits:
    """Bounds on connections that have not authenticated yet (see the module docstring).

    Attributes:
        timeout: seconds from accept until a connection must be open *and* authenticated.
        max_pending: accepted connections that may wait at once; one more closes the oldest.
        max_bytes: about the most memory held for one waiting connection.
        max_connections: connections the process keeps at most; None: :func:`connection_cap`
            at the time of each check.
    """

    timeout: float = 10.0
    max_pending: int = 512
    max_bytes: int = 128 * 1024
    max_connections: int | None = None

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ValueError(f"PreAuthLimits.timeout must be a positive number of seconds, got {self.timeout!r}")
        if self.max_pending < 1:
            raise ValueError(f"PreAuthLimits.max_pending must be at least 1, got {self.max_pending!r}")
        if self.max_bytes < 4096:
            raise ValueError(f"PreAuthLimits.max_bytes must be at least 4096, got {self.max_bytes!r}")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError(f"PreAuthLimits.max_connections must be at least 1 or None, got {self.max_connections!r}")

    def connection_limit(self) -> int:
        """``max_connections``, or :func:`connection_cap` when it is None."""
        return self.max_connections if self.max_connections is not None else connection_cap()
