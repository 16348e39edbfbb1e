"""The SPMD job server: a detached tetrarch client that owns a job's procs and runs on request.

``serve()`` (``_job``) starts ``python -m tetrarch._spmd._server --ready-fd N`` with the
job's spec as JSON on stdin. The process forks once more and the launcher exits, so the
server is in a session of its own, no child of the caller, and outlives it. The server
makes the job's hosts, spawns the ranks (``_reserve.Reservation``), listens on a Unix
domain socket (mode 0600, in a 0700 folder), writes the state file (0600: socket path,
token, pid) and reports ``{"ok": true, "pid": ...}`` (or the error) on the ready fd.

Each connection (at most :data:`MAX_CONNECTIONS` at a time) authenticates with the token
(``_control``) and makes one request: a run (one at a time; the caller receives the
ranks' lines and the outcome; if it goes away, the run is cancelled), a status, or a kill.
After a run that killed its procs, fresh ones are spawned at once; if that fails the procs
are lost for good and the server ends, removing its state file, as on a kill or SIGTERM.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import secrets
import select
import signal
import socket
import struct
import sys
import threading
import traceback
from typing import Any

from . import _control
from ._proc_side import Executable
from ._relay import SEND_TIMEOUT, Relay, RelayStream
from ._reserve import Reservation, RunOutcome, make_job

__all__ = ["MAX_CONNECTIONS", "main"]

MAX_CONNECTIONS = 8  #: connections served at once; more are closed at once
HELLO_TIMEOUT = 10.0  #: seconds a connection may take to authenticate and make its request
MARK_TIMEOUT = 10.0  #: seconds to wait for the ranks' last lines after a run
MAX_SPEC = 1 << 20  #: bytes of the spec read from stdin, at most


def _write_private(path: str, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` atomically, mode 0600."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


class Server:
    """One job: its reservation, control socket and state file (see the module docstring)."""

    def __init__(self, spec: dict[str, Any], relay: Relay) -> None:
        self.spec = spec
        self.relay = relay
        self.token = secrets.token_hex(32)
        self.state_path: str = spec["state_path"]
        self.socket_path: str = spec["socket_path"]
        self.job: Any = None
        self.reservation: Reservation | None = None
        self.runs = 0
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._cond = threading.Condition()
        self._running = False  # a caller's run is in progress
        self._current: socket.socket | None = None
        self._respawned = threading.Event()
        self._respawned.set()
        self._ending = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._listener: socket.socket | None = None

    # -- start and end --------------------------------------------------------------------------
    def start(self) -> None:
        """Make the hosts and ranks, listen, write the state file.

        Raises:
            Exception: whatever failed (the caller reports it on the ready fd and ends).
        """
        from .._runtime.services._supervision import set_unhandled_fault_hook

        set_unhandled_fault_hook(self._on_fault)
        self.job = make_job(self.spec["scheduler"], self.spec["nnodes"], self.spec.get("scheduler_cfg") or {})
        hosts = self.job.state().workers
        self.reservation = Reservation(hosts, self.spec["nproc_per_node"])
        self.reservation.start()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        listener.bind(self.socket_path)
        os.chmod(self.socket_path, 0o600)  # before listen(): nobody can connect until then
        listener.listen(MAX_CONNECTIONS)
        self._listener = listener
        _write_private(self.state_path, {
            "version": _control.VERSION, "pid": os.getpid(), "socket": self.socket_path, "token": self.token,
            "cwd": os.getcwd(), "command": self.spec["command"], "scheduler": self.spec["scheduler"],
            "nnodes": self.spec["nnodes"], "nproc_per_node": self.spec["nproc_per_node"],
            "log": self.spec.get("log_path", ""),
        })

    def _on_fault(self, failure: Any) -> None:
        """A proc failed: if it is one of the current procs, spawn fresh ones before the next run.

        (Failures of a run are handled where the run ends; those of procs already replaced are old news.)
        """
        if self.reservation is not None and self.reservation.lost_a_proc():
            self.reservation.mark_broken()
        if not getattr(failure, "received", False):
            _log(f"a proc failed: {failure}")

    def end(self) -> None:
        """Wake the accept loop so that :meth:`serve_forever` returns (any thread, signal handlers too)."""
        self._ending.set()
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def shutdown(self) -> None:
        """Stop the procs and host agents; remove the socket and the state file (if still ours)."""
        self._ending.set()
        with self._cond:
            current = self._current
        if current is not None and self.reservation is not None:
            self.reservation.cancel()
        self._respawned.wait(timeout=60.0)
        if self.reservation is not None:
            try:
                self.reservation.stop(hard=current is not None)
            except Exception:  # noqa: BLE001 - keep tearing down
                traceback.print_exc()
        if self.job is not None:
            try:
                self.job.kill()
            except Exception:  # noqa: BLE001
                traceback.print_exc()
        self._remove_files()

    def _remove_files(self) -> None:
        try:
            with open(self.state_path) as f:
                ours = json.load(f).get("token") == self.token
        except (OSError, ValueError):
            ours = False
        for path in ([self.state_path] if ours else []) + [self.socket_path]:
            try:
                os.unlink(path)
            except OSError:
                pass
        if self.spec.get("socket_dir"):
            try:
                os.rmdir(self.spec["socket_dir"])
            except OSError:
                pass

    # -- connections ----------------------------------------------------------------------------
    def serve_forever(self) -> None:
        """Accept connections until :meth:`end`; each is served on a thread of its own."""
        assert self._listener is not None
        while not self._ending.is_set():
            ready, _, _ = select.select([self._listener.fileno(), self._wake_r], [], [])
            if self._listener.fileno() not in ready:
                continue
            try:
                conn, _ = self._listener.accept()
            except OSError:
                continue
            if not self._slots.acquire(blocking=False):
                conn.close()  # over the limit: refused without reading a byte
                continue
            threading.Thread(target=self._serve_conn, args=(conn,), name="spmd-conn", daemon=True).start()
        self._listener.close()

    def _serve_conn(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(HELLO_TIMEOUT)
            if not self._authenticate(conn):
                return
            request = _control.recv(conn, _control.MAX_REQUEST, (_control.RunRequest, _control.StatusRequest,
                                                                 _control.KillRequest))
            if isinstance(request, _control.RunRequest):
                self._run(conn, request)
            elif isinstance(request, _control.StatusRequest):
                _control.send(conn, _control.Reply(True, data=self.status()))
            else:
                self._kill(conn)
        except (OSError, _control.ProtocolError):
            pass  # a caller that went away or spoke garbage: nothing to answer
        finally:
            conn.close()
            self._slots.release()

    def _authenticate(self, conn: socket.socket) -> bool:
        """Read the hello (bounded) and check the peer's user and token; answer it."""
        uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[1]
        hello = _control.recv(conn, _control.MAX_HELLO, _control.Hello)
        token = hello.token if isinstance(hello.token, str) else ""
        good = hmac.compare_digest(token.encode(), self.token.encode()) and uid == os.getuid()
        if good and hello.version != _control.VERSION:
            _control.send(conn, _control.Reply(False, f"protocol version {hello.version!r} is not "
                                                      f"{_control.VERSION}: use the same tetrarch as the server"))
            return False
        _control.send(conn, _control.Reply(good, "" if good else "authentication failed: wrong token for this job"))
        return good

    def status(self) -> dict[str, Any]:
        res = self.reservation
        hosts = res.hosts._hosts if res is not None else None
        return {"pid": os.getpid(), "runs": self.runs, "world_size": res.world_size if res else 0,
                "proc_pids": res.pids() if res else [], "host_pids": [h.pid for h in hosts or []],
                "generation": res.generation if res else 0}

    def _kill(self, conn: socket.socket) -> None:
        self.shutdown()
        try:
            _control.send(conn, _control.Reply(True, data={"pid": os.getpid()}))
        finally:
            self.end()

    # -- runs -------------------------------------------------------------------------------------
    def _run(self, conn: socket.socket, request: _control.RunRequest) -> None:
        with self._cond:
            while self._running:  # runs of one job follow each other
                self._cond.wait()
            if _hung_up(conn):  # its caller gave up while it waited
                return
            self._running = True
        outcome: RunOutcome | None = None
        try:
            outcome = self._run_once(conn, request)
            _control.send(conn, _control.RunDone(outcome.as_dict()))
        finally:  # (also when the caller is gone and the outcome could not be sent)
            with self._cond:
                if outcome is not None and outcome.replaced and not self._ending.is_set():
                    self._respawned.clear()  # before the next run can start: it waits for the fresh procs
                    threading.Thread(target=self._respawn, name="spmd-respawn", daemon=True).start()
                self._running = False
                self._cond.notify_all()

    def _program(self, request: _control.RunRequest) -> Any:
        program = request.program if request.program is not None else self.spec["program"]
        no_python = request.no_python if request.program is not None else self.spec["no_python"]
        if not isinstance(program, list) or not program or not all(isinstance(a, str) for a in program):
            raise _control.ProtocolError("a run request's program must be a non-empty list of strings")
        return Executable(tuple(program)) if no_python else program

    def _run_once(self, conn: socket.socket, request: _control.RunRequest) -> RunOutcome:
        program = self._program(request)
        conn.settimeout(None)
        self._respawned.wait()
        res = self.reservation
        assert res is not None
        if res.needs_restart and not self._respawn():
            return RunOutcome(ok=False, status=1, kind="error", message="the job's procs are lost and could not be "
                              "replaced; the job server ended (see its log); serve() the job again")
        token = secrets.token_hex(8)
        self.relay.expect_marks(token)
        conn.settimeout(SEND_TIMEOUT)
        self.relay.subscribe(conn)
        with self._cond:
            self._current = conn
        watch = _HangupWatch(conn, res)
        try:
            outcome = res.run(program, on_start=watch.start)
            if not outcome.replaced:  # the ranks live: wait for their last lines (a kill drained them)
                try:
                    res.mark(token)
                    self.relay.wait_marks(2 * res.world_size, MARK_TIMEOUT)
                except Exception:  # noqa: BLE001 - a rank died after its run (or the run was cancelled)
                    res.mark_broken()
        finally:
            watch.stop()
            self.relay.subscribe(None)
            with self._cond:
                self._current = None
        self.runs += 1
        return outcome

    def _respawn(self) -> bool:
        """Fresh procs for the next run; on failure the server ends. Whether it worked."""
        try:
            assert self.reservation is not None
            self.reservation.restart()
            return True
        except Exception:  # noqa: BLE001 - the procs are lost for good: end the job
            _log("the procs are lost and could not be replaced; ending:\n" + traceback.format_exc())
            self.end()
            return False
        finally:
            self._respawned.set()


