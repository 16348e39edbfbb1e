"""Workers started by anything: ``run_worker_loop_forever`` (Monarch's name), a re-keying host agent.

A worker is a host agent that nobody allocated: a user, systemd, ssh or a batch
script starts it on a host with an address ``A`` to listen on and a *secret file*
holding the worker secret ``W``. It serves one client at a time, forever:

* **idle**: a bare router keyed with ``W`` listens at ``A`` and answers only
  ``worker``/``attach``. A client proves it holds ``W`` in the transport's mutual
  handshake (before anything is unpickled) and sends its own session secret ``C``
  sealed under ``W`` (:func:`~._worker_auth.seal_secret`); the worker checks the seal's
  tag, answers OK and waits (briefly) for the client to hang up that connection.
* **serving**: the idle router closes and a :class:`~._root.Root` keyed with ``C``
  listens at the same ``A``; from there the worker is a host agent of that client like
  an allocated one: it reports ready, pings the client, starts procs that hold ``C``
  (so they talk to the client's other procs), forwards their output, reports their exits.
  Another client that dials meanwhile fails the handshake (it holds ``W``, not ``C``).
* **end of the session** (the client's connection drops, its heartbeats go unanswered,
  or it shuts the mesh down): the procs are killed, the ``C`` root closes and the worker
  is idle again, keyed with ``W`` at ``A``.

Every transition runs on one thread (:meth:`Worker._run`), in the order the events came.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from ..._config import ENV_SPANS_HOSTS, TRANSPORT
from ..._errors import UsageError
from ..._log import get_logger
from ..._plugins import get_registry
from ..._plugins._specs import BackendKind
from ..._transport._backoff import Backoff
from ..._transport._base import TransportError
from ..meshes._worker_auth import (
    SealedSecret,
    check_address,
    check_tls,
    fresh_transport,
    is_loopback,
    read_secret_file,
    unseal_secret,
)
from ..plumbing._secret import SecretError
from ..process._root import Root, install_root, native_address, root_if_any
from ..router._router import PeerUnreachable, Router
from ..services._launch import announce_ready, report_exit, start_heartbeat
from ..services._output import set_process_title
from ..values import _serial, _wire
from ._host_agent import HostAgent

__all__ = ["Worker", "run_worker_loop_forever"]

_log = get_logger("host")
T = TypeVar("T")

#: Seconds a worker keeps retrying to listen at its address again (the router it just
#: closed may hold it a moment longer: transports close their listeners on their own thread).
REBIND_S = 10.0
#: Seconds an accepted client has to hang up its attach connection before the worker re-keys anyway.
DEPART_S = 5.0


@dataclass
class _Session:
    """The client a worker serves now, and the root keyed with its secret."""

    client: str
    ident: str
    root: Root
    agent: HostAgent
    #: Set to stop pinging the client (``start_heartbeat``); None until the pings started.
    heartbeat: threading.Event | None = None


def _report_end(session: _Session, transport_name: str) -> None:
    """Tell the client of ``session`` (if it still listens) that the session ended, from a short-lived
    router keyed with its secret (the session's root is closed: the worker is idle again)."""
    transport = fresh_transport(transport_name)
    try:
        helper = Router(transport, session.root.secret, name="worker-detach", lead_waiters=False)
    except TransportError:
        transport.close()
        return
    try:
        report_exit(helper, session.client, session.ident, 0, "")
    finally:
        _close_router(helper)


def _close_router(router: Router) -> None:
    """Close ``router`` and its transport (a worker makes a fresh one per state)."""
    router.close()
    router.transport.close()


class Worker:
    """A host agent serving one client at a time (see the module docstring).

    Raises (the constructor):
        TransportError: ``address`` cannot be bound.
    """

    def __init__(self, address: str, secret: bytes, transport: str) -> None:
        self.secret = secret
        self.transport_name = transport
        self.spans_hosts = not is_loopback(address)
        self.events: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.session: _Session | None = None
        self.departed: dict[str, threading.Event] = {}  # attach connection's address -> set when it dropped
        self.idle: Router | None = self._idle_router(address)
        self.address = self.idle.address  # the bound address (port 0 resolved): every later state listens here
        #: Set when the worker stops: SIGTERM, or a failure to listen again (``failure`` then says why).
        self.finished = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="tetrarch-worker", daemon=True)
        self.thread.start()

    # -- states -------------------------------------------------------------------
    def _idle_router(self, address: str) -> Router:
        """A router keyed with the worker secret at ``address`` that answers only ``worker``/``attach``.

        Raises:
            TransportError: ``address`` cannot be bound.
        """
        transport = fresh_transport(self.transport_name)
        try:
            router = Router(transport, self.secret, name="worker", spans_hosts=self.spans_hosts,
                            listen_address=native_address(transport, address))
        except BaseException:
            transport.close()
            raise
        router.add_service(_wire.SVC_WORKER, partial(self._worker_service, router))
        router.on_peer_lost(lambda addr, _err: self._departed(addr))
        return router

    def _listen_again(self, make: Callable[[str], T]) -> T:
        """``make(self.address)``, retried for up to ``REBIND_S`` while the address is still taken.

        Raises:
            TransportError: it stayed taken.
        """
        backoff = Backoff(REBIND_S)
        while True:
            try:
                return make(self.address)
            except TransportError:
                if not backoff.wait():  # the old listener closes on its own thread: try again
                    raise

    # -- the idle router's handlers (its I/O thread) --------------------------------
    def _worker_service(self, router: Router, hdr: _wire.SysHeader, payload: list, _conn: Any) -> None:
        """``worker`` messages: ``attach`` is queued for the worker thread; anything else is refused."""
        if hdr.op != "attach":
            router.reply_later(hdr.reply_addr, hdr.reply_port, 0, _wire.DEAD,
                               f"the worker at {self.address} answers only worker/attach while idle")
            return
        try:
            request = _serial.loads(payload)  # the peer proved it holds the worker secret
        except Exception as exc:  # noqa: BLE001 - answered
            request = exc
        if not isinstance(request, _wire.WorkerAttach):
            router.reply_later(hdr.reply_addr, hdr.reply_port, 0, _wire.DEAD,
                               f"the worker at {self.address} got a malformed attach request ({request!r:.200})")
            return
        self.events.put(("attach", router, request, hdr))

    def _departed(self, address: str) -> None:
        event = self.departed.get(address)
        if event is not None:
            event.set()

    # -- the worker thread ---------------------------------------------------------
    def _run(self) -> None:
        while True:
            event = self.events.get()
            try:
                if event[0] == "attach":
                    self._attach(*event[1:])
                elif event[0] == "end":
                    self._end(*event[1:])
                else:  # "stop"
                    self._shut()
                    return
            except BaseException as exc:  # noqa: BLE001 - the worker cannot go on: run_worker_loop_forever raises it
                _log.exception("worker at %s: cannot go on", self.address)
                self.failure = exc
                self.finished.set()
                try:
                    self._shut()
                except Exception:  # noqa: BLE001 - already failing: the first error is the one raised
                    _log.exception("worker at %s: closing after the failure failed too", self.address)
                return

    def _attach(self, router: Router, request: _wire.WorkerAttach, hdr: _wire.SysHeader) -> None:
        """Check ``request``'s seal; if good, re-key as the client's host agent and report ready to it."""
        if router is not self.idle:
            return  # queued before an earlier attach took the worker
        try:
            client_secret = unseal_secret(self.secret, SealedSecret(request.nonce, request.sealed, request.tag))
        except SecretError as exc:
            _log.warning("worker at %s: refused an attach from %s: %s", self.address, request.client, exc)
            router.reply(hdr.reply_addr, hdr.reply_port, 0, _wire.DEAD,
                         f"the worker at {self.address} refused the attach: {exc}")
            return
        departed = self.departed[hdr.reply_addr or ""] = threading.Event()
        router.reply(hdr.reply_addr, hdr.reply_port, 0, _wire.OK, None)
        departed.wait(DEPART_S)  # the client hangs up once it has the answer: nothing of ours is left unsent
        self.departed.clear()
        self.idle = None
        _close_router(router)
        root = self._listen_again(lambda a: Root("host", client_secret, self.transport_name, "worker",
                                                 listen_address=a, own_transport=True))
        install_root(root)
        session = _Session(request.client, request.ident, root, HostAgent(root, request.client))
        root.router.add_service(_wire.SVC_HOST, partial(self._host_service, session))
        root.router.on_peer_lost(lambda addr, _err: self._end_later(session, "its connection dropped")
                                  if addr == session.client else None)
        self.session = session
        _log.info("worker at %s: serving client %s", self.address, request.client)
        try:
            announce_ready(root.router, request.client, request.ident)
        except PeerUnreachable as exc:
            self._end(session, f"it is unreachable: {exc}")
            return
        session.heartbeat = start_heartbeat(root.router, request.client, partial(self._end_later, session))

    def _host_service(self, session: _Session, hdr: _wire.SysHeader, payload: list, conn: Any) -> None:
        """``host`` messages: as a host agent's, but ``shutdown`` ends the client's session, not the worker."""
        if hdr.op == "shutdown":
            self._end_later(session, "it shut the mesh down")
        else:
            session.agent.service(hdr, payload, conn)

    def _end_later(self, session: _Session, why: str) -> None:
        self.events.put(("end", session, why))

    def _end(self, session: _Session, why: str, *, idle_after: bool = True) -> None:
        """End ``session``: kill its procs, tell its client (if it still listens), close its root, go idle.

        Raises:
            TransportError: the worker cannot listen at its address again.
        """
        if self.session is not session:
            return
        self.session = None
        if session.heartbeat is not None:
            session.heartbeat.set()
        _log.info("worker at %s: client %s is gone (%s); killing its procs", self.address, session.client, why)
        session.agent.kill_all(grace=2.0)  # each proc's exit is reported to its owner
        session.agent.output.close()
        session.root.close()  # and its transport
        if idle_after:
            self.idle = self._listen_again(self._idle_router)
        # Only now: a client whose shutdown returns on this report may attach again at once.
        threading.Thread(target=_report_end, args=(session, self.transport_name), name="tetrarch-detach",
                         daemon=True).start()

    def _shut(self) -> None:
        """End the session (without going idle again) and close the idle router (worker thread)."""
        if self.session is not None:
            self._end(self.session, "the worker is exiting", idle_after=False)
        if self.idle is not None:
            _close_router(self.idle)
            self.idle = None

    def close(self) -> None:
        """Stop serving: kill the procs of the client served now and stop listening."""
        self.events.put(("stop",))
        self.thread.join(REBIND_S + 30)


