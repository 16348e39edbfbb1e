"""Every error tetrarch raises, in one tree. Each message says what went wrong and the fix.

All derive from :class:`TetrarchError` and keep the builtin parent a caller would
expect (``SupervisionError`` is a ``RuntimeError``, ``TransportError`` an ``OSError``, a
bad argument a ``ValueError`` or ``TypeError``), so ``except TetrarchError`` catches
everything of ours and older ``except RuntimeError`` code keeps working.
``docs/errors.md`` lists the tree and when each is raised.
"""

from __future__ import annotations

__all__ = [
    "ActorError", "AllocatorError", "ArgumentError", "ArgumentTypeError", "ConfigError", "EndpointNotFoundError",
    "FutureTimeoutError", "MeshIndexError", "MeshKeyError", "MeshNotFoundError", "MeshStoppedError", "NotOwnerError",
    "NotSupportedError", "ProcessStartError", "RDMAError", "RDMATcpFallbackWarning", "RemoteException",
    "SupervisionError", "TelemetryQueryError", "TetrarchError",
    "UsageError",
]


class TetrarchError(Exception):
    """Base of every error tetrarch raises."""


class ArgumentError(TetrarchError, ValueError):
    """An argument has a wrong value (e.g. ``call_one`` on a mesh of 4, a bad ``per_host``)."""


class ArgumentTypeError(TetrarchError, TypeError):
    """An argument has a wrong type, or cannot be pickled (the message names it)."""


class ConfigError(TetrarchError, ValueError):
    """A setting (``TETRARCH_*`` variable or ``configure()`` value) is invalid or unknown."""


class EndpointNotFoundError(TetrarchError, AttributeError):
    """The actor class has no ``@endpoint`` of that name (the message lists its endpoints)."""


class MeshKeyError(TetrarchError, KeyError):
    """Coordinates name a dimension the mesh lacks, or miss one it has."""


class MeshNotFoundError(TetrarchError, KeyError, AttributeError):
    """A job's state has no host mesh of that name (``state.name`` or ``state["name"]``; the message lists them)."""

    def __str__(self) -> str:  # a KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class MeshIndexError(TetrarchError, IndexError):
    """A rank or coordinate is out of range for the mesh."""


class FutureTimeoutError(TetrarchError, TimeoutError):
    """``Future.get(timeout)`` ran out of time; the future stays usable."""


class NotSupportedError(TetrarchError, NotImplementedError):
    """An option tetrarch accepts for Monarch compatibility but does not implement yet."""


class UsageError(TetrarchError, RuntimeError):
    """A call made where it cannot work (``abort()`` outside an actor, a port with no runtime)."""


class TelemetryQueryError(TetrarchError, ValueError):
    """A telemetry SQL query that cannot run: its message is the engine's (``job.telemetry.query``)."""


class NotOwnerError(TetrarchError, ValueError, RuntimeError):
    """Only the owner of a mesh (the object ``spawn``/``spawn_procs`` returned) may stop it.

    A ``ValueError`` and a ``RuntimeError``: both were raised for this before.
    """


class MeshStoppedError(TetrarchError, RuntimeError):
    """The proc or host mesh was stopped (or shut down); spawn a new one."""


class AllocatorError(TetrarchError, RuntimeError):
    """An allocator could not start the host agents it was asked for."""


class RemoteException(TetrarchError):
    """Stands in for a remote exception that could not be pickled back to the caller."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message

    def __reduce__(self) -> tuple:  # keep it picklable with both fields
        return (RemoteException, (self.type_name, self.message))


class ActorError(TetrarchError):
    """An endpoint raised; the actor survived.

    ``exception`` is the original exception (or a :class:`RemoteException` when it
    could not be pickled); the message carries the remote traceback.
    """

    def __init__(self, exception: BaseException, remote_traceback: str, actor: str, method: str) -> None:
        self.exception = exception
        self.remote_traceback = remote_traceback
        self.actor = actor
        self.method = method
        body = remote_traceback
        if body.startswith("Traceback (most recent call last):\n"):
            body = body[len("Traceback (most recent call last):\n"):]
        if not body.strip():  # no remote frames (e.g. the result could not be pickled): say what happened
            super().__init__(f"Actor call {actor}.{method} failed: {exception}")
            return
        super().__init__(
            f"Actor call {actor}.{method} failed.\n"
            f"Traceback of where the remote call failed (most recent call last):\n{body}"
        )

    def __reduce__(self) -> tuple:
        return (ActorError, (self.exception, self.remote_traceback, self.actor, self.method))


class SupervisionError(TetrarchError, RuntimeError):
    """The target of a call died (its process exited, or the actor failed) or was stopped."""

    def __init__(self, message: str, endpoint: str = "") -> None:
        super().__init__(message)
        self.endpoint = endpoint

    def __reduce__(self) -> tuple:
        return (SupervisionError, (self.args[0], self.endpoint))


class RDMAError(TetrarchError, RuntimeError):
    """An RDMA transfer was refused or failed: the buffer was dropped (or never existed at its
    owner), the range lies outside it, or the backend failed (the message says which)."""


class RDMATcpFallbackWarning(RuntimeWarning):
    """RDMA runs over the TCP fallback because no hardware backend is usable (shown once per process).

    The message names the skipped backends and why; ``TETRARCH_RDMA_FALLBACK=0`` makes it an error.
    """


class ProcessStartError(TetrarchError, RuntimeError):
    """A host agent or proc exited before it was ready.

    ``returncode`` is its exit status (negative: killed by that signal) and
    ``stderr_tail`` the last lines it wrote to stderr.
    """

    def __init__(self, what: str, returncode: int | None, stderr_tail: str, detail: str = "") -> None:
        self.what = what
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        how = "did not start" if returncode is None else _describe_exit(returncode)
        msg = f"{what} failed to start ({how})"
        if detail:
            msg += f": {detail}"
        if stderr_tail.strip():
            msg += "\n--- last lines of its stderr ---\n" + stderr_tail.rstrip()
        super().__init__(msg)

    def __reduce__(self) -> tuple:
        return (ProcessStartError, (self.what, self.returncode, self.stderr_tail))


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"