def _log(text: str) -> None:
    """A line of the server's own to its log (fd 2), never to a caller."""
    try:
        os.write(2, f"tetrarch spmd server (pid {os.getpid()}): {text}\n".encode("utf-8", "replace"))
    except OSError:
        pass


def _hung_up(conn: socket.socket) -> bool:
    """Whether the peer of ``conn`` closed it (it sends nothing after its request)."""
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
        return bool(readable) and not conn.recv(1, socket.MSG_PEEK)
    except (OSError, ValueError):
        return True


class _HangupWatch:
    """Cancels the run when its caller closes the connection (it sends nothing after its request)."""

    def __init__(self, conn: socket.socket, res: Reservation) -> None:
        self._conn = conn
        self._res = res
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._watch, name="spmd-hangup", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _watch(self) -> None:
        try:
            readable, _, _ = select.select([self._conn.fileno(), self._wake_r], [], [])
            if self._wake_r not in readable and not self._conn.recv(1, socket.MSG_PEEK):
                self._res.cancel()
        except (OSError, ValueError):
            pass

    def stop(self) -> None:
        """Stop watching (before the connection closes)."""
        os.write(self._wake_w, b"x")
        if self._thread.ident is not None:
            self._thread.join()
        os.close(self._wake_r)
        os.close(self._wake_w)


