"""The kernel's side of a transport, in the test's own process: what ``Transport.use_key`` receives and when."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tetrarch._transport._auth import transport_key
from tetrarch._transport._base import Transport

__all__ = ["kernel_listening", "transport_key"]


@contextmanager
def kernel_listening(transport: Transport, secret: bytes, *, address: str | None = None) -> Iterator[str]:
    """The kernel's router listening on ``transport`` for an allocation of ``secret``; yields its address.

    It does what every tetrarch process does with its transport: hands it the
    allocation's key (``transport.use_key(transport_key(secret))``) and its bounds on
    strangers (``limit_unauthenticated``), then listens at ``address`` (default: the
    transport's local default address) and authenticates whoever dials. The router is
    closed when the block ends; the transport is the caller's to close.

    Raises:
        TransportError: the transport refused the key or cannot listen at ``address``.
    """
    from tetrarch._runtime.router._router import Router

    router = Router(transport, secret, name="kernel-listening", listen_address=address, lead_waiters=False)
    try:
        yield router.address
    finally:
        router.close()
