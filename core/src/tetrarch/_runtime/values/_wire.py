"""Every message kind on the wire, declared once with named fields.

A message is ``[header, *payload]``. The header is one of the three ``*Header`` records
below, pickled by the C pickler as a *plain* tuple (:func:`encode`), so the bytes stay
as compact as a hand-written tuple; :func:`decode` rebuilds the named record.
The payload is what :func:`tetrarch._runtime.values._serial.dumps` produced (possibly empty);
for ``SYS`` messages it is one of the payload records further down.

Readers use field names, never positions: adding a field is an edit to this file and
to the places that build the record.
"""

from __future__ import annotations

import pickle
from typing import Any, NamedTuple

__all__ = [
    "BATCH",
    "CALL",
    "DEAD",
    "ERR",
    "OK",
    "PORT",
    "SVC_HOST",
    "SVC_LAUNCH",
    "SVC_OUTPUT",
    "SVC_PORT",
    "SVC_PROC",
    "SVC_RELAY",
    "SVC_STACK",
    "SVC_SUPERVISE",
    "SVC_WORKER",
    "SYS",
    "CallHeader",
    "ErrorRecord",
    "FailureRecord",
    "Header",
    "KillProcs",
    "OutputLines",
    "OutputMode",
    "PortHeader",
    "ProcCommand",
    "ProcExit",
    "ProcFrozen",
    "ProcReady",
    "ProcSpec",
    "RelayCast",
    "SpawnMeta",
    "SpawnProcs",
    "SysHeader",
    "WorkerAttach",
    "call_header",
    "decode",
    "encode",
    "port_header",
    "sys_header",
    "trace_of",
]

# -- message kinds (first field of every header) ---------------------------------
CALL = 1  #: an endpoint call to one actor
PORT = 2  #: a value, error or death notice for a port (a call's reply port or a Channel's)
SYS = 3  #: control plane, handled on the I/O thread by a registered service

# -- PORT statuses -------------------------------------------------------------
OK = 0  #: payload: the value
ERR = 1  #: payload: an :class:`ErrorRecord` (the endpoint raised; the caller gets ActorError)
DEAD = 2  #: payload: a string saying why the target is gone (the caller gets SupervisionError)
#: payload: the ``OK`` replies of several ranks, gathered by a relay (:mod:`..services._relay`):
#: an index frame (``((tags, frame count), ...)``, one group per distinct value) and the groups' frames
BATCH = 3

# -- SYS services and their ops ------------------------------------------------------
SVC_PROC = "proc"  #: actors of a process: ``spawn`` (SpawnMeta + class), ``stop_actor`` (key), ``stop``
#: processes this one started: ``ready`` (ProcReady), ``exit`` (ProcExit), ``frozen`` (ProcFrozen), ``ping``
SVC_LAUNCH = "launch"
#: a host agent: ``spawn_procs`` (SpawnProcs), ``kill_procs`` (KillProcs), ``output_mode`` (OutputMode), ``shutdown``
SVC_HOST = "host"
#: procs' output: ``lines`` (a list of OutputLines, host agent to owner; answered once printed: the
#: sender's credit), ``level`` (an int: the root logger's level in a proc; answered)
SVC_OUTPUT = "output"
SVC_SUPERVISE = "supervise"  #: supervision: ``failure`` (FailureRecord)
SVC_PORT = "port"  #: ports: ``link`` (the sender holds a port of ours; watch it)
#: an idle worker started by ``run_worker_loop_forever``: ``attach`` (:class:`WorkerAttach`), answered
#: ``OK`` (it then serves the client keyed with its secret and reports ready) or ``DEAD`` and why
SVC_WORKER = "worker"
#: a host agent relays mesh calls to its procs: ``cast`` (:class:`RelayCast` + the call's payload)
SVC_RELAY = "relay"
#: a host agent's py-spy dumps of its procs: ``dump`` (a pickled pid), answered with a dict
SVC_STACK = "stack"


class CallHeader(NamedTuple):
    """``CALL``: run ``method`` of the actor ``actor`` with the pickled ``(args, kwargs)`` payload."""

    kind: int
    #: The receiving actor's key in its proc.
    actor: str
    #: The endpoint's name.
    method: str
    #: Where the reply goes; None for ``broadcast`` (nobody waits).
    reply_addr: str | None
    #: The reply port at ``reply_addr``; None for ``broadcast``.
    reply_port: int | None
    #: The receiver's index in the mesh slice the call went to (also the reply's tag).
    rank: int
    #: That slice's dimension names ...
    labels: tuple[str, ...]
    #: ... and sizes (``current_rank()`` / ``current_size()`` inside the actor).
    sizes: tuple[int, ...]
    #: The sending router's name as a sender (``Router.origin``) and this message's number in
    #: its stream to the receiving process (1, 2, ...): the receiver delivers each sender's
    #: calls in that order whether they came directly or through a relay. 0: unsequenced.
    origin: str = ""
    seq: int = 0
    #: A traced call's ``(trace id, send span id)`` (:mod:`tetrarch._telemetry._trace`; the receiver adds the
    #: arrival time). An untraced call's encoded header has no such field (it is one field shorter): read it
    #: with :func:`trace_of`.
    trace: tuple[int, ...] | None = None


