"""The shared secret file and the address checks of workers (``run_worker_loop_forever``) and their clients.

The secret file is the allocation's secret shared out of band: a file only its user
can read (no group or other permission bits), holding at least 32 characters
(:func:`new_secret_file` makes one). The same file (or a copy) is given to the
workers and to the client that attaches to them.
"""

from __future__ import annotations

import os
import secrets
import stat
from typing import Any

from .._errors import ArgumentError, ArgumentTypeError, NotSupportedError
from .._plugins import split_address
from .._transport._route import host_of
from ._secret import SecretError

__all__ = ["MIN_SECRET_CHARS", "check_address", "check_tls", "is_loopback", "new_secret_file", "read_secret_file"]

#: The fewest characters a secret file must hold.
MIN_SECRET_CHARS = 32
_MAX_SECRET = 4096
_WILDCARDS = frozenset({"*", "0.0.0.0", "::", ""})
_LOOPBACK = ("127.", "localhost", "::1")


def new_secret_file(path: str | os.PathLike[str]) -> str:
    """Create ``path`` holding a fresh random secret, readable only by its user (0600); returns the path.

    Its folder is created (0700) when missing. Give the same file to the workers
    (``run_worker_loop_forever(secret_file=...)``) and to the client
    (``attach_to_workers(secret_file=...)``, ``WorkerJob(secret_file=...)``).

    Raises:
        FileExistsError: ``path`` exists already (it is never overwritten).
        OSError: the file or its folder cannot be created.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return path


def read_secret_file(path: str | os.PathLike[str] | None, who: str) -> bytes:
    """The secret held by the file ``path`` (its text, surrounding whitespace removed).

    ``who`` names the call for the errors (``"run_worker_loop_forever"``).

    Raises:
        SecretError: no path was given, the file cannot be read, others may read it
            (the message names ``chmod 600``), or it holds fewer than 32 characters.
    """
    if path is None:
        raise SecretError(
            f"{who} needs the allocation's secret: pass secret_file=PATH, a file only you can read holding the secret "
            f"that the workers and the client share (create one with tetrarch.job.new_secret_file(PATH) and copy it "
            f"to every host)")
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentTypeError(f"{who}(secret_file=...) takes a path, got {path!r}")
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise SecretError(f"{who} cannot read the secret file {path!r}: {exc}") from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise SecretError(f"the secret file {path!r} is not a regular file")
        if mode & 0o077:
            raise SecretError(f"the secret file {path!r} may be read by others (mode {stat.filemode(mode)}); "
                              f"make it private: chmod 600 {path}")
        data = f.read(_MAX_SECRET + 1).strip()
    if len(data) < MIN_SECRET_CHARS or len(data) > _MAX_SECRET:
        raise SecretError(f"the secret file {path!r} must hold {MIN_SECRET_CHARS} to {_MAX_SECRET} characters, it "
                          f"holds {len(data)}; create one with tetrarch.job.new_secret_file(PATH)")
    return data


def check_tls(ca: Any, private_key: Any, who: str) -> None:
    """Refuse Monarch's TLS arguments, which tetrarch replaces with the shared secret.

    Raises:
        ArgumentError: ``ca="trust_all_connections"`` (tetrarch never trusts a peer that
            did not prove it holds the secret).
        NotSupportedError: any other ``ca`` or a ``private_key`` (certificates are not supported).
    """
    fix = ("every worker and client proves it holds the allocation's secret instead: pass secret_file=PATH, the same "
           "file (mode 0600) on the workers and the client (tetrarch.job.new_secret_file(PATH) makes one)")
    if isinstance(ca, str) and ca == "trust_all_connections":
        raise ArgumentError(f"{who}(ca='trust_all_connections') is refused: tetrarch requires the secret; {fix}")
    if ca is not None or private_key is not None:
        raise NotSupportedError(f"{who}: TLS certificates (ca=, private_key=) are not supported; {fix}")


def check_address(address: object, who: str) -> str:
    """``address`` (``tcp://10.0.0.2:26600``) checked for a worker: a scheme and a host that is no wildcard.

    Raises:
        ArgumentTypeError: not a string.
        ArgumentError: no scheme, Monarch's ``advertised@bind`` alias form, or a wildcard host.
    """
    if not isinstance(address, str):
        raise ArgumentTypeError(f"{who}: a worker address is a string such as 'tcp://10.0.0.2:26600', got {address!r}")
    if "@" in address:
        raise ArgumentError(f"{who}: the alias form {address!r} (advertised@bind) is not supported; give the address "
                            f"of one interface, e.g. 'tcp://10.0.0.2:26600'")
    _backend, scheme, rest = split_address(address)
    if scheme == "tcp":
        host = host_of(address)
        if host is None or host in _WILDCARDS or rest.startswith("*"):
            raise ArgumentError(f"{who}: {address!r} names no single interface; a worker listens where its clients "
                                f"dial it, e.g. 'tcp://10.0.0.2:26600' (never a wildcard)")
    return address


def is_loopback(address: str) -> bool:
    """Whether ``address`` is on this machine only (loopback or a unix socket)."""
    host = host_of(address)
    return host is None or host.startswith(_LOOPBACK)
