"""Helpers for transports over message libraries (zmq, nng): qualified addresses.

A plugin transport serves *qualified* addresses, ``BACKEND+tcp://host:port`` and
``BACKEND+ipc://path``, so an address names the transport that listens there and the
registry selects it by scheme (``zmq+tcp://...`` picks ``zmq``). :func:`parse_qualified`
checks one and names the expected form when it is malformed; :func:`fresh_ipc_name`
gives what ``default_address`` needs (``_route.advertised_host`` what ``listen`` advertises).

The call queue of an I/O thread (``CallQueue``) and the loop built on it (``IoLoop``)
are in :mod:`tetrarch._transport._loop`.
"""

from __future__ import annotations

import os
import secrets
import sys
from dataclasses import dataclass

__all__ = ["QualifiedAddress", "fresh_ipc_name", "parse_qualified"]


@dataclass(frozen=True, slots=True)
class QualifiedAddress:
    """A parsed ``BACKEND+SCHEME://...`` address."""

    backend: str
    scheme: str  # "tcp" or "ipc"
    host: str = ""  # tcp: host without brackets
    port: int = 0  # tcp: 0 asks for a free port
    path: str = ""  # ipc: a file path, or "@name" for Linux's abstract namespace

    def native(self) -> str:
        """The address without the backend prefix (``tcp://h:p``, ``ipc://path``), as libraries take it."""
        if self.scheme == "tcp":
            host = f"[{self.host}]" if ":" in self.host else self.host
            return f"tcp://{host}:{self.port}"
        return f"ipc://{self.path}"


def _forms(backend: str) -> str:
    return f"{backend}+tcp://HOST:PORT (PORT 0 for a free one) or {backend}+ipc:///PATH (or {backend}+ipc://@NAME)"


def parse_qualified(address: str, backend: str) -> QualifiedAddress:
    """Parse ``BACKEND+tcp://host:port`` or ``BACKEND+ipc://path`` for the transport ``backend``.

    Raises:
        ValueError: the address is malformed, names another transport or another
            scheme; the message gives the expected form.
    """
    if not isinstance(address, str):
        raise ValueError(f"address {address!r} is not a string; expected {_forms(backend)}")
    scheme, sep, rest = address.partition("://")
    prefix, plus, base = scheme.partition("+")
    if not sep or not plus or prefix != backend:
        raise ValueError(f"the {backend} transport cannot use address {address!r}; expected {_forms(backend)}")
    if base == "tcp":
        host, colon, port = rest.rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not colon or not host or not port.isdigit() or int(port) > 65535 or any(c in host for c in "/ "):
            raise ValueError(
                f"tcp address {address!r} must look like {backend}+tcp://HOST:PORT (PORT 0 for a free one)"
            )
        return QualifiedAddress(backend, "tcp", host=host, port=int(port))
    if base == "ipc":
        if not rest or rest in ("/", "@") or "\0" in rest:
            raise ValueError(f"ipc address {address!r} must look like {backend}+ipc:///PATH or {backend}+ipc://@NAME")
        return QualifiedAddress(backend, "ipc", path=rest)
    raise ValueError(f"the {backend} transport serves tcp and ipc, not {base!r}: expected {_forms(backend)}")


def fresh_ipc_name(backend: str) -> str:
    """A new ipc location: ``@tetrarch-...`` (abstract, nothing on disk) on Linux, else a file path."""
    name = f"tetrarch-{backend}-{os.getpid()}-{secrets.token_hex(6)}"
    if sys.platform.startswith("linux"):
        return f"@{name}"
    base = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tetrarch-{os.getuid()}")
    os.makedirs(base, mode=0o700, exist_ok=True)
    return os.path.join(base, f"{name}.sock")