def _detach() -> None:
    """Fork; the parent (the launcher its caller waits for) exits, the child gets a session of its own."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()


def main(argv: list[str] | None = None) -> int:
    """The server's entry point (``python -m tetrarch._spmd._server --ready-fd N``, spec on stdin)."""
    parser = argparse.ArgumentParser(prog="python -m tetrarch._spmd._server")
    parser.add_argument("--ready-fd", type=int, required=True)
    args = parser.parse_args(argv)
    spec = json.loads(sys.stdin.buffer.read(MAX_SPEC))
    _detach()
    os.set_inheritable(args.ready_fd, False)  # the host agents and procs must not hold it open
    os.write(args.ready_fd, (json.dumps({"pid": os.getpid()}) + "\n").encode())
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.chdir(spec["cwd"])
    os.environ.update(spec.get("env") or {})
    sys.path[:0] = [p for p in spec.get("sys_path", []) if p not in sys.path]
    relay = Relay()
    sys.stdout, sys.stderr = RelayStream(relay, 1), RelayStream(relay, 2)
    server = Server(spec, relay)
    with os.fdopen(args.ready_fd, "w") as ready:
        try:
            server.start()
        except BaseException as exc:  # noqa: BLE001 - reported to serve(), which raises it
            detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            print(detail, file=sys.stderr)
            ready.write(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": detail}) + "\n")
            ready.flush()
            server.shutdown()
            return 1
        ready.write(json.dumps({"ok": True, "pid": os.getpid()}) + "\n")
    signal.signal(signal.SIGTERM, lambda *_: server.end())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        server.serve_forever()
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
