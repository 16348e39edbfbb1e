"""The ``verbs`` RDMA backend: RC queue pairs, one-sided RDMA READ / WRITE, completion polling.

One process opens one device (``_devices.select``: ``TETRARCH_RDMA_DEVICE``, else the NIC
nearest this process's GPU, else the first active port), one protection domain, one
completion queue and one poller thread that posts every work request and reaps every
completion (pyverbs objects are only touched there after set-up).

* **register** (owner): ``ibv_reg_mr`` of the region (CPU) or ``ibv_reg_dmabuf_mr`` of its
  dma-buf (GPU memory, exported by ``tetrarch.plugins.rdma.export_dmabuf``); the context is
  ``{iova, rkey, len}``. ``deregister`` closes the MR, so the NIC refuses the key from then on
  (an initiator gets ``IBV_WC_REM_ACCESS_ERR``, mapped to "ask the owner for a fresh buffer").
* **connect** (initiator, first transfer to an owner): create an RC QP, move it to INIT, send
  its endpoint (GID, LID, QPN, PSN, MTU) with ``host.call``; the owner creates its own QP,
  moves it to RTR/RTS towards ours and replies its endpoint; ours then goes to RTR/RTS.
* **transfer**: the local memory is registered for the transfer, split into chunks of at most
  ``rdma_chunk_size`` bytes (and the port's ``max_msg_sz``), at most ``verbs_max_wr`` work
  requests in flight per QP. A failed completion fails the transfer with its status
  (``_status``); a QP that failed, or a transfer past its deadline, is moved to the error
  state so the rest flush, and the next transfer to that owner connects a new QP.
"""

from __future__ import annotations

import collections
import itertools
import os
import random
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tetrarch.plugins.rdma import LocalRegion, MemoryKind, RdmaBackend, RdmaHost, RemoteRegion, export_dmabuf

from ._devices import Selection, gid_index, select
from ._import import import_pyverbs
from ._plugin import RDMA_CHUNK_SIZE, RDMA_DEVICE, VERBS_MAX_WR
from ._status import VerbsError, wc_error
from ._wire import Endpoint, RegionContext, parse_context, parse_endpoint

__all__ = ["VerbsRdmaBackend"]

_CONNECT_TIMEOUT = 30.0
_IDLE_WAIT = 0.05  # the poller's wait for new work when nothing is in flight (woken at once by new work)


def _gpu_pci() -> str | None:
    """The PCI address of this process's current GPU, when torch has CUDA initialised already."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized():
            return None
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        return f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
    except Exception:  # noqa: BLE001 - no GPU affinity then
        return None


@dataclass(eq=False)
class _Conn:
    """An initiator's connected QP to one owner."""

    qp: Any
    owner: str
    inflight: int = 0
    broken: str = ""
    queue: collections.deque = field(default_factory=collections.deque)  # transfers waiting to post


@dataclass(eq=False)
class _Transfer:
    fut: Future[None]
    conn: _Conn
    chunks: collections.deque  # (local address, remote address, nbytes) still to post
    lkey: int
    rkey: int
    opcode: int
    what: str
    deadline: float
    mr: Any
    dmabuf_fd: int = -1
    outstanding: int = 0
    error: BaseException | None = None


