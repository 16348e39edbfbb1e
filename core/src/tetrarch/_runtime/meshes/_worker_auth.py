"""The shared secret file and the address checks of workers (``run_worker_loop_forever``) and their clients.

The secret file is the workers' secret shared out of band: a file only its user
can read (no group or other permission bits), holding at least 32 characters
(:func:`new_secret_file` makes one). The same file (or a copy) is given to the
workers and to the client that attaches to them.

That secret only admits a client: an idle worker listens keyed with it, and a client
proves it holds it in the transport's handshake. The client then hands the worker its
own session secret *sealed* (:func:`seal_secret`): XORed with a pad that only holders of
the worker secret can derive, under a fresh nonce, and tagged with an HMAC of the
worker secret (:func:`unseal_secret` checks the tag before it unseals). The worker
serves the client keyed with that session secret, so the client's procs everywhere
share one secret while the worker secret never leaves the secret file.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from typing import Any, NamedTuple

from ..._errors import ArgumentError, ArgumentTypeError, NotSupportedError
from ..._plugins import get_registry, split_address
from ..._plugins._specs import BackendKind
from ..._transport._route import host_of
from ..plumbing._secret import SecretError

__all__ = ["MIN_SECRET_CHARS", "SealedSecret", "check_address", "check_tls", "fresh_transport", "is_loopback",
           "new_secret_file", "read_secret_file", "seal_secret", "unseal_secret"]

#: The fewest characters a secret file must hold.
MIN_SECRET_CHARS = 32
_MAX_SECRET = 4096
_WILDCARDS = frozenset({"*", "0.0.0.0", "::", ""})
_LOOPBACK = ("127.", "localhost", "::1")
_SEAL_LABEL = b"tetrarch attach seal v1"
_TAG_LABEL = b"tetrarch attach tag v1"
_NONCE_BYTES = 32
_DIGEST = hashlib.sha256().digest_size


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


def fresh_transport(name: str) -> Any:
    """A new instance of the transport ``name``, apart from the process's shared one (which is
    keyed with the process's secret): for a router keyed with a worker secret. Close it after use.

    Raises:
        BackendNotFound, BackendUnavailable: as ``Registry.create``.
    """
    return get_registry().create(BackendKind.TRANSPORT, name, fresh=True)


def is_loopback(address: str) -> bool:
    """Whether ``address`` is on this machine only (loopback or a unix socket)."""
    host = host_of(address)
    return host is None or host.startswith(_LOOPBACK)


class SealedSecret(NamedTuple):
    """A session secret sealed under a worker secret (:func:`seal_secret`); safe to send."""

    #: Fresh random bytes (32): the pad and the tag are new for every seal.
    nonce: bytes
    #: The session secret XOR the pad ``HMAC-SHA256(worker, "tetrarch attach seal v1" | nonce [| counter])``.
    sealed: bytes
    #: ``HMAC-SHA256(worker, "tetrarch attach tag v1" | nonce | sealed)``: only a holder of the worker secret makes it.
    tag: bytes


def _pad(worker_secret: bytes, nonce: bytes, n: int) -> bytes:
    """``n`` bytes of pad: HMAC blocks in counter mode (the first block carries no counter)."""
    blocks = [hmac.new(worker_secret, _SEAL_LABEL + nonce, hashlib.sha256).digest()]
    counter = 1
    while len(blocks) * _DIGEST < n:
        blocks.append(hmac.new(worker_secret, _SEAL_LABEL + nonce + counter.to_bytes(4, "big"),
                               hashlib.sha256).digest())
        counter += 1
    return b"".join(blocks)[:n]


def _tag(worker_secret: bytes, nonce: bytes, sealed: bytes) -> bytes:
    return hmac.new(worker_secret, _TAG_LABEL + nonce + sealed, hashlib.sha256).digest()


def seal_secret(worker_secret: bytes, secret: bytes) -> SealedSecret:
    """``secret`` (the client's session secret) sealed under ``worker_secret`` with a fresh nonce.

    Raises:
        SecretError: ``secret`` is empty or longer than 4096 bytes.
    """
    if not secret or len(secret) > _MAX_SECRET:
        raise SecretError(f"a session secret holds 1 to {_MAX_SECRET} bytes, this one {len(secret)}")
    nonce = secrets.token_bytes(_NONCE_BYTES)
    sealed = bytes(a ^ b for a, b in zip(secret, _pad(worker_secret, nonce, len(secret)), strict=True))
    return SealedSecret(nonce, sealed, _tag(worker_secret, nonce, sealed))


def unseal_secret(worker_secret: bytes, sealed: SealedSecret) -> bytes:
    """The session secret that ``sealed`` carries, once its tag proved it was sealed under ``worker_secret``.

    Raises:
        SecretError: a field has the wrong type or size, or the tag does not match (the
            request was not sealed with this worker's secret, or it was altered).
    """
    nonce, body, tag = sealed
    if not all(isinstance(f, bytes) for f in (nonce, body, tag)) or len(nonce) != _NONCE_BYTES \
            or len(tag) != _DIGEST or not 0 < len(body) <= _MAX_SECRET:
        raise SecretError("the sealed session secret is malformed (a nonce of 32 bytes, 1 to 4096 sealed bytes and "
                          "a 32-byte tag are expected)")
    if not hmac.compare_digest(tag, _tag(worker_secret, nonce, body)):
        raise SecretError("the sealed session secret failed its integrity check: it was not sealed with this "
                          "worker's secret, or it was altered on the way")
    return bytes(a ^ b for a, b in zip(body, _pad(worker_secret, nonce, len(body)), strict=True))