class PortHeader(NamedTuple):
    """``PORT``: one message for the port ``port`` of the receiving process."""

    kind: int
    #: The port id in the receiving process.
    port: int
    #: The sender's rank for gathered replies (0 for plain ``Port.send``).
    tag: int
    #: :data:`OK`, :data:`ERR` or :data:`DEAD`.
    status: int


class SysHeader(NamedTuple):
    """``SYS``: operation ``op`` of the service ``service`` (``SVC_*``)."""

    kind: int
    service: str
    op: str
    #: Where the answer goes (None: no answer wanted).
    reply_addr: str | None
    reply_port: int | None


Header = CallHeader | PortHeader | SysHeader
_BY_KIND: dict[int, Any] = {CALL: CallHeader, PORT: PortHeader, SYS: SysHeader}
#: The field counts each kind may arrive with (a ``CALL`` without its trailing ``trace`` field when untraced).
_ARITY: dict[int, tuple[int, ...]] = {CALL: (10, 11), PORT: (4,), SYS: (5,)}
_tuple_new = tuple.__new__


def encode(header: Header) -> bytes:
    """The header's bytes: a plain tuple, so no class reference travels."""
    return pickle.dumps(tuple(header), 5)


def decode(data: Any) -> Header:
    """Inverse of :func:`encode`.

    Raises:
        KeyError: unknown message kind.
        TypeError: wrong number of fields for the kind.
    """
    fields = pickle.loads(data)
    kind = fields[0]
    cls = _BY_KIND[kind]
    if len(fields) not in _ARITY[kind]:
        raise TypeError(f"a {cls.__name__} has {len(cls._fields)} fields, got {len(fields)}")
    header: Header = _tuple_new(cls, fields)  # the record without NamedTuple._make's overhead (hot path)
    return header


def call_header(actor: str, method: str, reply_addr: str | None, reply_port: int | None, rank: int,
                labels: tuple[str, ...], sizes: tuple[int, ...], origin: str = "", seq: int = 0,
                trace: tuple[int, int] | None = None) -> bytes:
    """An encoded :class:`CallHeader` (with its ``trace`` field only when the call is traced)."""
    if trace is None:
        return pickle.dumps((CALL, actor, method, reply_addr, reply_port, rank, labels, sizes, origin, seq), 5)
    return pickle.dumps((CALL, actor, method, reply_addr, reply_port, rank, labels, sizes, origin, seq, trace), 5)


def trace_of(hdr: CallHeader) -> tuple[int, ...] | None:
    """The trace field of a decoded call header (None when the call is not traced)."""
    return hdr[10] if len(hdr) > 10 else None


def port_header(port_id: int, tag: int, status: int) -> bytes:
    """An encoded :class:`PortHeader`."""
    return pickle.dumps((PORT, port_id, tag, status), 5)


def sys_header(service: str, op: str, reply_addr: str | None = None, reply_port: int | None = None) -> bytes:
    """An encoded :class:`SysHeader`."""
    return pickle.dumps((SYS, service, op, reply_addr, reply_port), 5)


# -- SYS payload records (pickled as records: the control plane is not hot) --------------
class ErrorRecord(NamedTuple):
    """Payload of an ``ERR`` port message: what an endpoint (or ``Port.exception``) raised."""

    #: The exception, or a ``RemoteException`` standing in for one that cannot be pickled.
    exception: BaseException
    #: The remote traceback, formatted.
    traceback: str
    #: The actor's display name (``trainer{'gpus': 1/4}``).
    actor: str
    #: The endpoint (``__init__`` for a failed spawn, ``port`` for ``Port.exception``).
    method: str


class SpawnMeta(NamedTuple):
    """First payload frame of ``proc``/``spawn`` (the class and its arguments follow)."""

    #: The actor mesh's key (the same in every proc of the mesh).
    key: str
    #: The name the mesh was spawned with.
    name: str
    #: This actor's rank in the mesh.
    rank: int
    labels: tuple[str, ...]
    sizes: tuple[int, ...]
    #: The pickled ProcMesh the actor lives on (b"" when unknown).
    proc_mesh: bytes
    #: Address of the process that owns (supervises) the mesh.
    owner_address: str


class FailureRecord(NamedTuple):
    """Payload of ``supervise``/``failure``: an actor of a mesh (or its proc) failed."""

    mesh_key: str
    mesh_name: str
    rank: int
    #: The failed actor's display name.
    actor: str
    host: str
    pid: int
    cause: str
    #: The earlier failures that led to this one, the root event first (their own
    #: ``causes`` are empty).
    causes: tuple[FailureRecord, ...] = ()
    #: The failed actor's class, module-qualified (``train.Trainer``); '' when unknown.
    actor_class: str = ""
    #: What the actor was running when it failed: an endpoint's name, ``__init__`` or
    #: ``__supervise__``; '' when nothing (or unknown, e.g. its proc died).
    endpoint: str = ""