class VerbsRdmaBackend(RdmaBackend):
    """ibverbs through pyverbs (see the module docstring). Construct, then :meth:`start`."""

    memory_kinds = frozenset({MemoryKind.CPU, MemoryKind.CUDA})

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._mrs: dict[int, Any] = {}
        self._conns: dict[str, Future[_Conn]] = {}
        self._served: dict[tuple[str, int], Any] = {}  # owner side: (peer, peer qpn) -> our QP
        self._wr: dict[int, _Transfer] = {}
        self._ids = itertools.count(1)
        self._ready: collections.deque[_Conn] = collections.deque()

    # ------------------------------------------------------------ set-up
    def start(self, host: RdmaHost) -> None:
        """Open the selected device, a PD, a CQ and the poller thread.

        Raises:
            PyverbsMissing: pyverbs is not installed (the message names python3-pyverbs and PyPI's pyverbs).
            VerbsError: no usable device (the message lists what sysfs shows and the fix).
        """
        super().start(host)
        import_pyverbs()
        import pyverbs.enums as e
        from pyverbs.cq import CQ
        from pyverbs.device import Context
        from pyverbs.pd import PD

        self.e = e
        self.selection: Selection = select(RDMA_DEVICE(), _gpu_pci())
        name, port = self.selection.device.name, self.selection.port
        self.ctx = Context(name=name)
        attr = self.ctx.query_port(port)
        self.port, self.lid, self.mtu = port, int(attr.lid), int(attr.active_mtu)
        self.max_msg = int(attr.max_msg_sz) or (1 << 30)
        self.gid_index = gid_index(self.selection.device, port)
        self.gid = bytes.fromhex(str(self.ctx.query_gid(port, self.gid_index)).replace(":", ""))
        self.pd = PD(self.ctx)
        self.max_wr = max(1, VERBS_MAX_WR())
        self.cq = CQ(self.ctx, 4096)
        self.access = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_WRITE)
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="tetrarch-verbs-connect")
        self._poller = threading.Thread(target=self._poll_loop, name="tetrarch-verbs-poller", daemon=True)
        self._poller.start()

    def _register(self, region: LocalRegion) -> tuple[Any, int, int]:
        """``(mr, iova, dmabuf fd or -1)`` for ``region``."""
        from pyverbs.mr import MR, DmaBufMR

        if region.kind is MemoryKind.CPU:
            return MR(self.pd, region.nbytes, self.access, address=region.address), region.address, -1
        buf = export_dmabuf(region.address, region.nbytes)
        try:
            # pyverbs registers a dma-buf MR with iova = offset: the NIC addresses it from there.
            mr = DmaBufMR(self.pd, region.nbytes, self.access, dmabuf=buf.fd, offset=buf.offset)
        except Exception:
            os.close(buf.fd)
            raise
        return mr, buf.offset, buf.fd

    def register(self, region: LocalRegion, buffer_id: int) -> object:
        """Register ``region`` with the NIC.

        Raises:
            ValueError: the NIC refused the registration (e.g. memlock limit: raise ``ulimit -l``).
        """
        try:
            mr, iova, fd = self._register(region)
        except Exception as exc:
            raise ValueError(f"verbs could not register {region.nbytes} bytes of {region.kind.value} memory on "
                             f"{self.selection.device.name}: {exc} (check `ulimit -l`, the locked-memory limit)"
                             ) from exc
        if fd >= 0:
            os.close(fd)  # the MR holds the pages
        with self._lock:
            self._mrs[buffer_id] = mr
        return RegionContext(iova, int(mr.rkey), region.nbytes).to_builtins()

    def deregister(self, buffer_id: int) -> None:
        with self._lock:
            mr = self._mrs.pop(buffer_id, None)
        if mr is not None:
            try:
                mr.close()
            except Exception:  # noqa: BLE001 - must not raise
                pass

    # ------------------------------------------------------------ queue pairs
    def _new_qp(self) -> Any:
        from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

        e = self.e
        cap = QPCap(max_send_wr=self.max_wr, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
        qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap, sq_sig_all=1))
        attr = QPAttr()
        attr.port_num = self.port
        attr.qp_access_flags = self.access
        qp.to_init(attr)
        return qp

    def _endpoint(self, qp: Any, psn: int) -> Endpoint:
        return Endpoint(self.gid, self.lid, int(qp.qp_num), psn, self.mtu, self.port)

    def _to_rts(self, qp: Any, peer: Endpoint, my_psn: int) -> None:
        from pyverbs.addr import GID, AHAttr, GlobalRoute
        from pyverbs.qp import QPAttr

        attr = QPAttr()
        attr.path_mtu = min(self.mtu, peer.mtu)
        attr.dest_qp_num = peer.qpn
        attr.rq_psn = peer.psn
        attr.max_dest_rd_atomic = 16
        attr.min_rnr_timer = 12
        roce = self.selection.device.ports.get(self.port, ("", ""))[1] == "Ethernet"
        if roce or (any(peer.gid[:8]) and peer.lid == 0):
            gid = ":".join(peer.gid.hex()[i:i + 4] for i in range(0, 32, 4))
            grh = GlobalRoute(dgid=GID(gid), sgid_index=self.gid_index, hop_limit=64)
            attr.ah_attr = AHAttr(dlid=peer.lid, port_num=self.port, is_global=1, grh=grh)
        else:
            attr.ah_attr = AHAttr(dlid=peer.lid, port_num=self.port)
        qp.to_rtr(attr)
        attr.timeout, attr.retry_cnt, attr.rnr_retry = 14, 7, 7
        attr.sq_psn = my_psn
        attr.max_rd_atomic = 16
        qp.to_rts(attr)

    def on_request(self, peer: str, request: object) -> object:
        """Owner side: ``connect`` (build our QP towards the peer's, reply our endpoint) or ``disconnect``.

        Raises:
            VerbsError: a malformed request, or the QP could not be brought up.
        """
        if isinstance(request, dict) and request.get("op") == "disconnect":
            with self._lock:
                qp = self._served.pop((peer, request.get("qpn")), None)  # type: ignore[arg-type]
            if qp is not None:
                qp.close()
            return None
        theirs = parse_endpoint(request)
        qp = self._new_qp()
        psn = random.getrandbits(24)
        try:
            self._to_rts(qp, theirs, psn)
        except Exception as exc:
            qp.close()
            raise VerbsError(f"the owner could not connect its queue pair to {peer}: {exc}") from exc
        with self._lock:
            old = self._served.pop((peer, theirs.qpn), None)
            self._served[(peer, theirs.qpn)] = qp
        if old is not None:
            old.close()
        return self._endpoint(qp, psn).to_builtins()

    def _connect(self, owner: str) -> _Conn:
        qp = self._new_qp()
        psn = random.getrandbits(24)
        try:
            reply = self.host.call(owner, self._endpoint(qp, psn).to_builtins(), _CONNECT_TIMEOUT).result()
            self._to_rts(qp, parse_endpoint(reply), psn)
        except Exception as exc:
            qp.close()
            raise VerbsError(f"could not connect a queue pair to the owner at {owner}: {exc}") from exc
        return _Conn(qp, owner)

    def _conn(self, owner: str) -> Future[_Conn]:
        with self._lock:
            fut = self._conns.get(owner)
            if fut is None or (fut.done() and (fut.exception() is not None or fut.result().broken)):
                fut = self._conns[owner] = self._pool.submit(self._connect, owner)
        return fut

    # ------------------------------------------------------------ transfers
    def can_reach(self, remote: RemoteRegion) -> str | None:
        try:
            parse_context(remote.context)
        except VerbsError as exc:
            return str(exc)
        return None

    def read(self, remote: RemoteRegion, offset: int, dst: LocalRegion, deadline: float) -> Future[None]:
        return self._start(remote, offset, dst, deadline, write=False)

    def write(self, remote: RemoteRegion, offset: int, src: LocalRegion, deadline: float) -> Future[None]:
        return self._start(remote, offset, src, deadline, write=True)

    def _start(self, remote: RemoteRegion, offset: int, local: LocalRegion, deadline: float,
               write: bool) -> Future[None]:
        ctx = parse_context(remote.context)  # raises VerbsError before anything is posted
        fut: Future[None] = Future()
        verb = "RDMA WRITE" if write else "RDMA READ"
        what = (f"{verb} of {local.nbytes} bytes {'to' if write else 'from'} buffer {remote.buffer_id} at "
                f"{remote.owner.address}")

        def go(cf: Future[_Conn]) -> None:
            try:
                conn = cf.result()
                mr, iova, fd = self._register(local)
            except Exception as exc:  # noqa: BLE001 - the transfer's future carries it
                fut.set_exception(exc if isinstance(exc, VerbsError) else VerbsError(f"{what}: {exc}"))
                return
            step = max(1, min(RDMA_CHUNK_SIZE(), self.max_msg))
            chunks = collections.deque(
                (iova + rel, ctx.iova + offset + rel, min(step, local.nbytes - rel))
                for rel in range(0, local.nbytes, step))
            t = _Transfer(fut, conn, chunks, int(mr.lkey), ctx.rkey,
                          self.e.IBV_WR_RDMA_WRITE if write else self.e.IBV_WR_RDMA_READ, what, deadline, mr, fd)
            with self._lock:
                conn.queue.append(t)
                self._ready.append(conn)
                self._wake.notify()

        self._conn(remote.owner.address).add_done_callback(go)
        return fut

    # ------------------------------------------------------------ the poller thread
    def _post(self, conn: _Conn) -> None:
        from pyverbs.wr import SGE, SendWR

        while conn.queue and conn.inflight < self.max_wr and not conn.broken:
            t = conn.queue[0]
            if not t.chunks:
                conn.queue.popleft()
                continue
            local, remote, n = t.chunks.popleft()
            wr_id = next(self._ids)
            wr = SendWR(wr_id=wr_id, opcode=t.opcode, num_sge=1, sg=[SGE(local, n, t.lkey)],
                        send_flags=self.e.IBV_SEND_SIGNALED)
            wr.set_wr_rdma(t.rkey, remote)
            try:
                conn.qp.post_send(wr)
            except Exception as exc:  # noqa: BLE001 - e.g. the QP is in error state
                t.error = t.error or VerbsError(
                    f"{t.what}: posting failed ({exc}); the queue pair is unusable and the next transfer reconnects")
                self._break(conn, str(exc))
                t.chunks.clear()
                self._finish_if_done(t)
                continue
            self._wr[wr_id] = t
            t.outstanding += 1
            conn.inflight += 1

    def _break(self, conn: _Conn, why: str) -> None:
        """Move ``conn``'s QP to the error state (its work requests flush) and let transfers reconnect."""
        if conn.broken:
            return
        conn.broken = why
        for t in conn.queue:
            t.error = t.error or VerbsError(
                f"{t.what}: the queue pair failed before it ran ({why}); retry the transfer")
            t.chunks.clear()
        from pyverbs.qp import QPAttr

        try:
            attr = QPAttr()
            attr.qp_state = self.e.IBV_QPS_ERR
            conn.qp.modify(attr, self.e.IBV_QP_STATE)
        except Exception:  # noqa: BLE001 - already unusable; its requests flush or are gone
            pass
        for t in list(conn.queue):
            self._finish_if_done(t)
        self._pool.submit(self._forget, conn)

    def _forget(self, conn: _Conn) -> None:
        try:
            self.host.call(conn.owner, {"v": 1, "op": "disconnect", "qpn": int(conn.qp.qp_num)}, 5.0)
        except Exception:  # noqa: BLE001 - best effort: the owner drops its QP at close otherwise
            pass

    def _finish_if_done(self, t: _Transfer) -> None:
        if t.outstanding or t.chunks:
            return
        try:
            t.mr.close()
        except Exception:  # noqa: BLE001 - the MR goes with the PD at close otherwise
            pass
        if t.dmabuf_fd >= 0:
            os.close(t.dmabuf_fd)
            t.dmabuf_fd = -1
        if not t.fut.done():
            t.fut.set_exception(t.error) if t.error is not None else t.fut.set_result(None)

    def _poll_loop(self) -> None:
        while True:
            with self._lock:
                while not self._closed and not self._ready and not self._wr:
                    self._wake.wait(_IDLE_WAIT)
                if self._closed:
                    return
                ready = list(dict.fromkeys(self._ready))
                self._ready.clear()
                for conn in ready:
                    self._post(conn)
                n, wcs = self.cq.poll(64)
                for wc in wcs[:n]:
                    self._complete(wc)
                now = time.monotonic()
                for t in {id(t): t for t in self._wr.values()}.values():
                    if now > t.deadline and not t.conn.broken:
                        t.error = t.error or TimeoutError(f"{t.what} missed its deadline")
                        self._break(t.conn, "a transfer missed its deadline")
            if not n:
                time.sleep(0)  # yield the GIL to posting threads between polls

    def _complete(self, wc: Any) -> None:
        t = self._wr.pop(int(wc.wr_id), None)
        if t is None:
            return
        t.outstanding -= 1
        t.conn.inflight -= 1
        if wc.status != self.e.IBV_WC_SUCCESS:
            t.error = t.error or wc_error(int(wc.status), int(wc.vendor_err), t.what)
            t.chunks.clear()
            self._break(t.conn, t.error.args[0] if t.error.args else "failed")
        elif t.conn.queue:
            self._ready.append(t.conn)
        self._finish_if_done(t)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake.notify_all()
        poller = getattr(self, "_poller", None)
        if poller is not None:
            poller.join(timeout=5)
            self._pool.shutdown(wait=False)
        for obj in (*self._served.values(), *self._mrs.values()):
            try:
                obj.close()
            except Exception:  # noqa: BLE001 - must not raise
                pass
        if hasattr(self, "ctx"):
            try:
                self.ctx.close()  # closes what hangs off it (PD, CQ, QPs)
            except Exception:  # noqa: BLE001
                pass