def run_worker_loop_forever(*, address: str, ca: Any = None, private_key: Any = None,
                            secret_file: str | os.PathLike[str] | None = None) -> None:
    """Serve this machine as a host to one client at a time, forever (Monarch's worker loop).

    Listens on ``address`` (``tcp://10.0.0.2:26600``: the interface clients dial, never
    a wildcard; port 0 picks a free port), prints ``tetrarch worker listening at <address>``
    on stdout, and admits only clients that prove they hold the secret of ``secret_file``
    (the same file the client gives ``attach_to_workers``). An admitted client hands over
    its own session secret (sealed), and the worker serves it keyed with that one, at the
    same address: its procs share the client's secret. When the client goes away
    (disconnect, unanswered heartbeats for ``TETRARCH_ORPHAN_TIMEOUT``, or
    ``HostMesh.shutdown()``) its procs are killed and the worker waits for the next client,
    keyed with the file's secret again. Returns only on SIGTERM or Ctrl-C, after killing
    the procs.

    Raises:
        ArgumentError: ``ca="trust_all_connections"``, or a wildcard / alias address.
        NotSupportedError: TLS arguments (``ca=`` a certificate, ``private_key=``).
        UsageError: this process already runs tetrarch (a client or a proc).
        SecretError: no usable secret file (the message says how to make one).
        TransportError: the address cannot be bound (at start, or again after a session).
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
    worker = Worker(address, secret, spec.name)
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, lambda *_: worker.finished.set()) if main else None
    print(f"tetrarch worker listening at {worker.address}", flush=True)
    try:
        while not worker.finished.wait(3600):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        worker.close()
        if main:
            signal.signal(signal.SIGTERM, previous)
    if worker.failure is not None:
        raise worker.failure
    print("tetrarch worker stopped", file=sys.stderr, flush=True)