class ProcReady(NamedTuple):
    """Payload of ``launch``/``ready``: a started proc or host agent is serving."""

    ident: str
    address: str
    pid: int
    hostname: str
    #: The ``TETRARCH_HEARTBEAT_INTERVAL`` it pings its launcher at ...
    heartbeat_s: float = 1.0
    #: ... and the ``TETRARCH_FROZEN_TIMEOUT`` its host agent applies to it (procs).
    frozen_s: float = 8.0


class ProcExit(NamedTuple):
    """Payload of ``launch``/``exit``: a host agent reports how a proc it started ended."""

    ident: str
    #: Exit status; negative: killed by that signal.
    returncode: int
    stderr_tail: str


class ProcFrozen(NamedTuple):
    """Payload of ``launch``/``frozen``: a host agent saw a proc it started stay stopped too long.

    Sent to the proc's owner, which declares the proc dead; the host agent then kills it
    (SIGKILL), and its ``exit`` report follows.
    """

    ident: str
    #: The OS's state letter for it (``/proc/<pid>/stat``): ``T`` stopped, ``t`` stopped by a tracer.
    state: str
    #: Seconds it has been seen in that state (a lower bound: counted from the first sighting).
    stopped_s: float
    #: The ``TETRARCH_FROZEN_TIMEOUT`` the host agent applied to it.
    timeout_s: float


class ProcCommand(NamedTuple):
    """How a host agent starts one proc (``spawn_procs(bootstrap_command=...)``): ``[program, *args]``."""

    program: str
    args: tuple[str, ...]
    #: Set in the proc's environment over everything else.
    env: dict[str, str]


class ProcSpec(NamedTuple):
    """One proc a host agent is asked to start."""

    ident: str
    #: Extra environment (rank variables, settings).
    env: dict[str, str]
    #: Index into the host's visible GPUs, or None.
    gpu: int | None
    #: The command that starts it; None: the host agent's Python running tetrarch's proc main.
    command: ProcCommand | None = None


class SpawnProcs(NamedTuple):
    """Payload of ``host``/``spawn_procs``."""

    #: Address of the process that owns the procs (it gets their ready and exit reports).
    owner: str
    specs: list[ProcSpec]


class KillProcs(NamedTuple):
    """Payload of ``host``/``kill_procs``."""

    idents: list[str]
    signal: int


class OutputLines(NamedTuple):
    """Lines one proc wrote (in order), in a batch of ``output``/``lines`` from its host agent."""

    ident: str
    #: Its mesh's name and its coordinates (``hosts=0 gpus=1``): the prefix of each line.
    mesh: str
    coords: str
    #: ``(fd, line)``: fd 1 (stdout) or 2 (stderr); the line as written, newline included.
    lines: list[tuple[int, bytes]]


class OutputMode(NamedTuple):
    """Payload of ``host``/``output_mode``: where the output of these procs goes from now on."""

    idents: list[str]
    #: True: to their owner, prefixed; False: to the host agent's own stdout and stderr.
    forward: bool


class RelayCast(NamedTuple):
    """First payload frame of ``relay``/``cast``: one mesh call for the procs of the relay's host.

    The relay sends each target a ``CALL`` (the call's payload follows this frame) numbered
    as its sender numbered it. With ``gather`` the replies come back to the relay, which
    sends the ``OK`` ones to ``reply_addr``/``reply_port`` as one :data:`BATCH` once every
    target answered (an error at once, on its own); otherwise each target replies there itself.
    """

    method: str
    reply_addr: str | None
    reply_port: int | None
    labels: tuple[str, ...]
    sizes: tuple[int, ...]
    #: The sender's :attr:`CallHeader.origin`.
    origin: str
    #: ``(proc address, actor key, rank, seq)`` per target: the ``CallHeader`` fields that differ.
    targets: tuple[tuple[str, str, int, int], ...]
    gather: bool
    #: The call's trace field (:attr:`CallHeader.trace`), passed on to each target.
    trace: tuple[int, int] | None = None


class WorkerAttach(NamedTuple):
    """Payload of ``worker``/``attach``: a client asks an idle worker to be its host agent.

    Sent over a connection keyed with the worker secret; the client's own session secret
    travels sealed under it (``_worker_auth.seal_secret``), never in clear.
    """

    #: The client's runtime address (it gets the worker's ready report, heartbeats and its procs' reports).
    client: str
    #: The identity the client tracks the worker under (as a host agent's ``alloc-id/index``).
    ident: str
    #: The sealed session secret: its fresh nonce, the sealed bytes, and their HMAC tag.
    nonce: bytes
    sealed: bytes
    tag: bytes
