"""Errors users see. Each message says what went wrong and, where there is one, the fix."""

from __future__ import annotations

__all__ = ["ActorError", "ProcessStartError", "RemoteException", "SupervisionError", "TetrarchError"]


class TetrarchError(Exception):
    """Base of tetrarch's own errors."""


class RemoteException(Exception):
    """Stands in for a remote exception that could not be pickled back to the caller."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message

    def __reduce__(self):  # keep it picklable with both fields
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
        super().__init__(
            f"Actor call {actor}.{method} failed.\n"
            f"Traceback of where the remote call failed (most recent call last):\n{body}"
        )

    def __reduce__(self):
        return (ActorError, (self.exception, self.remote_traceback, self.actor, self.method))


class SupervisionError(RuntimeError):
    """The target of a call died (its process exited, or the actor failed) or was stopped."""

    def __init__(self, message: str, endpoint: str = "") -> None:
        super().__init__(message)
        self.endpoint = endpoint

    def __reduce__(self):
        return (SupervisionError, (self.args[0], self.endpoint))


class ProcessStartError(RuntimeError):
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

    def __reduce__(self):
        return (ProcessStartError, (self.what, self.returncode, self.stderr_tail))


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"
