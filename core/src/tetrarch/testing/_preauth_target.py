"""The listening process of the pre-authentication kit, and the test's handle on it.

:class:`~tetrarch.testing._preauth.PreAuthConformance` measures what strangers cost the
*listening process* (its resident memory, its descriptors, whether it survives), so the
listener runs in a child of its own: ``python -m tetrarch.testing._preauth_target
FACTORY ADDRESS --timeout T --max-pending P [--nofile N]`` builds the transport from its
factory (``"pkg.mod:Class"``, called without arguments), starts a kernel
:class:`~tetrarch._runtime.router._router.Router` on it with the secret read from the first line
of stdin (hex; never the command line), after appending the test process's ``sys.path``
entries it lacks (the second line, JSON: a plugin's tests may import it from a folder
their conftest added), ``auth_timeout=T`` and ``max_unauthenticated=P``,
and prints ``ready ADDRESS``. With ``--nofile N`` it first sets its open-file limit to
N:N, before the transport is imported. Its log goes to stderr, one record per line
(``LEVEL logger: message``). Then it answers one command per stdin line:

* ``served``: ``served COUNT``, the messages its ``preauth`` service received so far
  (from authenticated peers only: the kernel delivers nothing else);
* ``quit`` (or the end of stdin, when the test process is gone): closes the router and
  the transport and exits 0.

:class:`Target` starts one and stops it (killing it if it does not quit in time);
:class:`Peer` is an authenticated peer whose messages the target counts. Both are public
as ``tetrarch.testing.PreAuthTarget`` and ``tetrarch.testing.PreAuthPeer``: a plugin's own
tests of its pre-authentication stage use them instead of the kernel's private router.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import resource
import select
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any

__all__ = ["SERVICE", "Peer", "Target", "main"]

#: The service of the target whose messages it counts (``served``).
SERVICE = "preauth"


class Target:
    """A running target process (see the module docstring). Use as a context manager.

    Raises (from the constructor):
        AssertionError: the child did not print ``ready`` within ``start_timeout`` s (the
            message carries its exit status and the end of its stderr).
    """

    def __init__(self, factory: str, address: str, secret: bytes, *, timeout: float, max_pending: int,
                 nofile: int | None = None, start_timeout: float = 30.0) -> None:
        argv = [sys.executable, "-m", __name__, factory, address, "--timeout", repr(timeout),
                "--max-pending", str(max_pending)]
        if nofile is not None:
            argv += ["--nofile", str(nofile)]
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        self._buf = b""
        assert self.proc.stdin is not None
        self.proc.stdin.write(secret.hex().encode() + b"\n" + json.dumps(sys.path).encode() + b"\n")
        self.proc.stdin.flush()
        try:
            line = self._line(start_timeout)
        except BaseException:
            self.close()
            raise
        if not line.startswith("ready "):
            self.close()
            raise AssertionError(f"the pre-auth target ({factory} on {address}) did not start: {line!r}; "
                                 f"{self.describe()}")
        #: The address the target's router listens on.
        self.address = line.split(" ", 1)[1]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss(self) -> int:
        """The target's resident memory in bytes (``/proc/PID/statm``)."""
        with open(f"/proc/{self.pid}/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()

    def busy(self, window: float) -> float:
        """The share of one CPU the target used over the next ``window`` seconds (measured, not waited on)."""

        def cpu() -> float:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

        start, started = cpu(), time.monotonic()
        time.sleep(window)
        return (cpu() - start) / (time.monotonic() - started)

    def stderr(self) -> str:
        """Everything the target wrote to stderr so far."""
        fd = self._stderr.fileno()  # shared with the child: pread leaves its write offset be
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def describe(self) -> str:
        """Its state and the end of its stderr, for an assertion message."""
        code = self.proc.poll()
        state = "running" if code is None else (f"killed by signal {-code}" if code < 0 else f"exit status {code}")
        tail = "\n".join(self.stderr().splitlines()[-15:])
        return f"target pid {self.pid}: {state}; stderr ends:\n{tail}"

    def served(self, timeout: float = 10.0) -> int:
        """The count of messages its ``preauth`` service received.

        Raises:
            AssertionError: the target died or did not answer within ``timeout`` s.
        """
        self._send("served")
        line = self._line(timeout)
        if not line.startswith("served "):
            raise AssertionError(f"unexpected answer {line!r} from the pre-auth target; {self.describe()}")
        return int(line.split()[1])

    def wait_served(self, count: int, timeout: float = 10.0, who: str = "a peer's message") -> int:
        """Wait until the target has served at least ``count`` messages; return the count.

        Raises:
            AssertionError: it has not within ``timeout`` s (naming ``who``), or it died.
        """
        deadline = time.monotonic() + timeout
        while True:
            served = self.served(max(0.1, deadline - time.monotonic()))
            if served >= count:
                return served
            if time.monotonic() >= deadline:
                raise AssertionError(f"the listener served {served} of {count} messages within {timeout:g} s "
                                     f"(waiting for {who}); {self.describe()}")
            time.sleep(0.01)

    def close(self, timeout: float = 10.0) -> None:
        """Ask it to quit; kill it if it has not within ``timeout`` s. Idempotent."""
        if self.alive():
            with contextlib.suppress(OSError, ValueError):
                self._send("quit")
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._stderr.close()

    def __enter__(self) -> Target:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- pipes -------------------------------------------------------------------
    def _send(self, command: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(command.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise AssertionError(f"the pre-auth target is gone ({exc}); {self.describe()}") from None

    def _line(self, timeout: float) -> str:
        """The next line of its stdout, waiting at most ``timeout`` s."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"the pre-auth target did not answer within {timeout:g} s; {self.describe()}")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    self.proc.wait(timeout)
                    raise AssertionError(f"the pre-auth target closed its stdout; {self.describe()}")
                self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode()


def _build(factory: str) -> Any:
    """``factory`` (``"pkg.mod:Class"``) called without arguments."""
    import importlib

    module, _, qualname = factory.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj()


class Peer:
    """An authenticated peer of a :class:`Target`: a kernel router, holding the target's secret,
    on a fresh transport built from ``factory`` (``"pkg.mod:Class"``, called without arguments).
    Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, factory: str, secret: bytes, *, name: str = "preauth-peer") -> None:
        from tetrarch._runtime.router._router import Router

        self.transport = _build(factory)
        try:
            self._router = Router(self.transport, secret, name=name)
        except BaseException:
            self.transport.close()
            raise

    def send(self, address: str, text: str = "") -> None:
        """Send the target at ``address`` one message (for its ``preauth`` service, which counts it).

        Raises:
            ConnectionError: the peer cannot reach ``address``, or its handshake failed
                (the kernel's ``PeerUnreachable``).
        """
        from tetrarch._runtime.values._wire import sys_header

        self._router.send(address, [sys_header(SERVICE, text)])

    def close(self) -> None:
        """Close its router, then its transport. Idempotent."""
        self._router.close()
        self.transport.close()

    def __enter__(self) -> Peer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str] | None = None) -> int:
    """Run the target (see the module docstring)."""
    parser = argparse.ArgumentParser(prog=f"python -m {__name__}")
    parser.add_argument("factory", help='the transport class, "pkg.mod:Class" (called without arguments)')
    parser.add_argument("address", help="where its router listens")
    parser.add_argument("--timeout", type=float, required=True, help="the router's auth_timeout, seconds")
    parser.add_argument("--max-pending", type=int, required=True, help="the router's max_unauthenticated")
    parser.add_argument("--nofile", type=int, default=None, help="set RLIMIT_NOFILE to N:N first")
    args = parser.parse_args(argv)
    if args.nofile is not None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, args.nofile))
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    secret = bytes.fromhex(sys.stdin.readline().strip())
    sys.path.extend(p for p in json.loads(sys.stdin.readline()) if p not in sys.path)  # the test's own, too

    from tetrarch._runtime.router._router import Router

    transport = _build(args.factory)
    served = [0]
    lock = threading.Lock()

    def count(_hdr: object, _payload: object, _conn: object) -> None:
        with lock:
            served[0] += 1

    router = Router(transport, secret, name="preauth-target", listen_address=args.address,
                    auth_timeout=args.timeout, max_unauthenticated=args.max_pending)
    try:
        router.add_service(SERVICE, count)
        print(f"ready {router.address}", flush=True)
        for line in sys.stdin:
            command = line.strip()
            if command == "served":
                with lock:
                    print(f"served {served[0]}", flush=True)
            elif command == "quit":
                break
            else:
                print(f"unknown command {command!r}", flush=True)
    finally:
        router.close()
        transport.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
