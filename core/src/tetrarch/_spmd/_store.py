"""The rendezvous store: a ``torch.distributed.TCPStore`` its owner keeps open.

Monarch (and torchrun's static rendezvous) probe a free port, close it, and let rank 0's
``init_process_group`` bind it later: anything may take the port in between. Here the owner
binds a socket to port 0 itself (the OS picks), hands the listening socket to the TCPStore
(``master_listen_fd``) and keeps the store for as long as it is needed; ranks then connect
as clients (``TORCHELASTIC_USE_AGENT_STORE=True``), as under torchrun's agent.
"""

from __future__ import annotations

import importlib
import importlib.util
import socket
import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .._runtime.process._root import get_root
from .._transport._route import host_of

if TYPE_CHECKING:
    from torch.distributed import TCPStore

__all__ = ["StorePort", "check_port_free", "connect", "master_host", "preload_torch", "require_torch", "start_store"]

#: How long a rank waits for the rendezvous store and the keys of its peers.
STORE_TIMEOUT = timedelta(seconds=300)


class StorePort(int):
    """A port where a rendezvous store already listens (what ``SPMDActor.get_host_port`` returns).

    An ``int`` in every respect; passed to ``setup_env``/``main`` it tells every rank to
    connect to the running store instead of rank 0 binding the port.
    """

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (StorePort, (int(self),))

    def __repr__(self) -> str:
        return int.__repr__(self)


def require_torch() -> None:
    """Raise ``ImportError`` naming the install command unless torch can be imported."""
    if importlib.util.find_spec("torch") is None:
        raise ImportError("tetrarch.spmd runs torch.distributed programs and needs PyTorch: "
                          "pip install torch (in the environment of the client and of every proc)")


def preload_torch() -> None:
    """Start importing ``torch.distributed`` on a background thread, if torch is installed.

    An SPMD actor is spawned well before its first ``main``: rank 0 imports torch in
    ``get_host_port`` while the others would idle, then import it only when ``main`` starts.
    Starting every rank's import at spawn overlaps them (torch's import is ~2 CPU seconds).
    A later ``import torch`` waits for this one (the import lock); failures surface there.
    """
    if importlib.util.find_spec("torch") is None:
        return

    def load() -> None:
        try:
            importlib.import_module("torch.distributed")
        except BaseException:  # noqa: BLE001 - the import in main raises it where it is seen
            pass

    threading.Thread(target=load, name="tetrarch-spmd-preload", daemon=True).start()


def master_host() -> str:
    """The address this proc's peers reach it at: loopback unless its allocation spans hosts."""
    router = get_root().router
    if router.spans_hosts:
        host = host_of(router.address)
        if host and host not in ("0.0.0.0", "::"):
            return host
    return "127.0.0.1"


def start_store(host: str, world_size: int | None = None) -> TCPStore:
    """A TCPStore server on ``host``, on a port the OS picks; open until the store is dropped."""
    from torch.distributed import TCPStore

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, 0))
        sock.listen(1024)
        port = sock.getsockname()[1]
    except BaseException:
        sock.close()
        raise
    return TCPStore(host, port, world_size, is_master=True, timeout=STORE_TIMEOUT,
                    wait_for_workers=False, master_listen_fd=sock.detach())


def connect(host: str, port: int) -> TCPStore:
    """A client of the store at ``host:port``."""
    from torch.distributed import TCPStore

    return TCPStore(host, int(port), is_master=False, timeout=STORE_TIMEOUT)


def check_port_free(host: str, port: int) -> None:
    """Raise if ``port`` cannot be bound on ``host`` now (what rank 0's ``init_process_group`` will do).

    A check, not a reservation: it catches a port already in use before any rank starts
    (otherwise rank 0 fails and the others wait for its store until torch's timeout).

    Raises:
        OSError: the port is in use (``EADDRINUSE``) or ``host`` is not an address of this host.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise OSError(exc.errno, f"master_port {port} on {host} cannot be bound by rank 0 ({exc.strerror}): "
                          "pass a free master_port, or leave master_addr and master_port out (rank 0 then keeps "
                          "a store on a port the OS picks)") from None
