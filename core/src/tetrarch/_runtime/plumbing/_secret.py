"""Handing the allocation's secret to a child process outside its environment.

The kernel keeps a copy of a process's initial environment (``/proc/PID/environ``)
that removing a variable from ``os.environ`` does not erase, and that user code in the
process (or any process of the same user) can read. So the secret never travels in
the environment; the child is told only *where* to read it, once, at start:

* an inherited pipe (local launches, :func:`secret_pipe`): the parent writes the
  secret and closes its end before the child starts; the child's variable
  ``TETRARCH_SECRET_FD`` names the read end, which the child closes after reading;
* a file only the user can read (launchers that start the child on another machine,
  e.g. through ``srun``, where no fd can travel; :func:`write_secret_file`): the
  child's variable ``TETRARCH_SECRET_FILE`` names it, and the child deletes it
  after reading.

Host agents and procs read it through :func:`take_secret` (the fd first, then the file).
"""

from __future__ import annotations

import os
import secrets

from ..._config import ENV_SECRET_FD, ENV_SECRET_FILE
from ..._errors import TetrarchError

__all__ = ["SecretError", "secret_pipe", "take_secret", "write_secret_file"]

#: The secret travels as hex text ending in a newline (a reader stops at it).
_END = b"\n"
_MAX = 4096  # far more than a secret's hex; a reader never reads without bound


class SecretError(TetrarchError, RuntimeError):
    """A host agent or proc could not read the allocation's secret at start."""


def _encode(secret: bytes) -> bytes:
    if not secret:
        raise SecretError("the allocation's secret is empty")
    return secret.hex().encode("ascii") + _END


def _decode(data: bytes, where: str) -> bytes:
    text = data.split(_END, 1)[0].strip()
    try:
        secret = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        secret = b""
    if not secret:
        raise SecretError(f"{where} does not hold the allocation's secret (expected hex text)")
    return secret


def secret_pipe(secret: bytes) -> int:
    """A pipe holding ``secret``: returns its read end, the write end already closed.

    The caller passes the read end to one child (``subprocess.Popen(pass_fds=...)``),
    sets ``TETRARCH_SECRET_FD`` to its number in the child's environment, and closes its
    own copy once the child started. The fd is not inheritable otherwise.
    """
    data = _encode(secret)
    read_end, write_end = os.pipe()
    try:
        if os.write(write_end, data) != len(data):  # a pipe's buffer takes it whole
            raise SecretError("the secret did not fit into the pipe")
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return read_end


def write_secret_file(secret: bytes, directory: str | os.PathLike[str]) -> str:
    """Write ``secret`` to a new file in ``directory`` only the user can read (0600); returns its path.

    For one child: set ``TETRARCH_SECRET_FILE`` to the path in its environment; it reads
    the file once and deletes it. The name is random and the file is created
    exclusively, so an existing file (or a planted symbolic link) is never written to.

    Raises:
        OSError: ``directory`` does not exist or is not writable.
    """
    data = _encode(secret)
    path = os.path.join(os.fspath(directory), f"tetrarch-secret-{secrets.token_hex(8)}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        os.unlink(path)
        raise
    return path


def _read_fd(text: str) -> bytes:
    where = f"{ENV_SECRET_FD.name}={text}"
    try:
        fd = int(text)
    except ValueError:
        raise SecretError(f"{where} is not a file descriptor number") from None
    data = b""
    try:
        while _END not in data and len(data) < _MAX:
            chunk = os.read(fd, _MAX - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise SecretError(f"cannot read the allocation's secret from {where}: {exc}") from None
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    return _decode(data, where)


def _read_file(path: str) -> bytes:
    where = f"{ENV_SECRET_FILE.name}={path}"
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX)
    except OSError as exc:
        raise SecretError(f"cannot read the allocation's secret from {where}: {exc}") from None
    finally:
        _unlink(path)
    return _decode(data, where)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def take_secret() -> bytes:
    """Read the allocation's secret that this process was started with; only once.

    From the inherited fd named by ``TETRARCH_SECRET_FD`` (then closed), else from the
    file named by ``TETRARCH_SECRET_FILE`` (then deleted; also deleted when the fd was
    used). Both variables are removed from ``os.environ``, so processes this one starts
    do not inherit them.

    Raises:
        SecretError: neither variable is set, or what it names holds no secret.
    """
    fd_text = os.environ.pop(ENV_SECRET_FD.name, "").strip()
    path = os.environ.pop(ENV_SECRET_FILE.name, "").strip()
    if fd_text:
        if path:  # not needed: no copy of the secret stays behind
            _unlink(path)
        return _read_fd(fd_text)
    if path:
        return _read_file(path)
    raise SecretError(
        f"no allocation secret: neither {ENV_SECRET_FD.name} (an inherited pipe) nor {ENV_SECRET_FILE.name} "
        "(a file readable only by the user) is set. Host agents and procs are started by tetrarch's allocators; "
        "an allocator passes the secret with spawn_watched(..., secret=AgentCommand.secret) or "
        "AgentCommand.secret_file(directory)"
    )
