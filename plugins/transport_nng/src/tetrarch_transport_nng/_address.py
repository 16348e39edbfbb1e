"""Addresses of the nng transport: ``nng+tcp://host:port`` and ``nng+ipc:///path`` / ``nng+ipc://@name``.

Plain ``tcp://`` and ``ipc://`` are accepted too (the registry hands a transport the
address as the user wrote it); listeners always report the qualified form.
"""

from __future__ import annotations

import os
import secrets
import sys

__all__ = ["FORMS", "data_address", "fresh_ipc", "parse"]

FORMS = "nng+tcp://host:port, nng+ipc:///absolute/path or nng+ipc://@abstract-name"
_LINUX = sys.platform.startswith("linux")


def parse(address: str) -> tuple[str, str, str]:
    """``(scheme, nng_url, rest)`` for one of our addresses; ``scheme`` is ``tcp`` or ``ipc``.

    Raises:
        ValueError: the address is malformed or of another scheme; the message names the expected form.
    """
    scheme, sep, rest = address.partition("://")
    if not sep:
        raise ValueError(f"address {address!r} has no scheme; the nng transport expects {FORMS}")
    base = scheme[4:] if scheme.startswith("nng+") else scheme
    if base == "tcp":
        host, colon, port = rest.rpartition(":")
        if not colon or not port.isdigit() or not host or int(port) > 65535:
            raise ValueError(f"nng tcp address {address!r} must look like nng+tcp://host:port (port 0: any free port)")
        return "tcp", f"tcp://{host}:{port}", rest
    if base == "ipc":
        if rest.startswith("@") and len(rest) > 1:
            if not _LINUX:
                raise ValueError(f"nng ipc address {address!r}: abstract names (@name) exist on Linux only; "
                                 "use nng+ipc:///absolute/path")
            return "ipc", f"abstract://{rest[1:]}", rest
        if rest.startswith("/") and len(rest) > 1:
            return "ipc", f"ipc://{rest}", rest
        raise ValueError(f"nng ipc address {address!r} must look like nng+ipc:///absolute/path or nng+ipc://@name")
    raise ValueError(f"address {address!r}: scheme {scheme!r} is not served by the nng transport; expected {FORMS}")


def fresh_ipc() -> str:
    """A fresh local ``nng+ipc://`` address nobody listens on (abstract on Linux: nothing on disk)."""
    name = f"tetrarch-nng-{os.getpid()}-{secrets.token_hex(6)}"
    if _LINUX:
        return f"nng+ipc://@{name}"
    base = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tetrarch-{os.getuid()}")
    os.makedirs(base, mode=0o700, exist_ok=True)
    return f"nng+ipc://{os.path.join(base, name)}.sock"


def data_address(scheme: str, bind_host: str) -> str:
    """Where a listener's per-connection socket listens: same kind of address as the listener's."""
    if scheme == "tcp":
        return f"tcp://{bind_host}:0"
    return parse(fresh_ipc())[1]
