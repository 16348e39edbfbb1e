"""Workers started by anything: ``run_worker_loop_forever`` (Monarch's name) and the secret file they share.

A worker is a host agent that nobody allocated: a user, systemd, ssh or a batch
script starts it on a host with an address to listen on and a *secret file*. It serves
one client at a time, forever: a client that proves it holds the same secret (the
transport's mutual HMAC handshake, before anything is unpickled) attaches
(``attach_to_workers``, :mod:`._attach`), spawns procs, and when it goes away
(its connection drops, its heartbeats stop answering, or it shuts the mesh down) the
worker kills that client's procs and waits for the next one.

The secret file (:mod:`._workerauth`) holds the secret the workers and the client share.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from typing import Any

from .._config import ENV_SPANS_HOSTS, FROZEN_TIMEOUT, HEARTBEAT_INTERVAL, TRANSPORT
from .._errors import UsageError
from .._log import get_logger
from .._plugins import get_registry
from .._plugins._specs import BackendKind
from . import _serial, _wire
from ._host_agent import HostAgent
from ._launch import report_exit, start_heartbeat
from ._output import set_process_title
from ._root import Root, install_root, root_if_any
from ._workerauth import check_address, check_tls, is_loopback, read_secret_file

__all__ = ["Worker", "run_worker_loop_forever"]

_log = get_logger("host")


@dataclass
class _Session:
    """The client a worker serves now."""

    client: str
    ident: str
    #: Set to stop pinging the client (``start_heartbeat``); None until the pings started.
    heartbeat: threading.Event | None = None


class Worker:
    """A host agent serving one client at a time (see the module docstring)."""

    def __init__(self, root: Root) -> None:
        self.root = root
        self.agent = HostAgent(root, "")
        self.session: _Session | None = None
        self.lock = threading.Lock()
        self.closed = threading.Event()
        root.runtime.add_service(_wire.SVC_HOST, self.host_service)
        root.runtime.add_service(_wire.SVC_WORKER, self.worker_service)
        root.runtime.on_peer_lost(lambda addr, _err: self.end_if(addr, "its connection dropped"))

    def host_service(self, hdr: _wire.SysHeader, payload: list, conn: Any) -> None:
        """``host`` messages: as a host agent's, but ``shutdown`` ends the client's session, not the worker."""
        if hdr.op == "shutdown":
            session = self.session
            if session is not None:
                threading.Thread(target=self.end, args=(session, "it shut the mesh down"), daemon=True,
                                 name="tetrarch-detach").start()
            return
        self.agent.service(hdr, payload, conn)

    def worker_service(self, hdr: _wire.SysHeader, payload: list, _conn: Any) -> None:
        """``worker``/``attach`` (I/O thread): answered from a thread, which may dial."""
        if hdr.op == "attach":
            request: _wire.WorkerAttach = _serial.loads(payload)
            threading.Thread(target=self.attach, args=(request, hdr), daemon=True, name="tetrarch-attach").start()

    def attach(self, request: _wire.WorkerAttach, hdr: _wire.SysHeader) -> None:
        """Serve ``request.client`` if no other client is attached; answer a ``ProcReady`` or ``DEAD`` and why."""
        runtime = self.root.runtime
        with self.lock:
            current = self.session
            if current is not None:
                if current.client == request.client:
                    busy = (f"this client is attached to the worker at {runtime.address} already (another HostMesh "
                            f"over it is live); shut that HostMesh down first")
                else:
                    busy = (f"the worker at {runtime.address} serves another client (at {current.client}); it takes "
                            f"the next one when that client disconnects or shuts its mesh down")
                runtime.reply(hdr.reply_addr, hdr.reply_port, 0, _wire.DEAD, busy)
                return
            session = self.session = _Session(request.client, request.ident)
            self.agent.client = request.client
        _log.info("worker at %s: serving client %s", runtime.address, request.client)
        ready = _wire.ProcReady(request.ident, runtime.address, os.getpid(), socket.gethostname(),
                                HEARTBEAT_INTERVAL(), FROZEN_TIMEOUT())
        runtime.reply(hdr.reply_addr, hdr.reply_port, 0, _wire.OK, ready)
        heartbeat = start_heartbeat(runtime, request.client, lambda why: self.end(session, why))
        with self.lock:
            session.heartbeat = heartbeat
            if self.session is not session:  # it ended meanwhile
                heartbeat.set()

    def end_if(self, address: str, why: str) -> None:
        """End the session when ``address`` is its client (``why`` says what happened)."""
        session = self.session
        if session is not None and session.client == address:
            threading.Thread(target=self.end, args=(session, why), daemon=True, name="tetrarch-detach").start()

    def end(self, session: _Session, why: str) -> None:
        """End ``session``: kill its procs, tell its client (if it still listens), wait for the next one."""
        with self.lock:
            if self.session is not session:
                return
            self.session = None
            if session.heartbeat is not None:
                session.heartbeat.set()
        _log.info("worker at %s: client %s is gone (%s); killing its procs", self.root.runtime.address,
                  session.client, why)
        self.agent.kill_all(grace=2.0)
        report_exit(self.root.runtime, session.client, session.ident, 0, "")

    def close(self) -> None:
        session = self.session
        if session is not None:
            self.end(session, "the worker is exiting")
        self.agent.kill_all(grace=2.0)
        self.root.close()


def run_worker_loop_forever(*, address: str, ca: Any = None, private_key: Any = None,
                            secret_file: str | os.PathLike[str] | None = None) -> None:
    """Serve this machine as a host to one client at a time, forever (Monarch's worker loop).

    Listens on ``address`` (``tcp://10.0.0.2:26600``: the interface clients dial, never
    a wildcard; port 0 picks a free port), prints ``tetrarch worker listening at <address>``
    on stdout, and accepts only clients that prove they hold the secret of
    ``secret_file`` (the same file the client gives ``attach_to_workers``). A client
    attaches, spawns procs; when it goes away (disconnect, unanswered heartbeats for
    ``TETRARCH_ORPHAN_TIMEOUT``, or ``HostMesh.shutdown()``) its procs are killed and the
    worker waits for the next client. Returns only on SIGTERM or Ctrl-C, after killing
    the procs.

    Raises:
        ArgumentError: ``ca="trust_all_connections"``, or a wildcard / alias address.
        NotSupportedError: TLS arguments (``ca=`` a certificate, ``private_key=``).
        UsageError: this process already runs tetrarch (a client or a proc).
        SecretError: no usable secret file (the message says how to make one).
        TransportError: the address cannot be bound.
    """
    who = "run_worker_loop_forever"
    check_tls(ca, private_key, who)
    check_address(address, who)
    secret = read_secret_file(secret_file, who)
    running = root_if_any()
    if running is not None:
        raise UsageError(f"{who} must run in a process of its own: this one already runs tetrarch (as "
                         f"{running.role}); start the worker with python -c or a script")
    spec = get_registry().select(BackendKind.TRANSPORT, TRANSPORT(), address=address)
    if not is_loopback(address):
        os.environ[ENV_SPANS_HOSTS.name] = "1"  # its procs listen where the client can reach them
    set_process_title(f"tetrarch worker {address}")
    root = Root("host", secret, spec.name, "worker", listen_address=address)
    install_root(root)
    worker = Worker(root)
    stop = threading.Event()
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set()) if main else None
    print(f"tetrarch worker listening at {root.runtime.address}", flush=True)
    try:
        while not stop.wait(3600):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        worker.close()
        if main:
            signal.signal(signal.SIGTERM, previous)
    print("tetrarch worker stopped", file=sys.stderr, flush=True)
